"""The any-GPU model's power term: a GPU whose board power cannot feed its SMs at the boost
clock (70-75 W and Max-Q boards) computes at a lower sustained clock."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.devices.spec import DeviceSpec
from perfseer.specmodel import anygpu, rules
from perfseer.specmodel import kernels as kt


def test_power_per_flop_from_the_sheet():
    """Hand-computed: T4 70 W / (8.141 TFLOP/s x 12 nm) = 0.7165; RTX 4090 450 / (82.6 x 4) = 1.362;
    a sheet without a TDP is never power-limited."""
    assert rules.power_per_flop(get_device("t4")) == pytest.approx(70 / (8.141 * 12), rel=1e-9)
    assert rules.power_per_flop(get_device("t4")) == pytest.approx(0.7165, abs=1e-4)
    assert rules.power_per_flop(get_device("rtx4090")) == pytest.approx(1.362, abs=1e-3)
    bare = DeviceSpec(name="x", kind="gpu", peak_tflops={"fp32": 10.0}, source="test", sms=10, architecture="turing",
                      mem_bandwidth_gbs=100.0)
    assert rules.power_per_flop(bare) == float("inf")


def _gemm_on(name: str, knee: float) -> np.ndarray:
    t = kt.gemm_rows(1, 4096, 4096, 4096).assign(**{"pass": "fw", "scale": 1.0})
    d = anygpu.design([(t, get_device(name), "fp32", 0.0)])
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=3.0, kernel_floor=-20.0, small_n=-20.0, small_k=-20.0, peak_slope=0.0, power_knee=knee)
    return anygpu.kernel_us(th, d), d


def test_power_limited_gpu_computes_slower():
    """Hand-computed: a 4096^3 FP32 GEMM on a T4 (8.141 TFLOP/s on CUDA cores: 1.374e11 FLOPs ->
    16,882 us at peak) with the knee at 1.2 W/(TFLOP/s nm): the T4's 0.7165 is below it, its clock
    (1.2 / 0.7165)^(1/3) = 1.1875x slower -> 20,048 us; an RTX 4090 (1.362, above the knee) keeps
    its peak time."""
    t4, d = _gemm_on("t4", np.log(1.2))
    base = 2 * 4096 ** 3 / 8.141e6
    assert d.t_c0[0] == pytest.approx(base, rel=1e-9)
    assert t4[0] == pytest.approx(base * (1.2 / (70 / (8.141 * 12))) ** (1 / 3), rel=1e-6)
    assert t4[0] / base == pytest.approx(1.1875, abs=1e-4)
    ada, d = _gemm_on("rtx4090", np.log(1.2))
    assert ada[0] == pytest.approx(d.t_c0[0], rel=1e-6)


def test_memory_time_is_not_throttled():
    """The power limit lowers the SM clock, not the memory's: a memory-bound kernel keeps its time."""
    t = kt.vec_rows(1e8, 2, 1).assign(**{"pass": "fw", "scale": 1.0})
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=3.0, kernel_floor=-20.0, bw_slope=0.0)
    d = anygpu.design([(t, get_device("t4"), "fp32", 0.0)])
    lo = anygpu.kernel_us(dict(th, power_knee=-10.0), d)
    hi = anygpu.kernel_us(dict(th, power_knee=np.log(1.2)), d)
    assert d.t_m0[0] > 10 * d.t_c0[0] and hi[0] == pytest.approx(lo[0], rel=1e-3)


def test_card_without_the_knee_answers_unthrottled():
    """A card fitted before the power term has no ``power_knee``: it loads, and no GPU is throttled."""
    card = {"format": anygpu.CARD_FORMAT, "params": {k: 0.0 for k in anygpu.PARAMS if k != "power_knee"},
            "overheads": {"s": [0.0, 0.0]}, "default_setting": "s"}
    m = anygpu.AnyGpuModel(card)
    assert m._theta[anygpu.PARAMS.index("power_knee")] == anygpu.OPTIONAL["power_knee"]
    t = pd.concat([kt.gemm_rows(1, 1024, 1024, 1024)]).assign(**{"pass": "fw", "scale": 1.0})
    assert m.step_ms(t, get_device("t4"), "fp32")["latency_ms"] > 0
