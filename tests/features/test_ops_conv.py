"""Convolutions (perfseer.features.ops.conv), against hand-computed costs.

Conv: MACs = |Y| * (C_in / groups) * prod(kernel), FLOPs = 2 MACs (+ |Y| with a bias).
ConvTranspose: MACs = |X| * (C_out / groups) * prod(kernel).
pad_h / pad_w hold the total padding of an axis (begin + end); 1-D ops fill the _h slots with 1/0.
"""

import numpy as np

from helpers import one_node
from op_testing import F32, check

OPS = ["Conv", "ConvTranspose"]


def w(*shape):
    return np.zeros(shape, np.float32)


def test_conv_strided_no_bias_batch2():
    # X (2, 3, 9, 9), W (4, 3, 3, 3), stride 2, no pad -> Y (2, 4, 4, 4): (9 - 3) / 2 + 1 = 4
    pg = one_node("Conv", {"x": (2, 3, 9, 9)}, {"w": w(4, 3, 3, 3)}, strides=[2, 2])
    macs = 2 * 4 * 4 * 4 * 3 * 3 * 3
    check(pg, "Conv", macs=macs, flops=2 * macs,
          kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=0, pad_w=0, dilation_h=1, dilation_w=1,
          groups=1, has_bias=0, in_features=3, out_features=4, ceil_mode=0,
          input_bytes=2 * 3 * 9 * 9 * F32, weight_bytes=4 * 3 * 3 * 3 * F32, output_bytes=2 * 4 * 4 * 4 * F32,
          memory_access_bytes=(2 * 3 * 9 * 9 + 4 * 3 * 3 * 3 + 2 * 4 * 4 * 4) * F32,
          params=4 * 3 * 3 * 3)


def test_conv_grouped_dilated_asymmetric_pads_bias():
    # X (1, 4, 10, 10), W (6, 2, 3, 3), group 2, dilation 2, pads (h: 1+1, w: 2+2), bias (6,)
    # effective kernel 2 * (3 - 1) + 1 = 5: H = 10 + 2 - 5 + 1 = 8, W = 10 + 4 - 5 + 1 = 10
    pg = one_node("Conv", {"x": (1, 4, 10, 10)}, {"w": w(6, 2, 3, 3), "b": w(6)},
                  group=2, dilations=[2, 2], pads=[1, 2, 1, 2])
    y = 1 * 6 * 8 * 10
    macs = y * 2 * 3 * 3  # C_in / groups = 4 / 2 = 2
    check(pg, "Conv", macs=macs, flops=2 * macs + y,
          kernel_h=3, kernel_w=3, dilation_h=2, dilation_w=2, pad_h=2, pad_w=4, groups=2, has_bias=1,
          in_features=4, out_features=6,
          memory_access_bytes=(1 * 4 * 10 * 10 + 6 * 2 * 3 * 3 + 6 + y) * F32, params=6 * 2 * 3 * 3 + 6)


def test_conv_depthwise():
    # X (1, 8, 6, 6), W (8, 1, 3, 3), group 8, pad 1 -> Y (1, 8, 6, 6)
    pg = one_node("Conv", {"x": (1, 8, 6, 6)}, {"w": w(8, 1, 3, 3)}, group=8, pads=[1, 1, 1, 1])
    macs = 1 * 8 * 6 * 6 * 1 * 3 * 3
    check(pg, "Conv", macs=macs, flops=2 * macs, groups=8, in_features=8, out_features=8, pad_h=2, pad_w=2,
          memory_access_bytes=(8 * 36 + 8 * 9 + 8 * 36) * F32)


def test_conv_auto_pad_same_upper():
    # X (1, 3, 7, 7), W (4, 3, 3, 3), stride 2, SAME_UPPER -> Y (1, 4, 4, 4): ceil(7 / 2) = 4
    # total padding per axis = (4 - 1) * 2 + 3 - 7 = 2
    pg = one_node("Conv", {"x": (1, 3, 7, 7)}, {"w": w(4, 3, 3, 3)}, strides=[2, 2], auto_pad="SAME_UPPER")
    macs = 1 * 4 * 4 * 4 * 3 * 3 * 3
    check(pg, "Conv", macs=macs, flops=2 * macs, pad_h=2, pad_w=2, stride_h=2, stride_w=2)


