"""Detection post-processing: ``NonMaxSuppression`` and ``RoiAlign`` (``TopK`` is in ``reduce``).

Their real cost depends on the data (how many boxes overlap); perfseer states the worst case the
exported graph already assumes (:mod:`perfseer.graph.detection`):

``NonMaxSuppression``: boxes (B, N, 4), scores (B, C, N), at most M = ``max_output_boxes_per_class``
boxes kept per class (N if absent), K = min(N, M).  Per batch item and class: sort the scores
(N * ceil(log2 N) compares), the box areas (3 N: two differences and a product), then greedy
suppression in which no box is suppressed, so each of the K kept boxes is compared with every
later candidate: P = K (N - 1) - K (K - 1) / 2 IoUs of 13 FLOPs each (4 min/max for the
intersection corners, 2 differences, 2 clamps at 0, its area, union = sum of areas minus the
intersection (2), the division, the threshold compare); plus N compares against
``score_threshold`` when given.  FLOPs = B C (N ceil(log2 N) + 3 N + 13 P [+ N]); no MACs.

``RoiAlign``: features (N, C, H, W), R RoIs, output (R, C, h, w), S = ``sampling_ratio`` samples
per bin axis (0, adaptive, counts as 2: the ratio torchvision's detectors use).  Per sample point
(R h w S^2 of them) the bilinear weights and corners cost 10 FLOPs, shared by the channels; per
sample and channel 4 products and 4 sums (3 for the interpolation, 1 to accumulate the bin);
per output element 1 division (the average; ``max`` mode: a compare instead).
FLOPs = R h w S^2 (10 + 8 C) + R C h w.  Memory: 4 S^2 feature reads per output element, at most
the whole feature map, plus the RoIs and their batch indices.
"""

from __future__ import annotations

import math

from perfseer.features.ops.registry import NodeView, OpCost, register
from perfseer.graph.ir import FLOAT_DTYPES

IOU_FLOPS = 13
ADAPTIVE_SAMPLING = 2


def nms_flops(batch: int, classes: int, boxes: int, keep: int, score_threshold: bool = False) -> float:
    """FLOPs of NMS over ``boxes`` candidates keeping ``keep`` per class (see the module docstring)."""
    n, k = boxes, min(keep, boxes)
    pairs = k * (n - 1) - k * (k - 1) / 2
    per_class = n * math.ceil(math.log2(n)) if n > 1 else 0
    per_class += 3 * n + IOU_FLOPS * pairs + (n if score_threshold else 0)
    return float(batch) * classes * per_class


@register("NonMaxSuppression")
def non_max_suppression(view: NodeView) -> OpCost:
    boxes, scores = view.inp(0), view.inp(1)
    batch, n = boxes.shape[0], boxes.shape[1]
    classes = scores.shape[1]
    limit = view.inp(2)
    keep = n
    if limit is not None and limit.value is not None and limit.value.size:
        keep = min(n, max(int(limit.value.ravel()[0]), 0))
    threshold = view.inp(4) is not None
    return OpCost(flops=nms_flops(batch, classes, n, keep, threshold),
                  hp={"axis_size": n, "out_features": keep, "in_features": classes})


@register("RoiAlign")
def roi_align(view: NodeView) -> OpCost:
    x, rois, y = view.inp(0), view.inp(1), view.out(0)
    r, c, h, w = y.shape
    s = int(view.attr("sampling_ratio", 0)) or ADAPTIVE_SAMPLING
    points = float(r) * h * w * s * s
    flops = points * (10 + 8 * c) + float(y.numel)
    sampled = min(4.0 * s * s * y.numel, float(x.numel)) * x.itemsize
    # RoIs and batch indices; static float RoIs are already counted as weights read
    extra = sum(t.nbytes for t in view.inputs[1:]
                if t is not None and not (t.kind.is_static and t.dtype in FLOAT_DTYPES))
    mode = 1.0 if view.attr("mode", "avg") == "max" else 0.0
    return OpCost(flops=flops, read_bytes=sampled + extra,
                  hp={"kernel_h": h, "kernel_w": w, "axis_size": r, "in_features": c, "out_features": c,
                      "scale_h": float(view.attr("spatial_scale", 1.0)), "mode": mode})
