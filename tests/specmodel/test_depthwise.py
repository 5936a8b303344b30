"""Depthwise convolutions in the any-GPU model: the kernel table carries their shape, PyTorch's
library choice (cuDNN or its direct kernels) follows its rule, and a generic direct forward
kernel costs its taps at the SM clock rate, by kernel area (hand-computed cases)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.features import schema
from perfseer.specmodel import anygpu, rules
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.compose import step_kernels

_I = {n: i for i, n in enumerate(schema.NODE_FEATURES)}


def _dw_graph(k: int, channels: int = 64, hw: int = 28, batch: int = 8, stride: int = 1, per_group: int = 1):
    """One depthwise ``k x k`` convolution node (raw PerfGraph features, FP32 bytes); ``per_group``
    input channels per group (1: depthwise)."""
    ho = hw // stride
    out_el = batch * channels * ho * ho
    taps = k * k * per_group
    x = np.zeros((1, len(schema.NODE_FEATURES)))
    for name, v in (("macs", out_el * taps), ("flops", 2 * out_el * taps), ("input_bytes", 4 * batch * channels * hw * hw),
                    ("output_bytes", 4 * out_el), ("weight_bytes", 4 * channels * taps), ("groups", channels // per_group),
                    ("out_features", channels), ("kernel_h", k)):
        x[0, _I[name]] = v
    return x, ["Conv"]


def test_the_table_carries_the_depthwise_shape_forward_and_backward():
    x, ops = _dw_graph(7)
    t = step_kernels(x, ops, phase="train", precision="fp32")
    dw = kt.depthwise(t)
    assert list(t.loc[dw, "pass"]) == ["fw", "bw"]  # the backward row stands for both gradients
    out_el = 8 * 64 * 28 * 28
    for c, v in (("kernel", 7), ("M", out_el), ("N", 64), ("K", 49)):
        assert (t.loc[dw, c] == v).all(), c


def test_pytorch_hands_fp16_3x3_and_5x5_at_stride_1_to_cudnn_on_volta_and_later():
    a = get_device("rtx3090")
    got = rules.depthwise_cudnn(a, "fp16", [3, 5, 7, 3, 3], [True, True, True, False, True], [64, 64, 64, 64, 16])
    assert list(got) == [True, True, False, False, False]
    assert not rules.depthwise_cudnn(a, "fp32", [3], [True], [64]).any()
    assert not rules.depthwise_cudnn(get_device("gtx1080ti"), "fp16", [3], [True], [64]).any()  # Pascal


def test_a_direct_kernel_costs_its_taps_at_the_sm_clock_rate():
    """RTX 3090 (82 SMs, 1695 MHz): 32 x 82 x 1695 = 4,447,680 taps/us.  A 7x7 depthwise
    convolution of 8 x 64 x 28 x 28 = 401,408 outputs has 19,668,992 taps: t_c0 = 4.4223 us.
    With c_dw = log 4 and dw_k = 0.5 (area 49/9: x 2.3333) the forward's compute is 4.4223 x 4
    x 2.3333 = 41.275 us; its memory (3.2 MB read and written at 936 GB/s, e^{m_vec} = 1) is far
    below, and with a sharp overlap and no floor the kernel takes its compute time.  Its
    gradients stay an element-wise kernel (code 4)."""
    s = get_device("rtx3090")
    x, ops = _dw_graph(7)
    t = step_kernels(x, ops, phase="train", precision="fp32")
    t["scale"] = 1.0
    t = t[kt.depthwise(t)].reset_index(drop=True)
    inp = anygpu.kernel_inputs(t, s, "fp32")
    assert rules.depthwise_tap_rate(s) == pytest.approx(4_447_680.0)
    assert list(inp["code"]) == [8, 4]
    assert inp["t_c0"][0] == pytest.approx(19_668_992 / 4_447_680.0, rel=1e-9)
    assert inp["area"][0] == pytest.approx(49 / 9)
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=5.0, kernel_floor=-30.0, c_dw=np.log(4.0), dw_k=0.5)
    d = anygpu.design([(t[t["pass"] == "fw"], s, "fp32", 0.0)])
    assert anygpu.kernel_us(th, d) == pytest.approx([41.275], rel=2e-3)


def test_cudnn_and_the_unrolled_kernels_stay_element_wise():
    """At FP16 a 5x5 stride-1 depthwise forward on the RTX 3090 is cuDNN's: a plain element-wise
    kernel (code 4) at the vector peak; a 3x3 one too; a 7x7 one is PyTorch's generic kernel (8);
    every gradient an element-wise kernel."""
    s = get_device("rtx3090")
    rows = []
    for k in (5, 3, 7):
        x, ops = _dw_graph(k)
        t = step_kernels(x, ops, phase="train", precision="fp16")
        rows.append(t[kt.depthwise(t)])
    t = pd.concat(rows, ignore_index=True)
    inp = anygpu.kernel_inputs(t, s, "fp16")
    assert list(inp["code"]) == [4, 4, 4, 4, 8, 4]
    assert inp["t_c0"][0] == pytest.approx(t["flops"].iloc[0] / (2 * 35.6e6), rel=1e-9)


def test_a_thinly_grouped_convolution_is_not_depthwise():
    """ResNeXt's 32 groups of 4 channels (K = 4 x 9 = 36 taps per output): cuDNN's grouped
    convolution, an element-wise kernel forward and backward as before.  A depthwise 5x5 at
    stride 2 runs PyTorch's generic kernel, a 3x3 its unrolled one (element-wise)."""
    s = get_device("rtx3090")
    x, ops = _dw_graph(3, channels=128, per_group=4)
    t = step_kernels(x, ops, phase="train", precision="fp16")
    inp = anygpu.kernel_inputs(t, s, "fp16")
    assert list(inp["code"]) == [4, 4]
    assert inp["area"] == pytest.approx([1.0, 1.0])
    for k, code in ((5, 8), (3, 4)):
        x, ops = _dw_graph(k, stride=2)
        t = step_kernels(x, ops, phase="infer", precision="fp16")
        assert list(anygpu.kernel_inputs(t, s, "fp16")["code"]) == [code]
