"""The any-GPU operator model: its inputs by the per-generation rules, its composition, its fit,
its card, and the route facts the spec model's predict reads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import anygpu
from perfseer.specmodel import kernels as kt


def _table():
    t = kt.conv_rows(12, 64, 64, 3, 56, 56, 1, 1)
    t["pass"], t["scale"] = "fw", 1.0
    g = kt.gemm_rows(1, 4096, 4096, 4096)
    g["pass"], g["scale"] = "bw", 2.0
    return pd.concat([t, g], ignore_index=True)


def test_inputs_follow_the_generation_rules():
    """A100 at fp32: the convolution at TF32 (156 TFLOP/s: 2.775e9 FLOPs -> 17.79 us), the GEMM
    on the CUDA cores (19.5: 1.374e11 -> 7048 us); GTX 1080 Ti fp16: the FP32 rate (11.34)."""
    t = _table()
    a = anygpu.kernel_inputs(t, get_device("a100-80gb-sxm"), "fp32")
    assert a["t_c0"][0] == pytest.approx(2 * 12 * 56 * 56 * 64 * 64 * 9 / 156e6, rel=1e-6)
    assert a["t_c0"][1] == pytest.approx(2 * 4096 ** 3 / 19.5e6, rel=1e-6)
    assert list(a["code"]) == [2, 1]  # conv-tensor, gemm-cuda
    assert list(a["backward"]) == [False, True]
    p = anygpu.kernel_inputs(t, get_device("gtx1080ti"), "fp16")
    assert p["t_c0"][0] == pytest.approx(2 * 12 * 56 * 56 * 64 * 64 * 9 / 11.34e6, rel=1e-6)
    assert list(p["code"]) == [3, 1]  # both on CUDA cores


def test_composition_reduces_to_the_roofline():
    """No inefficiency, a sharp max, no floor, negligible host: the step is the roofline sum."""
    t = _table()
    s = get_device("h100-sxm")
    d = anygpu.design([(t, s, "fp16", 0.0)])
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(wave=0.0, overlap=3.0, kernel_floor=-20.0, h2d=0.0)
    roof = np.maximum(d.t_c0, d.t_m0)
    got = anygpu.step_us(th, np.array([[-20.0, -20.0]]), d)[0]
    assert got == pytest.approx(float((roof * d.scale).sum()), rel=0.02)
    # the host's launch cost dominates a tiny step: 3 kernel launches (1 + 2 repetitions) x 100 us
    got = anygpu.step_us(th, np.array([[np.log(1e5), -20.0]]), d)[0]
    assert got == pytest.approx(3e5, rel=0.01)


def test_fit_recovers_its_constants():
    rng = np.random.default_rng(0)
    items, truth = [], dict(anygpu.INIT, c_gemm_tensor=0.9, m_vec=0.1, wave=0.3)
    for name in ("t4", "a100-80gb-sxm", "rtx4090", "h100-sxm"):
        for m in (256, 1024, 4096):
            t = pd.concat([kt.gemm_rows(1, m, m, m), kt.vec_rows(m * m, 2, 1)], ignore_index=True)
            t["pass"], t["scale"] = "fw", 1.0
            items.append((t, get_device(name), "fp16", 0.0))
    d = anygpu.design(items)
    ov = np.array([[np.log(8.0), np.log(20.0)]])
    y = anygpu.step_us(truth, ov, d) / 1000 * np.exp(rng.normal(0, 0.01, d.n_steps))
    params, _ = anygpu.fit(d, y, n_settings=1, max_nfev=300)
    pred = anygpu.step_us(params, _, d) / 1000
    assert np.mean(np.abs(pred / y - 1)) < 0.03


def test_a_prepared_table_answers_as_the_table():
    """prepare() reads a table once for every GPU: identical rows merged with their repetitions
    summed, in table order; the step time on any GPU is the table's, bit for bit."""
    g = kt.gemm_rows(1, 512, 512, 512)
    v = kt.vec_rows(512 * 512, 2, 1)
    t = pd.concat([g, v, g, v, v], ignore_index=True)
    t["pass"], t["scale"] = "fw", [1.0, 1.0, 2.0, 1.0, 3.0]
    p = anygpu.prepare(t)
    assert len(p) == 2 and list(p.family) == ["gemm", "vec"] and list(p.scale) == [3.0, 5.0]
    assert anygpu.prepare(p) is p
    from perfseer.runtime import spec as rs

    m = rs.load_anygpu()
    for name in ("t4", "rtx4090", "h100-sxm"):
        s = get_device(name)
        assert m.step_ms(p, s, "fp16", eager=True)["latency_ms"] == m.step_ms(t, s, "fp16", eager=True)["latency_ms"]


