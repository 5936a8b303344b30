"""Depthwise (thin-grouped) convolutions: their kernel rows by hand, their backward (an input
gradient and a per-weight reduction), autocast's weight cast, and the any-GPU model's CUDA-core
costing of them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import perfseer
from helpers import make_model
from perfseer.devices import get_device
from perfseer.specmodel import anygpu, rules
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.compose import step_kernels, with_autocast

# x (2, 32, 14, 14) -> 7x7 depthwise Conv (groups 32, pad 3, no bias): 2 x 32 x 14 x 14 = 12,544
# outputs, each 49 MACs: 1,229,312 FLOPs; it reads x (12,544) and w (32 x 49 = 1,568) and writes
# y (12,544): 26,656 elements, 106,624 bytes at FP32
OUT, W, FLOPS = 12_544, 1_568, 2 * 49 * 12_544


def _dw_model(channels_per_group: int = 1, cin: int = 32, k: int = 7):
    g = cin // channels_per_group
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[k, k], pads=[k // 2] * 4, group=g, name="dw")
    return make_model([node], {"x": ("N", cin, 14, 14)}, ["y"],
                      {"w": np.ones((cin, channels_per_group, k, k), np.float32)})


@pytest.fixture(scope="module")
def pg():
    return perfseer.extract(_dw_model(), batch=2)


def test_depthwise_forward_row_by_hand(pg):
    t = step_kernels(pg.x, pg.op_types, "infer", "fp32")
    assert len(t) == 1 and kt.depthwise(t).all() and not kt.depthwise_wgrad(t).any()
    r = t.iloc[0]
    assert r["family"] == "vec" and r["kernel"] == 7
    assert (r["B"], r["M"], r["N"], r["K"]) == (32, 2 * 14 * 14, 1, 49)
    assert r["flops"] == FLOPS and r["bytes"] == (OUT + W + OUT) * 4 and r["weights"] == W


def test_depthwise_backward_is_an_input_gradient_and_a_weight_reduction(pg):
    t = step_kernels(pg.x, pg.op_types, "train", "fp16", params=float(pg.params), optimizer="sgd")
    bw = t[t["pass"] == "bw"]
    assert len(bw) == 2 and kt.depthwise(bw).all()
    dx, dw = bw.iloc[0], bw.iloc[1]
    # dx: a depthwise convolution of dy by w (reads dy and w, writes dx), the forward's FLOPs
    assert dx["flops"] == FLOPS and dx["bytes"] == (OUT + W + OUT) * 2 and dx["rows"] == 0
    # dw: each of the 1,568 weights a sum over batch x pixels (392) of x * dy: reads x and dy, writes dw
    assert dw["flops"] == FLOPS and dw["bytes"] == (OUT + OUT + W) * 2
    assert (dw["rows"], dw["cols"]) == (W, 392)
    assert kt.depthwise_wgrad(bw).tolist() == [False, True]
    # autocast casts the depthwise weight to 16 bits (6 bytes per weight) and its gradient back
    a = with_autocast(t)
    casts = a.iloc[len(t):]
    assert casts["bytes"].tolist() == [6 * W, 6 * W] and casts["pass"].tolist() == ["fw", "bw"]


def test_thin_groups_are_depthwise_and_eight_channels_a_convolution():
    thin = perfseer.extract(_dw_model(channels_per_group=4, k=3), batch=2)
    t = step_kernels(thin.x, thin.op_types, "infer", "fp32")
    assert kt.depthwise(t).all() and t["K"].iloc[0] == 4 * 9 and t["flops"].iloc[0] == 2 * 36 * OUT
    wide = perfseer.extract(_dw_model(channels_per_group=8, k=3), batch=2)
    t = step_kernels(wide.x, wide.op_types, "infer", "fp32")
    assert t["family"].tolist() == ["conv"] and not kt.depthwise(t).any()


def test_anygpu_costs_depthwise_on_the_cuda_cores_by_kernel_area(pg):
    """H100 SXM at fp16: the FP32 CUDA-core peak (66.908 TFLOP/s), not the tensor cores (989.4):
    1,229,312 FLOPs -> 0.018373 us at peak; with c_dw 0.5 (PyTorch's kernels: a 7x7 is not
    cuDNN's), 0.2 more at 16 bits, dw_k 0.3 (area 49 / 9) and a weight gradient 1.0 slower (e)
    and (1 + 4 x 132 SMs / 1,568 weights) slower, each kernel is compute-bound at that times its
    factor."""
    s = get_device("h100-sxm")
    assert rules.depthwise_peak(s, "fp16") == 66.908
    t = step_kernels(pg.x, pg.op_types, "train", "fp16", params=float(pg.params), optimizer="sgd")
    t["scale"] = 1.0
    a = anygpu.kernel_inputs(t, s, "fp16")
    dwk = kt.depthwise(t)
    assert a["code"][dwk].tolist() == [10, 10, 11]  # PyTorch's kernels at 16 bits
    assert a["par"][dwk].tolist() == [1e9, 1e9, W / 132]
    assert a["t_c0"][dwk] == pytest.approx([FLOPS / 66.908e6] * 3, rel=1e-9)
    assert a["area"][dwk] == pytest.approx([49 / 9] * 3)
    th = {k: 0.0 for k in anygpu.PARAMS}
    # a sharp compute/memory maximum, no floor; the memory term made negligible
    th.update(overlap=3.0, kernel_floor=-30.0, m_vec=-30.0, c_dw=0.5, c_dw_half=0.2, dw_k=0.3, c_dw_wgrad=1.0,
              dw_rows=np.log(4.0))
    d = anygpu.design([(t, s, "fp16", 0.0)])
    got = anygpu.kernel_us(th, d)[d.code >= 6]
    base = FLOPS / 66.908e6 * np.exp(0.7) * (49 / 9) ** 0.3
    assert sorted(got) == pytest.approx([base, base, base * np.e * (1 + 4 * 132 / W)], rel=1e-6)  # y, dx; dw


def test_fp16_small_depthwise_kernels_run_in_cudnn():
    """PyTorch's rule: FP16, 3x3, stride 1, 32 channels -> cuDNN (codes 8, 9); the same at FP32
    -> PyTorch's own kernels (6, 7)."""
    s = get_device("rtx3090")
    small = perfseer.extract(_dw_model(k=3), batch=2)
    for precision, codes in (("fp16", [8, 8, 9]), ("fp32", [6, 6, 7])):
        t = step_kernels(small.x, small.op_types, "train", precision, params=float(small.params), optimizer="sgd")
        a = anygpu.kernel_inputs(t, s, precision)
        assert a["code"][kt.depthwise(t)].tolist() == codes
    assert rules.depthwise_cudnn("fp16", [3, 7, 3, 3], [True, True, False, True], [32, 32, 32, 16], [1, 1, 1, 1]).tolist() \
        == [True, False, False, False]
