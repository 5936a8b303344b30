"""Export torchvision detection models (Faster/Mask/Keypoint R-CNN, RetinaNet, SSD, FCOS) at static shapes.

A detector's post-processing keeps a data-dependent number of boxes: a score threshold, the
removal of degenerate boxes and non-maximum suppression (NMS) decide at run time how many
candidates go on.  A PerfGraph needs one number, so the export states it:

* every data-dependent selection (``torch.where(mask)``, ``x[mask]``: score thresholds, the
  removal of small boxes, the FPN level of each RoI) keeps ``min(n, boxes)`` of its ``n``
  candidates, ``boxes`` = :data:`DEFAULT_BOXES` unless stated (``--dim boxes=N``); it is exported
  as a ``TopK`` over the mask, which is what a static-shape deployment runs;
* NMS suppresses nothing (the worst case): it is exported as ONNX ``NonMaxSuppression`` whose
  output keeps every input box, and the model's own ``[:post_nms_top_n]`` / ``[:detections_per_img]``
  slices then bound what follows (1,000 proposals, 100 detections for the R-CNNs);
* RoIAlign is ONNX ``RoiAlign``; a multi-scale RoIAlign (FPN) pools its RoIs in equal shares
  from each level (the real share depends on the box sizes; the cost per RoI does not);
* Mask R-CNN pastes each mask into the image by resizing it to the whole image (an upper bound
  of the per-box resize, with the real output size); Keypoint R-CNN takes each keypoint's best
  heat-map position without first resizing the heat map to its box (a data-dependent size).

The costs of ``NonMaxSuppression``, ``RoiAlign`` and ``TopK`` are in
:mod:`perfseer.features.ops.detection`.  torchvision's own compiled ``nms``/``roi_align`` are
never called (the CPU machine cannot load them, see :mod:`perfseer.sources.zoo`): perfseer defines
``perfseer::nms`` and ``perfseer::roi_align`` with shape-only (fake) kernels for the export.
"""

from __future__ import annotations

import contextlib
import sys

DEFAULT_BOXES = 1000
DETECTION_DIM = "boxes"  # the --dim name that states the number of boxes

_OPS_DEFINED = False
_LIBRARY = None  # kept alive: a Library drops its definitions when collected