def test_card_without_constants_is_refused():
    with pytest.raises(anygpu.AnyGpuError, match="lacks constants"):
        anygpu.AnyGpuModel({"format": anygpu.CARD_FORMAT, "params": {}})
    with pytest.raises(anygpu.AnyGpuError, match="not an any-GPU card"):
        anygpu.AnyGpuModel({"format": "other"})


def test_route_facts_pick_the_basis(monkeypatch):
    from perfseer.runtime import spec as rs

    card = {"format": anygpu.CARD_FORMAT, "name": "test-anygpu", "params": dict(anygpu.INIT),
            "overheads": {"s": {"host_per_kernel": 1.0, "step": 1.0}}, "default_setting": "s",
            "trained_on": ["t4", "a100-40gb-pcie"], "intervals": {"cnn/infer/fp32": 0.2},
            "route": {"cnn/infer/fp32": {"choice": "anygpu", "validation_mape": {"anygpu": 10.0, "spec": 20.0,
                                                                                 "roofline": 50.0}},
                      "cnn/infer/fp16": {"choice": "roofline", "validation_mape": {}}}}
    monkeypatch.setattr(rs, "_ANYGPU", anygpu.AnyGpuModel(card))
    sm = rs.load_spec_model()
    row = sm.predict("example:resnet18", batch=2, device="l4", precision="fp32")[0]
    assert row["basis"].startswith("spec model by the route facts: any-GPU operator model (test-anygpu") and "anygpu 10.0 %" in row["basis"]
    lo, hi = row["interval"]
    # L4's FP32 peak (30.3) lies beyond the trained GPUs' 9.5-19.5 x 1.5: out of domain, q doubled
    assert not row["in_domain"] and any("FP32 peak" in r for r in row["domain_reasons"])
    assert lo < row["value"] < hi and hi / row["value"] == pytest.approx(np.exp(0.4), rel=0.05)
    assert sm.predict("example:resnet18", batch=2, device="l4", precision="fp16")[0]["basis"].startswith("spec model by the route facts: roofline")
    assert sm.predict("example:resnet18", batch=2, device="l4", precision="fp32",
                      use_route=False)[0]["basis"].startswith("spec model (")


def test_the_bundled_card_loads_and_routes():
    from perfseer.runtime import spec as rs

    m = rs.load_anygpu()
    assert set(anygpu.PARAMS) <= set(m.params) and len(m.card["trained_on"]) >= 10
    for cell, fact in m.card["route"].items():
        assert rs.route_choice(cell) == fact["choice"] and fact["validation_mape"][fact["choice"]] is not None
    row = rs.load_spec_model().predict("example:resnet18", batch=4, device="a10g", phase="train", precision="fp32")[0]
    want = m.card["route"]["cnn/train/fp32"]["choice"]
    assert row["value"] > 0 and row["interval"] and row["basis"].startswith(
        {"anygpu": "spec model by the route facts: any-GPU", "blend": "spec model by the route facts: geometric mean",
         "roofline": "spec model by the route facts: roofline", "spec": "spec model ("}[want])


def _one_kernel_design(t_c0, t_m0=0.0, dim_n=1e9, dim_k=1e9, code=0, scale=1.0):
    n = np.size(t_c0)
    f = lambda v: np.full(n, v, dtype=float) if np.ndim(v) == 0 else np.asarray(v, float)
    return anygpu.Design(t_c0=f(t_c0), t_m0=f(t_m0), occ=np.ones(n), code=np.full(n, code), backward=np.zeros(n, bool),
                         scale=f(scale), log_peak=np.zeros(n), log_bw=np.zeros(n), step=np.zeros(n, dtype=np.int64),
                         n_steps=1, dim_n=f(dim_n), dim_k=f(dim_k), h2d_bytes=np.zeros(1),
                         setting=np.zeros(1, dtype=np.int64))


def _plain_theta(**kw):
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=3.0, kernel_floor=-20.0, small_n=-20.0, small_k=-20.0, h2d=0.0)
    th.update(kw)
    return th


def test_launch_cost_is_paid_per_kernel():
    """Hand-computed: host launch cost h = 100 us per kernel.  Two 1-us kernels, one of them
    repeated 3 times, and a 1000-us kernel: each kernel takes the smooth maximum (p = 3) of its GPU
    time and h, so 4 x (1 + 1e6)^(1/3) + (1e9 + 1e6)^(1/3) = 4 x 100.0000333 + 1000.333 = 1400.33 us,
    plus the step constant 50 us -- not max(1004, 500) = 1004 as a whole-step maximum would give."""
    d = _one_kernel_design([1.0, 1.0, 1000.0], scale=[1.0, 3.0, 1.0])
    got = anygpu.step_us(_plain_theta(), np.array([[np.log(100.0), np.log(50.0)]]), d)[0]
    want = 4 * (1 + 1e6) ** (1 / 3) + (1e9 + 1e6) ** (1 / 3) + 50.0
    assert want == pytest.approx(1450.33, abs=0.01) and got == pytest.approx(want, rel=1e-9)


