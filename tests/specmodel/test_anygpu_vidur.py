"""Vidur's operator times as a source of the any-GPU model (benchmarks.lib.anygpu_data.vidur*):
read from a fixture copied from Vidur's CSV (tests/specmodel/data/vidur/PROVENANCE.md), one-kernel
fp16 tables checked by hand, the hashed sample, the kernel-time setting (no host or step overhead,
not fitted), the per-setting extra per kernel, and the cell weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from benchmarks.lib import anygpu_data as D
from benchmarks.lib import anygpu_logo as L
from benchmarks.lib import llm_fit

from perfseer.devices import get_device
from perfseer.specmodel import anygpu
from perfseer.specmodel import kernels as kt

FIXTURE = Path(__file__).parent / "data" / "vidur"


@pytest.fixture(scope="module")
def ops() -> pd.DataFrame:
    return llm_fit.load("a40", root=FIXTURE)


def _op(ops, tokens, op):
    return ops[(ops["tokens"] == tokens) & (ops["op"] == op)].iloc[0]


def test_reader_on_the_fixture(ops):
    assert set(ops["tokens"]) == {1, 64, 512, 4096} and set(ops["tp"]) == {1, 2, 4}
    r = _op(ops, 64, "qkv_proj")
    assert r["tp"] == 2 and r["time_us"] == pytest.approx(101.0)  # time_stats.attn_pre_proj.median = 0.101 ms
    assert (r["hidden"], r["heads"], r["kv_heads"], r["ffn"], bool(r["gated"])) == (4096, 32, 32, 11008, True)
    assert _op(ops, 4096, "residual_add")["time_us"] == pytest.approx(172.0)  # time_stats.add.median


def test_gemm_row_by_hand(ops):
    """Llama-2-7B's QKV projection at 64 tokens on one of 2 tensor-parallel GPUs: M = 64 tokens,
    K = 4096 (hidden), N = (32 + 2 x 32) heads x 128 / 2 = 6144; 2 M N K = 3,221,225,472 FLOPs;
    fp16 bytes (M K + K N + M N) x 2 = (262,144 + 25,165,824 + 393,216) x 2 = 51,642,368."""
    t = D.vidur_table(_op(ops, 64, "qkv_proj"))
    assert len(t) == 1 and list(t.columns) == D.KCOLS
    g = t.iloc[0]
    assert g["family"] == "gemm" and (g["B"], g["M"], g["N"], g["K"]) == (1, 64, 6144, 4096)
    assert g["flops"] == 3_221_225_472 and g["bytes"] == 51_642_368 and g["dtype_bytes"] == 2
    assert g["pass"] == "fw" and g["scale"] == 1.0
    # the down projection: K = 11008 / 2 per GPU, N = hidden
    d = D.vidur_table(_op(ops, 64, "mlp_down")).iloc[0]
    assert (d["M"], d["N"], d["K"]) == (64, 4096, 5504)
    # element-wise: the residual add reads two and writes one fp16 tokens x hidden tensor; the gated
    # activation silu(gate) * up reads both halves of the up projection (2 x 64 x 5504) and writes one
    add = D.vidur_table(_op(ops, 64, "residual_add")).iloc[0]
    assert add["family"] == "vec" and add["bytes"] == 64 * 4096 * 3 * 2
    act = D.vidur_table(_op(ops, 64, "mlp_act")).iloc[0]
    assert act["elems"] == 64 * 5504 and act["bytes"] == 64 * 5504 * 3 * 2
    # the RMS norm: rows of the hidden width, read and written, plus its weight (and bias) row
    ln = D.vidur_table(_op(ops, 64, "input_norm")).iloc[0]
    assert ln["family"] == "ln" and (ln["rows"], ln["cols"]) == (64, 4096) and ln["bytes"] == (2 * 64 * 4096 + 2 * 4096) * 2


def test_sample_is_hashed_per_power_of_two_bin(ops):
    s = D.vidur_sample(ops)
    # the fixture's four (tokens, tp) are in four bins: all kept, the eight operators each (no
    # embedding, no post-attention norm)
    assert len(s) == 4 * 8 and set(s["op"]) == set(D.VIDUR_OPS)
    g = D.vidur_sample(ops, keep=D.VIDUR_OPS[:4])  # the vidur-gemm source: the four projections
    assert len(g) == 4 * 4 and set(g["op"]) == {"qkv_proj", "out_proj", "mlp_up", "mlp_down"}
    # three token counts in one bin (64, 72, 80 -> bin 6) keep one, the one with the smallest hash,
    # whatever the GPU
    one = _op(ops, 64, "mlp_up")
    many = pd.DataFrame([dict(one, tokens=t) for t in (64, 72, 80)])
    got = D.vidur_sample(many)
    want = min((64, 72, 80), key=lambda t: D.hkey(f"Llama-2-7b-hf:2:{t}"))
    assert list(got["tokens"]) == [want]
    assert D.vidur_sample(many.assign(gpu="a100"))["tokens"].tolist() == [want]


def test_source_rows_are_their_own_cell(monkeypatch, tmp_path):
    real = llm_fit.load
    monkeypatch.setattr(llm_fit, "load", lambda g: real(g, root=FIXTURE))  # a40 only (no a100 in the fixture)
    df, tables = D.build(tmp_path, sources=("vidur",), log=lambda s: None)
    assert len(df) == 32 and set(df["gpu"]) == {"a40"} and set(df["kind"]) == {"llm-op"}
    assert {L.cell_of(r) for _, r in df.iterrows()} == {"llm-op/infer/fp16"}
    assert set(df["precision"]) == {"fp16"} and (df["h2d_bytes"] == 0).all()
    r = df[df["model"] == "Llama-2-7b-hf/qkv_proj/tp2"].iloc[0]
    assert r["measured_ms"] == pytest.approx(0.101) and tables[r["key"]].iloc[0]["N"] == 6144
    again, _ = D.build(tmp_path, sources=("vidur",), log=lambda s: None)  # read back from the cache
    assert again["kind"].tolist() == df["kind"].tolist()


def test_cell_weights_make_each_gpu_source_cell_weigh_one():
    df = pd.DataFrame({"gpu": ["a40"] * 3000 + ["t4"] * 10 + ["a40"] * 5,
                       "source": ["vidur"] * 3000 + ["neusight"] * 10 + ["vidur"] * 5,
                       "cell": ["llm-op/infer/fp16"] * 3010 + ["x/infer/fp16"] * 5})
    w = pd.Series(L.cell_weights(df))
    sums = w.groupby(df["gpu"] + df["source"] + df["cell"]).sum()
    assert np.allclose(sums, 1.0) and len(sums) == 3


def _one_kernel_design(t_c0, setting):
    n = len(t_c0)
    one = np.ones(n)
    return anygpu.Design(t_c0=np.asarray(t_c0, float), t_m0=np.zeros(n), occ=one, code=np.zeros(n, dtype=np.int64),
                         backward=np.zeros(n, bool), scale=one, log_peak=np.zeros(n), log_bw=np.zeros(n),
                         step=np.arange(n), n_steps=n, dim_n=np.full(n, 1e9), dim_k=np.full(n, 1e9),
                         h2d_bytes=np.zeros(n), setting=np.asarray(setting, dtype=np.int64))


def _plain(**kw):
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=3.0, kernel_floor=-20.0, small_n=-20.0, small_k=-20.0, h2d=0.0, **kw)
    return th


def test_kernel_time_setting_adds_nothing_and_extra_adds_per_kernel():
    """Hand-computed: a GEMM of 10 us at peak (no inefficiency).  Under the kernel-time setting its
    step is the kernel's 10 us; under a setting with a 100 us host cost per kernel, a 50 us step
    constant and 5 us extra per kernel: (15^3 + 100^3)^(1/3) + 50 = 100.1124 + 50 us."""
    d = _one_kernel_design([10.0, 10.0], [0, 1])
    ov = np.array([anygpu.KERNEL_TIME, (np.log(100.0), np.log(50.0), np.log(5.0))])
    got = anygpu.step_us(_plain(), ov, d)
    want = (15.0**3 + 100.0**3) ** (1 / 3) + 50.0
    assert got[0] == pytest.approx(10.0, rel=1e-6) and got[1] == pytest.approx(want, rel=1e-9)
    assert want == pytest.approx(150.1124, abs=1e-4)
    # a two-column overhead (a card written before the extra) adds none
    assert anygpu.step_us(_plain(), ov[:, :2], d)[1] == pytest.approx((10.0**3 + 100.0**3) ** (1 / 3) + 50.0)


def test_fit_holds_the_kernel_time_setting():
    """Steps of an eager setting (host cost, step constant) and one-kernel steps of a profiler's
    kernel times: the fit leaves the latter's overhead at nothing, so no host or step constant can
    stand in for the kernels' time."""
    items, st = [], []
    for name in ("a40", "a100-80gb-sxm"):
        for m in (256, 1024, 4096):
            t = kt.gemm_rows(1, m, m, m, dtype_bytes=2.0)
            t["pass"], t["scale"] = "fw", 1.0
            items += [(t, get_device(name), "fp16", 0.0)] * 2
            st += [0, 1]
    d = anygpu.design(items, st)
    truth = dict(anygpu.INIT, c_gemm_tensor=0.3)
    ov = np.array([(np.log(8.0), np.log(30.0), np.log(4.0)), anygpu.KERNEL_TIME])
    y = anygpu.step_us(truth, ov, d) / 1000
    params, got = anygpu.fit(d, y, n_settings=2, kernel_time=(1,), max_nfev=60)
    assert tuple(got[1]) == anygpu.KERNEL_TIME and np.isfinite(got[0]).all() and got[0, 2] > anygpu.NO_TIME
    pred = anygpu.step_us(params, got, d) / 1000
    assert np.abs(pred / y - 1).max() < 0.05
    # without kernel-time labels the eager extra per kernel is not separable from the floor: held at nothing
    eager = np.array(st) == 0
    _, got = anygpu.fit(anygpu.subset(d, eager), y[eager], n_settings=1, max_nfev=5)
    assert got.shape == (1, 3) and got[0, 2] == anygpu.NO_TIME
