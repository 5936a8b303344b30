"""The any-GPU model's slot-power term and the per-parameter-tensor kernels of older PyTorch
training steps, each against a hand-computed case; the route's leave-one-GPU-out robustness."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from benchmarks.lib import anygpu_logo as L

from perfseer.devices import get_device
from perfseer.specmodel import anygpu
from perfseer.specmodel import kernels as kt


def _theta(**kw):
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=3.0, kernel_floor=-30.0, small_n=-30.0, small_k=-30.0, h2d=0.0, host_train=-30.0,
              step_train=-30.0, wave=0.0)
    th.update(kw)
    return th


def test_slot_powered_cards_compute_slower():
    """Hand-computed: a 4096^3 FP32 GEMM (137.4 GFLOP) on a T4 (70 W: slot-powered; 8.141 TFLOP/s)
    and on a V100 PCIe (250 W; 14.029 TFLOP/s), every other constant neutral (compute factor 1,
    memory time ~0 with the overlap's sharp maximum): 16,882 us and 9,797 us; with slot_power 0.25
    the T4 takes e^0.25 = 1.284 times longer, the V100 the same."""
    t = kt.gemm_rows(1, 4096, 4096, 4096, dtype_bytes=4.0)
    th0 = _theta(m_matrix=-30.0)
    th1 = _theta(m_matrix=-30.0, slot_power=0.25)
    t4, v100 = get_device("t4"), get_device("v100-pcie-32gb")
    assert anygpu.slot_powered(t4) and anygpu.slot_powered(get_device("l4"))
    assert not anygpu.slot_powered(v100)
    flops = 2 * 4096.0 ** 3
    for spec, slot in ((t4, True), (v100, False)):
        d = anygpu.design([(t, spec, "fp32", 0.0)])
        base = anygpu.kernel_us(th0, d)[0]
        assert base == pytest.approx(flops / (spec.peak_tflops["fp32"] * 1e6), rel=1e-6)
        assert anygpu.kernel_us(th1, d)[0] == pytest.approx(base * (np.exp(0.25) if slot else 1.0), rel=1e-9)
    assert flops / (8.141e6) == pytest.approx(16882.3, abs=0.1)


def test_older_pytorch_launches_kernels_per_parameter_tensor():
    """Hand-computed: a training step of one 3x3 convolution 64 -> 64 (36,864 weights) run twice
    and a 1000 x 512 linear layer with bias (512,512 weights), 10 parameter tensors, 5 kernels per
    tensor: one optimizer-pass row run 50 times, each moving 12 bytes x (2 x 36,864 + 512,512) /
    10 = 703,488 bytes."""
    c = kt.conv_rows(12, 64, 64, 3, 56, 56, 1, 1).assign(**{"pass": "fw", "scale": 2.0})
    g = kt.gemm_rows(1, 1000, 512, 1000, bias=1.0, shared_b=1.0).assign(**{"pass": "fw", "scale": 1.0})
    bw = g.assign(**{"pass": "bw"})
    t = pd.concat([c, g, bw], ignore_index=True)
    assert g["weights"].iloc[0] == 1000 * 512 + 512
    out = anygpu.with_per_parameter_kernels(t, 10, 5)
    assert len(out) == len(t) + 1
    row = out.iloc[-1]
    assert row["pass"] == "opt" and row["family"] == "vec" and row["scale"] == 50.0
    assert row["bytes"] == pytest.approx(12 * (2 * 36864 + 512512) / 10)
    assert anygpu.with_per_parameter_kernels(t, 10, 0) is t
    # the settings that launch them: PyTorch 1.x's (gpu-benchmark, timm on 1.12), training steps only
    assert L.PER_TENSOR_KERNELS == {"gpu-benchmark": 2, "timm-pt112": 5}
    tables = {"k": t}
    assert len(L.step_table(tables, "k", "timm-pt112", "train", 10)) == len(t) + 1
    assert L.step_table(tables, "k", "timm-pt291", "train", 10) is t
    assert L.step_table(tables, "k", "gpu-benchmark", "infer", 10) is t
    # each of them pays the host's launch cost and the training kernels' extra: 50 kernels of ~0 us at
    # 10 + 40 us host each = 2,500 us more
    d0 = anygpu.design([(t, get_device("rtx3090"), "fp32", 0.0)])
    d1 = anygpu.design([(out, get_device("rtx3090"), "fp32", 0.0)])
    th = _theta(m_vec=-30.0, host_train=np.log(40.0))
    ov = np.array([[np.log(10.0), -30.0]])
    extra = anygpu.step_us(th, ov, d1)[0] - anygpu.step_us(th, ov, d0)[0]
    assert extra == pytest.approx(50 * (10.0 + 40.0), rel=1e-3)


def _row(gpu, cell, anygpu_, blend):
    return {"gpu": gpu, "cell": cell, "rows": 5, "spec_seen": False, "anygpu_mape": anygpu_, "spec_mape": 90.0,
            "roofline_mape": 90.0, "blend_mape": blend}


def test_route_choice_is_not_carried_by_one_gpu():
    """The blend wins the three others' mean (25.0 vs 33.3, 25 % lower) only through one GPU (2080 Ti:
    10 vs 40); without it the means are 32.5 vs 30.0: any-GPU stays.  Where it wins on each, it is chosen."""
    c = "cnn/train/fp16"
    per = pd.DataFrame([_row("titan-v", c, 30, 35), _row("titan-xp", c, 30, 30), _row("rtx2080ti", c, 40, 10),
                        _row("gtx1080ti", c, 30, 60)])
    out = L.route_facts(per)[0].set_index("gpu")
    assert out.loc["gtx1080ti", "route_choice"] == "anygpu"
    per["blend_mape"] = [20.0, 20.0, 20.0, 60.0]
    out = L.route_facts(per)[0].set_index("gpu")
    assert out.loc["gtx1080ti", "route_choice"] == "blend"


def test_geforce_and_titan_cards_clock_above_their_rated_boost():
    """Hand-computed: a 4096^3 FP32 GEMM on an RTX 3090 (35.6 TFLOP/s at its rated boost clock:
    3,861 us) with client_boost 0.15 takes e^-0.15 = 0.861 of it (3,323 us); an A100 PCIe and an RTX
    PRO 6000 Max-Q (workstation) are not client cards and keep theirs."""
    t = kt.gemm_rows(1, 4096, 4096, 4096, dtype_bytes=4.0)
    th0, th1 = _theta(m_matrix=-30.0), _theta(m_matrix=-30.0, client_boost=0.15)
    for name, client in (("rtx3090", True), ("titan-v", True), ("a100-40gb-pcie", False),
                         ("rtx-pro-6000-maxq", False), ("t4", False)):
        spec = get_device(name)
        assert anygpu.client_card(spec) is client
        d = anygpu.design([(t, spec, "fp32", 0.0)])
        ratio = anygpu.kernel_us(th1, d)[0] / anygpu.kernel_us(th0, d)[0]
        assert ratio == pytest.approx(np.exp(-0.15) if client else 1.0, rel=1e-9)
    d = anygpu.design([(t, get_device("rtx3090"), "fp32", 0.0)])
    assert anygpu.kernel_us(th0, d)[0] == pytest.approx(2 * 4096.0 ** 3 / 35.6e6, rel=2e-3)
    assert anygpu.kernel_us(th1, d)[0] == pytest.approx(3323, abs=3)