def test_small_gemm_dimensions_cost_compute():
    """Hand-computed: a 3x3 stem convolution (K = 3 x 3 x 3 = 27 input values per output, N = 64
    output channels) with n0 = k0 = 16: its compute time 10 us is stretched by (1 + 16/64)
    (1 + 16/27) = 1.25 x 1.5926 = 1.9907 -> 19.907 us; a big GEMM (N = K = 4096) barely moves."""
    th = _plain_theta(small_n=np.log(16.0), small_k=np.log(16.0))
    d = _one_kernel_design([10.0, 10.0], dim_n=[64.0, 4096.0], dim_k=[27.0, 4096.0], code=2)
    got = anygpu.kernel_us(th, d)
    assert got[0] == pytest.approx(10 * 1.25 * (1 + 16 / 27), rel=1e-6) == pytest.approx(19.907, abs=1e-3)
    assert got[1] == pytest.approx(10 * (1 + 16 / 4096) ** 2, rel=1e-6)


def test_small_dimensions_come_from_the_implicit_gemm():
    """The stem of a ResNet (3 -> 64 channels, 7x7, stride 2, 224 px, batch 12) is an implicit
    GEMM with M = 12 x 112 x 112, N = 64, K = 3 x 7 x 7 = 147: dim_n = min(M, N) = 64, dim_k = 147;
    an element-wise kernel has no GEMM shape (its dims are large: no stretch)."""
    t = kt.conv_rows(12, 3, 64, 7, 224, 224, 2, 3)
    v = kt.vec_rows(1000.0, 2, 1)
    tab = pd.concat([t, v], ignore_index=True)
    tab["pass"], tab["scale"] = "fw", 1.0
    a = anygpu.kernel_inputs(tab, get_device("rtx3090"), "fp16")
    assert a["dim_n"][0] == 64 and a["dim_k"][0] == 147 and a["dim_n"][1] >= 1e9


def test_bytes_that_fit_in_l2_read_faster():
    """Hand-computed: a memory-bound kernel of 10 us at the sheet bandwidth whose bytes are the L2
    size (fit 1 / (1 + 1) = 0.5) takes 10 e^(l2 x 0.5): 6.065 us at l2 = -1; bytes 100x L2: 9.90 us."""
    h200 = get_device("h200")
    l2 = h200.l2_mib * 2**20
    t = kt.gemm_rows(1, 64, 64, 64).assign(**{"pass": "fw", "scale": 1.0})
    t = pd.concat([t.assign(bytes=l2, flops=0.0), t.assign(bytes=100 * l2, flops=0.0)], ignore_index=True)
    t["family"] = "vec"
    a = anygpu.kernel_inputs(t, h200, "fp32")
    assert a["l2_fit"] == pytest.approx([0.5, 1 / 101], rel=1e-6)
    a["t_m0"] = np.array([10.0, 10.0])
    a["log_bw"] = np.zeros(2)
    d = anygpu.Design(**{k: a[k] for k in anygpu.KERNEL_FIELDS}, step=np.array([0, 1]), n_steps=2)
    got = anygpu.kernel_us(_plain_theta(l2=-1.0), d) - np.exp(-20.0)
    assert got == pytest.approx([10 * np.exp(-0.5), 10 * np.exp(-1 / 101)], rel=1e-6)
    assert got[0] == pytest.approx(6.065, abs=1e-3) and got[1] == pytest.approx(9.90, abs=5e-3)


def test_a_host_floor_holds_a_setting_whose_steps_do_not_show_its_launch_cost():
    """Long steps say nothing of the host's launch cost per kernel: unbounded, the fit may take any
    value (it went to 0.3 us for PyTorch 2 inference); with a floor (eager PyTorch: a few us per
    kernel) the fitted cost stays at or above it, and a setting without one is left free."""
    items = []
    for name in ("t4", "a100-80gb-sxm", "rtx4090", "h100-sxm"):
        for m in (2048, 4096, 8192):
            t = pd.concat([kt.gemm_rows(1, m, m, m), kt.vec_rows(m * m, 2, 1)], ignore_index=True)
            t["pass"], t["scale"] = "fw", 1.0
            items.append((t, get_device(name), "fp16", 0.0))
    settings = np.arange(len(items)) % 2  # two settings, neither launch-bound
    d = anygpu.design(items, settings=settings)
    ov = np.array([[np.log(0.01), np.log(20.0)], [np.log(0.01), np.log(20.0)]])
    y = anygpu.step_us(dict(anygpu.INIT), ov, d) / 1000
    floor = np.log(4.0)
    _, got = anygpu.fit(d, y, n_settings=2, max_nfev=50, host_floor=[floor, None])
    assert got[0, 0] >= floor - 1e-9  # held at the floor or above
    assert got.shape == (2, 2) and np.isfinite(got).all()
