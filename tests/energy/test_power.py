"""The power model's physics (perfseer.energy): bounds, J = W x s, load ordering, power limits,
and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

import perfseer
from perfseer.energy import Activity, decode_energy, decode_work, power_spec, step_energy
from perfseer.energy.power import constants
from perfseer.errors import PerfseerError

GPUS = ("h200", "a100-40gb-sxm", "rtx4090", "l4", "t4", "v100-sxm2-32gb")


def _activity(rng) -> Activity:
    return Activity(kernel_ms=float(rng.uniform(0.01, 500)), kernels=int(rng.integers(1, 5000)),
                    compute=float(rng.uniform(0, 1)), memory=float(rng.uniform(0, 1)),
                    compute_bound=float(rng.uniform(0, 1)), training=bool(rng.integers(0, 2)))


def test_the_shipped_constants_record_their_fit():
    c = constants()
    assert c["power"] and c["utilization"], "power-constants.json has no fitted constants"
    assert "command" in c["fit"] and c["fit"]["data"], "the fit's command and data are recorded"


@pytest.mark.parametrize("gpu", GPUS)
def test_power_stays_between_idle_and_the_limit(gpu):
    rng = np.random.default_rng(0)
    ps = power_spec(gpu)
    for _ in range(300):
        act = _activity(rng) if rng.uniform() < 0.9 else None
        t = float(10 ** rng.uniform(-2, 4))
        e = step_energy(gpu, t, act, batch=int(rng.integers(1, 512)))
        assert ps.idle_w <= e.power_w <= ps.tdp_w
        assert 0.0 <= e.util_pct <= 100.0
        lim = float(rng.uniform(0.3, 1.0) * ps.tdp_w)
        if lim < max(ps.idle_w, 0.25 * ps.tdp_w):
            continue
        e2 = step_energy(gpu, t, act, power_limit_w=lim)
        assert ps.idle_w <= e2.power_w <= lim + 1e-6


def test_energy_is_power_times_time_and_per_sample_divides_by_the_batch():
    act = Activity(kernel_ms=20.0, kernels=300, compute=0.4, memory=0.5, compute_bound=0.5)
    e = step_energy("h200", 25.0, act, batch=64)
    assert math.isclose(e.energy_j, e.power_w * 25.0 / 1000, rel_tol=1e-12)
    assert math.isclose(e.energy_j_per_sample, e.energy_j / 64, rel_tol=1e-12)
    assert e.latency_ms == 25.0 and e.clock_scale == 1.0


def test_more_activity_and_more_utilisation_draw_more_power():
    lo = step_energy("h200", 20.0, Activity(15.0, 100, 0.05, 0.1, 0.0))
    hi = step_energy("h200", 20.0, Activity(15.0, 100, 0.6, 0.6, 0.6))
    assert hi.power_w > lo.power_w
    busy = step_energy("h200", 20.0, Activity(15.0, 100, 0.3, 0.3, 0.3), util=0.95)
    idle = step_energy("h200", 20.0, Activity(15.0, 100, 0.3, 0.3, 0.3), util=0.2)
    assert busy.power_w > idle.power_w


def test_a_host_bound_step_has_lower_utilisation():
    many_small = step_energy("h200", 5.0, Activity(kernel_ms=0.5, kernels=1000, compute=0.1, memory=0.2,
                                                   compute_bound=0.0))
    few_large = step_energy("h200", 5.0, Activity(kernel_ms=4.5, kernels=20, compute=0.5, memory=0.5,
                                                  compute_bound=0.8))
    assert many_small.util_pct < few_large.util_pct


def test_batch_one_inference_draws_less_power_than_a_large_training_step():
    small = perfseer.predict("example:resnet50", device="h200", batch=1, phase="infer", precision="fp16",
                             energy=True)[0]
    large = perfseer.predict("example:resnet50", device="h200", batch=128, phase="train", precision="fp16",
                             energy=True)[0]
    assert small["power_w"] < large["power_w"]
    assert small["energy_j"] < large["energy_j"]
    for r in (small, large):
        assert math.isclose(r["energy_j"], r["power_w"] * r["value"] / 1000, rel_tol=1e-9)
        assert math.isclose(r["energy_j_per_sample"], r["energy_j"] / r["batch_size"], rel_tol=1e-9)


def test_a_power_limit_slows_a_step_that_draws_more():
    act = Activity(kernel_ms=40.0, kernels=200, compute=0.8, memory=0.6, compute_bound=0.9)
    free = step_energy("h200", 40.0, act)
    assert free.power_w > 400
    capped = step_energy("h200", 40.0, act, power_limit_w=350)
    assert capped.latency_ms > free.latency_ms and capped.clock_scale < 1.0
    assert capped.power_w <= 350 + 1e-6
    assert any("physics only" in n for n in capped.notes)
    lower = step_energy("h200", 40.0, act, power_limit_w=250)
    assert lower.latency_ms > capped.latency_ms
    # a memory-bound step slows less than a compute-bound one under the same limit
    mem = step_energy("h200", 40.0, Activity(40.0, 200, 0.8, 0.6, compute_bound=0.0), power_limit_w=350)
    assert mem.latency_ms < capped.latency_ms
    # a limit above what the step draws changes nothing
    light = Activity(kernel_ms=40.0, kernels=200, compute=0.02, memory=0.1, compute_bound=0.1)
    assert step_energy("h200", 40.0, light).power_w < 500
    same = step_energy("h200", 40.0, light, power_limit_w=500)
    assert same.latency_ms == 40.0 and same.clock_scale == 1.0 and not same.notes


def test_a_power_limit_through_predict_slows_the_row():
    free = perfseer.predict("example:resnet50", device="h200", batch=64, precision="fp16", energy=True)[0]
    capped = perfseer.predict("example:resnet50", device="h200", batch=64, precision="fp16", power_limit_w=200)[0]
    assert capped["value"] >= free["value"] and capped["power_w"] <= 200 + 1e-6
    assert capped["power_limit_w"] == 200


@pytest.mark.parametrize("limit, words", [(-5, "below what"), (0, "below what"), (1e6, "above"),
                                          (float("nan"), "number of watts"), ("300", "number of watts"),
                                          (50, "below what")])
def test_bad_power_limits_are_refused(limit, words):
    with pytest.raises(PerfseerError, match=words):
        step_energy("h200", 10.0, power_limit_w=limit)


def test_what_the_power_model_does_not_cover_is_refused_before_export():
    with pytest.raises(PerfseerError, match="covers GPUs; epyc-vm is a cpu"):
        perfseer.predict("timm:this_model_is_never_exported", device="epyc-vm", energy=True)
    with pytest.raises(PerfseerError, match="MIG slice"):
        perfseer.predict("timm:this_model_is_never_exported", device="a100-80gb-sxm:1g.10gb", energy=True)
    with pytest.raises(PerfseerError, match="above h200's TDP"):
        perfseer.predict("timm:this_model_is_never_exported", device="h200", power_limit_w=900)
    with pytest.raises(PerfseerError, match="latency must be a positive"):
        step_energy("h200", -1.0)
    with pytest.raises(PerfseerError, match="batch must be"):
        step_energy("h200", 1.0, batch=0)


def test_idle_power_says_where_it_comes_from():
    assert power_spec("h200").idle_source.startswith("measured")
    other = power_spec("l4")
    assert other.idle_source.startswith("rule of thumb") and 0 < other.idle_w < other.tdp_w
    e = step_energy("l4", 10.0)
    assert any("rule of thumb" in n for n in e.notes)


def test_decode_energy_per_token_falls_with_the_batch():
    w1 = decode_work(8.03e9, 32, 8, 128, 4096, batch=8, context=500)
    w2 = decode_work(8.03e9, 32, 8, 128, 4096, batch=128, context=500)
    e1 = decode_energy("a100-40gb-sxm", 25.0, w1, batch=8)
    e2 = decode_energy("a100-40gb-sxm", 60.0, w2, batch=128)
    assert e2["energy_j_per_token"] < e1["energy_j_per_token"]
    two = decode_energy("a100-40gb-sxm", 25.0, decode_work(8.03e9, 32, 8, 128, 4096, 8, 500, gpus=2), 8, gpus=2)
    assert math.isclose(two["energy_j"], two["power_w"] * 2 * 25.0 / 1000, rel_tol=1e-9)
    with pytest.raises(PerfseerError, match="batch must be"):
        decode_work(8e9, 32, 8, 128, 4096, batch=0, context=10)


def test_decode_work_by_hand():
    # 2 layers, 1 KV head of 4, attention width 8; batch 2, context 10; 1e9 parameters
    w = decode_work(1e9, layers=2, kv_heads=1, head_dim=4, d_attn=8, batch=2, context=10)
    assert w.flops == 2 * 1e9 * 2 + 4 * 2 * 10 * 8 * 2
    assert w.bytes == 1e9 * 2 + 2 * 10 * 2 * 2 * 1 * 4 * 2
    moe = decode_work(1e9, 2, 1, 4, 8, 2, 10, gpus=4, active_params=2.5e8)
    assert moe.flops == (2 * 2.5e8 * 2 + 4 * 2 * 10 * 8 * 2) / 4 and moe.bytes == w.bytes / 4


def test_activity_of_one_gemm_by_hand():
    from perfseer.devices import get_device
    from perfseer.energy import activity_from_kernels
    from perfseer.specmodel import kernels as kt

    spec = get_device("h200")
    t = kt.gemm_rows(1, 4096, 4096, 4096, dtype_bytes=2.0)  # 137.4 GFLOP, 100.7 MB
    flop_us = 2 * 4096 ** 3 / (spec.peak("fp16") * 1e6)
    mem_us = 3 * 4096 * 4096 * 2 / (spec.mem_bandwidth_gbs * 1e3)
    a = activity_from_kernels(t, [4 * flop_us], spec, "fp16")  # the kernel at a quarter of the peak
    assert math.isclose(a.compute, 0.25, rel_tol=1e-9) and math.isclose(a.memory, mem_us / (4 * flop_us), rel_tol=1e-9)
    assert a.compute_bound == 1.0 and a.kernels == 1 and math.isclose(a.roofline_ms, flop_us / 1000, rel_tol=1e-9)
    faster = activity_from_kernels(t, [flop_us / 2], spec, "fp16")  # faster than its roofline: held to it
    assert math.isclose(faster.compute, 1.0, rel_tol=1e-9)


def test_activity_of_an_fp32_convolution_with_and_without_tf32():
    """H200 (FP32 67.0, TF32 494.7 TFLOP/s): at fp32 a convolution runs TF32 (PyTorch's default),
    with TF32 off (rules.FP32_IEEE, how the collection kit measures) at the FP32 peak.  A kernel of
    1 ms doing 20 GFLOP: compute share 20e9 / 494.7e12 s = 4.04 % against 20e9 / 67.0e12 = 29.9 %."""
    from perfseer.devices import get_device
    from perfseer.energy import activity_from_kernels
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel import rules

    spec = get_device("h200")
    t = kt.gemm_rows(1, 2048, 2048, 2384.2, dtype_bytes=4.0)
    t["family"] = "conv"
    flops = float(t["flops"].iloc[0])
    default = activity_from_kernels(t, [1000.0], spec, "fp32")
    ieee = activity_from_kernels(t, [1000.0], spec, rules.FP32_IEEE)
    assert math.isclose(default.compute, flops / (spec.peak("tf32") * 1e9), rel_tol=1e-9)
    assert math.isclose(ieee.compute, flops / (spec.peak("fp32") * 1e9), rel_tol=1e-9)
    assert ieee.compute > 7 * default.compute


def test_energy_rows_leave_other_metrics_alone():
    from perfseer.runtime.power import energy_rows

    pg = perfseer.extract("example:resnet18", batch=1)
    rows = [{"metric": "memory_mb", "value": 100.0, "device": "h200", "batch_size": 1},
            {"metric": "latency_ms", "value": None, "device": "h200", "batch_size": 1, "phase": "infer",
             "precision": "fp16"}]
    out = energy_rows(rows, pg)
    assert out[0] == rows[0] and out[1]["energy_j"] is None and out[1]["power_w"] is None
