"""Resizing (perfseer.features.ops.resize), against hand-computed costs.

FLOPs per output element per axis whose size changes: nearest 0, linear 3, cubic 8.
scale_h / scale_w: output / input size of the last two axes; mode: 0 nearest, 1 linear, 2 cubic.
"""

import numpy as np

from helpers import one_node
from op_testing import F32, I64, check

OPS = ["Resize", "Upsample"]


def f32(*v):
    return np.array(v, np.float32)


def test_resize_nearest_scales():
    # X (2, 3, 4, 4), scales (1, 1, 2, 2) -> Y (2, 3, 8, 8); a gather: 0 FLOPs
    pg = one_node("Resize", {"x": (2, 3, 4, 4)}, {"scales": f32(1, 1, 2, 2)}, input_order=["x", "", "scales"],
                  mode="nearest")
    check(pg, "Resize", flops=0, macs=0, scale_h=2, scale_w=2, mode=0, in_features=3,
          memory_access_bytes=(2 * 3 * 4 * 4 + 4 + 2 * 3 * 8 * 8) * F32)


def test_resize_bilinear_sizes_with_axes():
    # opset 18+ sizes on axes (2, 3): X (1, 2, 4, 6) -> Y (1, 2, 8, 3); both axes change: 2 * 3
    pg = one_node("Resize", {"x": (1, 2, 4, 6)}, {"sizes": np.array([8, 3], np.int64)},
                  input_order=["x", "", "", "sizes"], mode="linear", axes=[2, 3])
    y = 1 * 2 * 8 * 3
    check(pg, "Resize", flops=(2 * 3) * y, scale_h=2, scale_w=0.5, mode=1, in_features=2,
          memory_access_bytes=1 * 2 * 4 * 6 * F32 + 2 * I64 + y * F32)


def test_resize_cubic_one_axis():
    # X (2, 3, 4, 4), scales (1, 1, 1, 2) -> Y (2, 3, 4, 8): only the last axis is interpolated
    pg = one_node("Resize", {"x": (2, 3, 4, 4)}, {"scales": f32(1, 1, 1, 2)}, input_order=["x", "", "scales"],
                  mode="cubic")
    check(pg, "Resize", flops=8 * (2 * 3 * 4 * 8), scale_h=1, scale_w=2, mode=2)


def test_resize_trilinear():
    # X (1, 1, 2, 2, 2), scales (1, 1, 2, 2, 2) -> Y (1, 1, 4, 4, 4): 3 axes * 3 FLOPs
    pg = one_node("Resize", {"x": (1, 1, 2, 2, 2)}, {"scales": f32(1, 1, 2, 2, 2)},
                  input_order=["x", "", "scales"], mode="linear")
    check(pg, "Resize", flops=(3 * 3) * (4 * 4 * 4), scale_h=2, scale_w=2, mode=1)


def test_upsample_opset9_linear():
    # deprecated op, opset 9: scales is an input.  X (1, 3, 4, 4) -> Y (1, 3, 8, 8), bilinear: 6
    pg = one_node("Upsample", {"x": (1, 3, 4, 4)}, {"scales": f32(1, 1, 2, 2)}, opset=9, mode="linear")
    y = 1 * 3 * 8 * 8
    check(pg, "Upsample", flops=(2 * 3) * y, scale_h=2, scale_w=2, mode=1, in_features=3,
          memory_access_bytes=(1 * 3 * 4 * 4 + 4 + y) * F32)


def test_upsample_opset7_nearest_attribute_scales():
    # opset 7: scales is an attribute.  X (2, 3, 4, 4) -> Y (2, 3, 12, 8)
    pg = one_node("Upsample", {"x": (2, 3, 4, 4)}, opset=7, mode="nearest", scales=[1.0, 1.0, 3.0, 2.0])
    check(pg, "Upsample", flops=0, scale_h=3, scale_w=2, mode=0,
          memory_access_bytes=(2 * 3 * 4 * 4 + 2 * 3 * 12 * 8) * F32)