def _define_ops() -> None:
    """``perfseer::nms`` and ``perfseer::roi_align``: shape-only custom ops the exporter translates."""
    global _OPS_DEFINED
    if _OPS_DEFINED:
        return
    import torch  # deferred: heavy, loaded on first use

    global _LIBRARY
    _LIBRARY = torch.library.Library("perfseer", "FRAGMENT")
    _LIBRARY.define("nms(Tensor boxes, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARY.define("roi_align(Tensor features, Tensor rois, float spatial_scale, int pooled_height, "
                    "int pooled_width, int sampling_ratio, bool aligned) -> Tensor")

    # Shape-only kernels: the ops are only ever traced (the static stand-in keeps every box).
    @torch.library.register_fake("perfseer::nms", lib=_LIBRARY)
    def _nms_fake(boxes, scores, iou_threshold):
        return boxes.new_empty((boxes.shape[0],), dtype=torch.int64)

    @torch.library.register_fake("perfseer::roi_align", lib=_LIBRARY)
    def _roi_align_fake(features, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
        return features.new_empty((rois.shape[0], features.shape[1], pooled_height, pooled_width))

    _OPS_DEFINED = True


def translation_table() -> dict:
    """ONNX translations of the ``perfseer::`` ops for ``torch.onnx.export(custom_translation_table=...)``."""
    import torch  # deferred: heavy, loaded on first use
    from onnxscript import opset18 as op  # deferred: heavy, loaded on first use

    _define_ops()

    def nms(boxes, scores, iou_threshold: float):
        # ONNX NMS takes [batch, boxes, 4] and [batch, classes, boxes]; the box count itself is
        # the per-class maximum, so no box is dropped for lack of room.
        selected = op.NonMaxSuppression(
            op.Unsqueeze(boxes, op.Constant(value_ints=[0])), op.Unsqueeze(scores, op.Constant(value_ints=[0, 1])),
            op.Shape(boxes, start=0, end=1), op.Constant(value_floats=[iou_threshold]))
        return op.Reshape(op.Gather(selected, op.Constant(value_ints=[2]), axis=1), op.Constant(value_ints=[-1]))

    def roi_align(features, rois, spatial_scale: float, pooled_height: int, pooled_width: int,
                  sampling_ratio: int, aligned: bool):
        batch_index = op.Cast(op.Reshape(op.Slice(rois, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]),
                                                  op.Constant(value_ints=[1])), op.Constant(value_ints=[-1])),
                              to=7)
        coords = op.Slice(rois, op.Constant(value_ints=[1]), op.Constant(value_ints=[5]), op.Constant(value_ints=[1]))
        return op.RoiAlign(features, coords, batch_index, mode="avg", output_height=pooled_height,
                           output_width=pooled_width, sampling_ratio=max(sampling_ratio, 0),
                           spatial_scale=spatial_scale,
                           coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel")

    return {torch.ops.perfseer.nms.default: nms, torch.ops.perfseer.roi_align.default: roi_align}


def is_detection_model(module) -> bool:
    """Whether ``module`` is or contains a torchvision detector or RoI pooler (exported by this module)."""

    if "torchvision" not in sys.modules:  # a module built with torchvision has imported it
        return False
    try:
        from torchvision.models.detection.fcos import FCOS  # deferred: an optional extra
        from torchvision.models.detection.generalized_rcnn import GeneralizedRCNN  # deferred: an optional extra
        from torchvision.models.detection.retinanet import RetinaNet  # deferred: an optional extra
        from torchvision.models.detection.ssd import SSD  # deferred: an optional extra
        from torchvision.ops import MultiScaleRoIAlign, RoIAlign  # deferred: an optional extra
    except Exception:  # noqa: BLE001 - torchvision unimportable: not a torchvision detector
        return False
    kinds = (GeneralizedRCNN, RetinaNet, SSD, FCOS, MultiScaleRoIAlign, RoIAlign)
    return any(isinstance(m, kinds) for m in module.modules())


def _select_first(mask, limit: int):
    """Indices of at most ``limit`` entries of a 1-D ``mask``: a static stand-in for ``nonzero``."""
    import torch  # deferred: heavy, loaded on first use

    n = mask.shape[0]
    k = min(int(n), limit)
    # TopK over the mask: the candidates that pass come first; a static-shape deployment does this.
    return torch.topk(mask.to(torch.float32), k, sorted=False).indices


class _StaticSelection:
    """A ``TorchFunctionMode`` giving ``torch.where(mask)`` and ``x[mask]`` static sizes."""

    def __new__(cls, limit: int):
        import torch  # deferred: heavy, loaded on first use
        from torch.overrides import TorchFunctionMode  # deferred: heavy, loaded on first use

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if func is torch.where and len(args) == 1 and not kwargs and args[0].dim() == 1:
                    return (_select_first(args[0], limit),)
                if (func is torch.Tensor.__getitem__ and len(args) == 2 and isinstance(args[1], torch.Tensor)
                        and args[1].dtype == torch.bool and args[1].dim() == 1 and args[0].dim() >= 1):
                    return func(args[0], _select_first(args[1], limit))
                return func(*args, **kwargs)

        return Mode()


def _batched_nms(boxes, scores, idxs, iou_threshold: float):
    import torch  # deferred: heavy, loaded on first use

    # torchvision's coordinate trick: offset each class's boxes so that classes never overlap,
    # then one NMS over all of them.
    offsets = idxs.to(boxes) * (boxes.max() + 1)
    return torch.ops.perfseer.nms(boxes + offsets[:, None], scores, float(iou_threshold))


def _nms(boxes, scores, iou_threshold: float):
    import torch  # deferred: heavy, loaded on first use

    return torch.ops.perfseer.nms(boxes, scores, float(iou_threshold))


def _remove_small_boxes(boxes, min_size: float):
    import torch  # deferred: heavy, loaded on first use

    ws, hs = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    return torch.where((ws >= min_size) & (hs >= min_size))[0]


def _roi_align(features, rois, output_size, spatial_scale=1.0, sampling_ratio=-1, aligned=False):
    import torch  # deferred: heavy, loaded on first use
    from torch.nn.modules.utils import _pair  # deferred: heavy, loaded on first use
    from torchvision.ops._utils import convert_boxes_to_roi_format  # deferred: an optional extra

    if not isinstance(rois, torch.Tensor):
        rois = convert_boxes_to_roi_format(rois)
    h, w = _pair(output_size)
    return torch.ops.perfseer.roi_align(features, rois, float(spatial_scale), int(h), int(w), int(sampling_ratio),
                                        bool(aligned))


def _multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper):
    import torch  # deferred: heavy, loaded on first use
    from torchvision.ops.poolers import _convert_to_roi_format  # deferred: an optional extra

    rois = _convert_to_roi_format(boxes)
    levels = len(x_filtered)
    n = rois.shape[0]
    bounds = [n * i // levels for i in range(levels + 1)]
    parts = [_roi_align(feat, rois[bounds[i]:bounds[i + 1]], output_size, scale, sampling_ratio)
             for i, (feat, scale) in enumerate(zip(x_filtered, scales)) if bounds[i + 1] > bounds[i]]
    return torch.cat(parts, dim=0)


def _paste_masks_in_image(masks, boxes, img_shape, padding=1):
    import torch.nn.functional as F  # deferred: heavy, loaded on first use

    # Each (M x M) mask is resized into its box and written into an image-size canvas: the output
    # (N, 1, H, W) is real; resizing every mask to the whole image bounds the per-box resize.
    return F.interpolate(masks, size=(int(img_shape[0]), int(img_shape[1])), mode="bilinear", align_corners=False)


def _heatmaps_to_keypoints(maps, rois):
    import torch  # deferred: heavy, loaded on first use

    # The best heat-map position of each keypoint, mapped into its box (torchvision also resizes
    # each heat map to its box first, a data-dependent size this stand-in leaves out).
    n, k, h, w = maps.shape
    score, pos = maps.reshape(n, k, h * w).max(dim=2)
    widths = (rois[:, 2] - rois[:, 0]).clamp(min=1)[:, None]
    heights = (rois[:, 3] - rois[:, 1]).clamp(min=1)[:, None]
    x = (pos % w).to(maps.dtype) * (widths / w) + rois[:, 0:1]
    y = torch.div(pos, w, rounding_mode="floor").to(maps.dtype) * (heights / h) + rois[:, 1:2]
    return torch.stack([x, y, torch.ones_like(x)], dim=2), score


@contextlib.contextmanager
def static_detection(boxes: int = DEFAULT_BOXES):
    """Within this context, torchvision detectors trace at static shapes (see the module docstring)."""
    import torchvision.ops  # deferred: an optional extra
    import torchvision.ops.boxes as box_ops  # deferred: an optional extra
    import torchvision.ops.poolers as poolers  # deferred: an optional extra
    import torchvision.ops.roi_align  # noqa: F401  (the attribute is the function; the module is in sys.modules)

    roi_align_mod = sys.modules["torchvision.ops.roi_align"]

    import torchvision.models.detection.roi_heads as roi_heads  # deferred: an optional extra
    import torchvision.models.detection.transform as transform  # deferred: an optional extra

    _define_ops()
    patches = [(roi_heads, "paste_masks_in_image", _paste_masks_in_image),
               (transform, "paste_masks_in_image", _paste_masks_in_image),
               (roi_heads, "heatmaps_to_keypoints", _heatmaps_to_keypoints),(box_ops, "batched_nms", _batched_nms), (box_ops, "nms", _nms),
               (box_ops, "remove_small_boxes", _remove_small_boxes), (torchvision.ops, "nms", _nms),
               (torchvision.ops, "batched_nms", _batched_nms), (poolers, "_multiscale_roi_align", _multiscale_roi_align),
               (poolers, "roi_align", _roi_align), (roi_align_mod, "roi_align", _roi_align),
               (torchvision.ops, "roi_align", _roi_align)]
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, fn in patches:
        setattr(obj, name, fn)
    try:
        with _StaticSelection(int(boxes)):
            yield
    finally:
        for obj, name, fn in saved:
            setattr(obj, name, fn)
