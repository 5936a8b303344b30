"""Detection post-processing (perfseer.features.ops.detection), against hand-computed costs.

NonMaxSuppression, per batch item and class, N boxes, K = min(N, max_output_boxes_per_class):
N ceil(log2 N) + 3 N + 13 (K (N - 1) - K (K - 1) / 2) [+ N with a score threshold]; the output
is bound to B C K rows (no box suppressed).  RoiAlign: R h w S^2 (10 + 8 C) + R C h w.
"""

import numpy as np

from helpers import make_model, one_node
from op_testing import F32, I64, check
import perfseer
from onnx import helper

OPS = ["NonMaxSuppression", "RoiAlign"]


def test_nms_keeps_max_output_boxes_per_class():
    # boxes (1, 10, 4), scores (1, 2, 10), at most 3 per class: K = 3
    pg = one_node("NonMaxSuppression", {"boxes": (1, 10, 4), "scores": (1, 2, 10)},
                  {"max_out": np.array([3], np.int64), "iou": np.array([0.5], np.float32)})
    per_class = 10 * 4 + 3 * 10 + 13 * (3 * 9 - 3 * 2 // 2)  # sort 40, areas 30, 24 IoUs
    assert per_class == 382
    # the selected indices: 1 * 2 * 3 rows of (batch, class, box), int64
    check(pg, "NonMaxSuppression", flops=2 * per_class, macs=0, output_bytes=6 * 3 * I64, axis_size=10,
          out_features=3, in_features=2)
    assert pg.graph.tensors["y0"].shape == (6, 3)


def test_nms_without_limit_keeps_every_box_and_counts_the_score_threshold():
    # no max_output_boxes_per_class value known (a graph input): K = N = 6; a score threshold adds N
    model = make_model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "m", "iou", "thr"], ["y0"],
                                         name="node")],
                       {"boxes": (1, 6, 4), "scores": (1, 1, 6), "m": ((1,), np.int64)}, ["y0"],
                       {"iou": np.array([0.5], np.float32), "thr": np.array([0.1], np.float32)})
    pg = perfseer.extract(model)
    pairs = 6 * 5 - 6 * 5 / 2  # every kept box against every later one: 15
    check(pg, "NonMaxSuppression", flops=6 * 3 + 3 * 6 + 13 * pairs + 6, output_bytes=6 * 3 * I64)


def test_roi_align():
    # X (1, 4, 8, 8), 5 RoIs, 2x3 bins, 2x2 samples per bin: Y (5, 4, 2, 3) = 120 elements
    model = make_model([helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y0"], name="node", output_height=2,
                                         output_width=3, sampling_ratio=2, spatial_scale=0.25)],
                       {"x": (1, 4, 8, 8), "rois": (5, 4), "idx": ((5,), np.int64)}, ["y0"])
    pg = perfseer.extract(model)
    points = 5 * 2 * 3 * 2 * 2
    # reads: 4 S^2 |Y| = 1920 samples, capped at the 256-element map; RoIs 80 B; indices 40 B
    check(pg, "RoiAlign", flops=points * (10 + 8 * 4) + 120, macs=0, input_bytes=256 * F32 + 5 * 4 * F32 + 5 * I64,
          output_bytes=120 * F32, kernel_h=2, kernel_w=3, axis_size=5, in_features=4, scale_h=0.25, mode=0)


def test_roi_align_adaptive_sampling_counts_two():
    model = make_model([helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y0"], name="node", output_height=1,
                                         output_width=1, mode="max")],
                       {"x": (1, 2, 4, 4), "rois": (3, 4), "idx": ((3,), np.int64)}, ["y0"])
    pg = perfseer.extract(model)
    check(pg, "RoiAlign", flops=3 * 1 * 1 * 4 * (10 + 8 * 2) + 3 * 2, mode=1)