def test_conv_1d():
    # X (2, 3, 16), W (5, 3, 4), stride 2, pads 1 + 0 -> Y (2, 5, 7): (16 + 1 - 4) // 2 + 1 = 7
    # a 1-D window fills the _w slots; the _h slots hold 1 (kernel, stride, dilation) and 0 (pad)
    pg = one_node("Conv", {"x": (2, 3, 16)}, {"w": w(5, 3, 4)}, strides=[2], pads=[1, 0])
    macs = 2 * 5 * 7 * 3 * 4
    check(pg, "Conv", macs=macs, flops=2 * macs, kernel_h=1, kernel_w=4, stride_h=1, stride_w=2,
          pad_h=0, pad_w=1, dilation_h=1, dilation_w=1, in_features=3, out_features=5,
          memory_access_bytes=(2 * 3 * 16 + 5 * 3 * 4 + 2 * 5 * 7) * F32)


def test_conv_3d_reports_last_two_spatial_axes():
    # X (1, 2, 4, 6, 6), W (3, 2, 2, 3, 3), pads (d: 0+0, h: 1+1, w: 1+1) -> Y (1, 3, 3, 6, 6)
    pg = one_node("Conv", {"x": (1, 2, 4, 6, 6)}, {"w": w(3, 2, 2, 3, 3)}, pads=[0, 1, 1, 0, 1, 1])
    macs = 1 * 3 * 3 * 6 * 6 * 2 * 2 * 3 * 3
    check(pg, "Conv", macs=macs, flops=2 * macs, kernel_h=3, kernel_w=3, pad_h=2, pad_w=2,
          in_features=2, out_features=3)


def test_conv_transpose_strided_with_bias():
    # X (2, 4, 5, 5), W (4, 3, 3, 3) [C_in, C_out / groups, kh, kw], stride 2, bias (3,)
    # -> Y (2, 3, 11, 11): (5 - 1) * 2 + 3 = 11
    pg = one_node("ConvTranspose", {"x": (2, 4, 5, 5)}, {"w": w(4, 3, 3, 3), "b": w(3)}, strides=[2, 2])
    macs = (2 * 4 * 5 * 5) * 3 * 3 * 3  # every input element scatters into 3 * 3 * 3 outputs
    y = 2 * 3 * 11 * 11
    check(pg, "ConvTranspose", macs=macs, flops=2 * macs + y,
          kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=0, pad_w=0, groups=1, has_bias=1,
          in_features=4, out_features=3,
          memory_access_bytes=(2 * 4 * 5 * 5 + 4 * 3 * 3 * 3 + 3 + y) * F32, params=4 * 3 * 3 * 3 + 3)


def test_conv_transpose_grouped_padded():
    # X (1, 4, 4, 4), W (4, 2, 4, 4), group 2 (C_out = 2 * 2 = 4), stride 2, pads 1 each side
    # -> Y (1, 4, 8, 8): (4 - 1) * 2 + 4 - 2 = 8
    pg = one_node("ConvTranspose", {"x": (1, 4, 4, 4)}, {"w": w(4, 2, 4, 4)}, group=2, strides=[2, 2],
                  pads=[1, 1, 1, 1])
    macs = (1 * 4 * 4 * 4) * 2 * 4 * 4
    check(pg, "ConvTranspose", macs=macs, flops=2 * macs, groups=2, has_bias=0, kernel_h=4, pad_h=2, pad_w=2,
          in_features=4, out_features=4,
          memory_access_bytes=(1 * 4 * 4 * 4 + 4 * 2 * 4 * 4 + 1 * 4 * 8 * 8) * F32)


def test_exporter_zero_bias_is_no_bias():
    # torch's dynamo exporter gives a bias-free conv a bias of computed zeros: Expand(0, [C_out])
    from onnx import helper

    from helpers import make_model
    import perfseer

    nodes = [helper.make_node("Expand", ["zero", "cout"], ["b"]),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 1])]
    init = {"zero": np.zeros((), np.float32), "cout": np.array([4], np.int64),
            "w": np.ones((4, 3, 1, 1), np.float32)}
    pg = perfseer.extract(make_model(nodes, {"x": (1, 3, 2, 2)}, ["y"], init))
    macs = 1 * 4 * 2 * 2 * 3
    check(pg, "Conv", flops=2 * macs, macs=macs, has_bias=0.0)
