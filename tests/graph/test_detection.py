"""torchvision detection post-processing exported at static shapes (perfseer.graph.detection).

A tiny detector built from the pieces torchvision's detectors use (a score threshold through
``torch.where``, boolean-mask indexing, ``batched_nms``, ``MultiScaleRoIAlign`` over two levels)
stands in for the full models, whose exports take tens of seconds (``benchmarks/zoo_detection.py`` at tag research-2026-11
extracts every one of them).
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("torchvision") is None:
    pytest.skip("torchvision detectors need the zoo extra (pip install 'perfseer[zoo]')", allow_module_level=True)

from perfseer.sources.zoo import import_zoo  # noqa: E402

import_zoo("torchvision")

import torch  # noqa: E402
from torchvision.ops import MultiScaleRoIAlign  # noqa: E402
from torchvision.ops import boxes as box_ops  # noqa: E402

import onnx  # noqa: E402

import perfseer  # noqa: E402
from perfseer.features.perfgraph import build_perfgraph  # noqa: E402
from perfseer.graph.extract import extract_graph  # noqa: E402
from perfseer.sources.load import load_skeleton  # noqa: E402
from perfseer.graph.onnx_io import Skeleton  # noqa: E402
from helpers import assert_user_error  # noqa: E402
from perfseer.errors import ShapeError  # noqa: E402
from perfseer.features.ops.detection import nms_flops  # noqa: E402

BOXES = 20  # the stated number of boxes a data-dependent selection keeps


class TinyDetector(torch.nn.Module):
    """3x32x32 -> conv (8x16x16) -> conv (8x8x8) -> 64 candidate boxes with scores -> score threshold
    -> boolean mask -> batched NMS -> best 8 -> RoIAlign 2x2 over the two feature maps."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.head = torch.nn.Conv2d(8, 5, 1)
        self.pool = MultiScaleRoIAlign(["a", "b"], output_size=2, sampling_ratio=2)

    def forward(self, x):
        a = self.conv(x)
        b = self.conv2(a)
        out = self.head(b).flatten(2)[0].T  # (64, 5)
        boxes, scores = out[:, :4].abs().cumsum(1), out[:, 4].sigmoid()
        keep = torch.where(scores > 0.05)[0]  # data-dependent: min(64, BOXES) = 20 kept
        boxes, scores = boxes[keep], scores[keep]
        wide = scores > 0.5
        boxes, scores = boxes[wide], scores[wide]  # a boolean mask: 20 kept
        keep = box_ops.batched_nms(boxes, scores, torch.zeros_like(scores, dtype=torch.int64), 0.5)[:8]
        return self.pool({"a": a, "b": b}, [boxes[keep]], [(x.shape[2], x.shape[3])])


@pytest.fixture(scope="module")
def skeleton():
    """The exported skeleton (one export for the module); each use extracts a copy."""
    return load_skeleton(TinyDetector(), input_shape=(3, 32, 32), boxes=BOXES)


def extract(skel, **kwargs):
    proto = onnx.ModelProto()
    proto.CopyFrom(skel.model)
    return build_perfgraph(extract_graph(Skeleton(proto, skel.stripped, skel.source, True), **kwargs))


@pytest.fixture(scope="module")
def tiny(skeleton):
    return extract(skeleton)


def nodes_of(pg, op):
    return [n for n in pg.graph.nodes if n.op_type == op]


def shape(pg, name):
    return pg.graph.tensors[name].shape


def test_selections_keep_the_stated_number_of_boxes(tiny):
    # torch.where(mask) and each x[mask] become a TopK over the mask: 64 -> 20, then twice 20 -> 20
    topk = nodes_of(tiny, "TopK")
    assert [shape(tiny, n.inputs[0]) for n in topk] == [(64,), (20,), (20,)]
    assert [shape(tiny, n.outputs[1]) for n in topk] == [(20,), (20,), (20,)]


def test_nms_keeps_every_box_and_is_costed(tiny):
    (nms,) = nodes_of(tiny, "NonMaxSuppression")
    assert shape(tiny, nms.inputs[0]) == (1, BOXES, 4) and shape(tiny, nms.outputs[0]) == (BOXES, 3)
    i = tiny.graph.nodes.index(nms)
    assert tiny.covered[i]
    assert tiny.x[i, tiny.x.shape[1] - 11] == nms_flops(1, 1, BOXES, BOXES)  # the flops column
    assert nms_flops(1, 1, 20, 20) == 20 * 5 + 3 * 20 + 13 * (20 * 19 - 20 * 19 / 2)


def test_multiscale_roi_align_shares_the_rois_between_levels(tiny):
    aligns = nodes_of(tiny, "RoiAlign")
    # the best 8 boxes, 4 per level; the levels are the 16x16 and 8x8 maps
    assert [shape(tiny, n.inputs[0]) for n in aligns] == [(1, 8, 16, 16), (1, 8, 8, 8)]
    assert [shape(tiny, n.outputs[0]) for n in aligns] == [(4, 8, 2, 2), (4, 8, 2, 2)]
    assert [n.attrs["spatial_scale"] for n in aligns] == [0.5, 0.25]
    assert tiny.uncovered_ops == {} and tiny.precision == "float32"


def test_detectors_are_exported_at_batch_one(tiny, skeleton):
    assert tiny.batch_size == 1
    with pytest.raises(ShapeError) as info:
        extract(skeleton, batch=2)
    assert_user_error(str(info.value), "batch size fixed at 1")


def test_names_of_other_torchvision_families_are_a_clear_error():
    from perfseer.errors import ModelLoadError

    with pytest.raises(ModelLoadError) as info:
        perfseer.extract("torchvision:raft_small")  # optical flow: not a supported family
    assert_user_error(str(info.value), "raft_small", "classification, detection or segmentation")


def test_detection_and_segmentation_names_resolve_to_their_default_inputs():
    from perfseer.sources.zoo import build_zoo_model

    sizes = {name: build_zoo_model("torchvision", name)[1]
             for name in ("fasterrcnn_resnet50_fpn", "ssd300_vgg16", "ssdlite320_mobilenet_v3_large", "fcn_resnet50")}
    assert sizes == {"fasterrcnn_resnet50_fpn": (3, 800, 800), "ssd300_vgg16": (3, 300, 300),
                     "ssdlite320_mobilenet_v3_large": (3, 320, 320), "fcn_resnet50": (3, 520, 520)}
