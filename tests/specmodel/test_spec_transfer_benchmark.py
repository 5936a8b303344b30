"""benchmarks/lib/spec_transfer_logo.py's run matching and inner leave-one-GPU-out on synthetic runs (no data needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


from benchmarks.lib import spec_transfer_logo as stl  # noqa: E402

SPECS = {"g1": np.array([50.0, 800, 60, 1500, 6]), "g2": np.array([100.0, 1000, 100, 2000, 40]),
         "g3": np.array([200.0, 2000, 150, 2400, 96]), "g4": np.array([300.0, 1500, 180, 2200, 128])}


def _table(n_models=40):
    rng = np.random.default_rng(0)
    runs, terms, roof = [], [], {g: [] for g in SPECS}
    for m in range(n_models):
        flops, mem = 10 ** rng.uniform(10, 12), 10 ** rng.uniform(8, 10)
        for g in SPECS:
            b = 2048 if g == "g4" else 1024  # the big GPU ran twice the batch
            pos = len(terms)
            terms.append([np.log10(flops * b), np.log10(mem * b), 2.0, np.log10(b), np.log10(flops / mem)])
            for h, v in SPECS.items():
                roof[h].append(max(flops * b / (v[0] * 1e12), mem * b * 0.5 / (v[1] * 1e9)) * 1e3)
            runs.append({"device": g, "model": f"m{m}", "input_shape": "3x224x224", "batch_size": b,
                         "split": "test" if m % 4 == 0 else "train", "gpos": pos,
                         "latency_ms": 3.0 * roof[g][pos] ** 0.9})
    return stl.Table(pd.DataFrame(runs), np.array(terms), {g: np.array(v) for g, v in roof.items()}, SPECS)


def test_runs_are_matched_by_model_at_the_nearest_batch():
    tab = _table()
    rows = tab.rows("g4", True)
    m = tab.match(rows, "g1")
    assert (m >= 0).all() and (tab.runs["model"].to_numpy()[m] == tab.runs["model"].to_numpy()[rows]).all()
    assert (tab.batch[m] == 1024).all() and (tab.batch[rows] == 2048).all()
    assert len(tab.rows("g1", False)) + len(tab.rows("g1", True)) == 40


def test_inner_logo_picks_a_fitted_rule_that_transfers_exactly():
    tab = _table()
    (fs, a, c), scores = stl.select(tab, ["g1", "g2", "g3"])
    assert scores[0][1] < 1.0 and fs not in ("identity",)
    from perfseer.specmodel.transfer import Transfer

    tr = Transfer(feature_set=fs, alpha=a, combine=c).fit(tab.pairs(["g1", "g2", "g3"]))
    rows = tab.rows("g4", True)
    p = tab.predict(tr, "g4", ["g1", "g2", "g3"], rows)
    assert stl.mape(p, tab.logy[rows]) < 2.0


def test_interval_coverage_is_leave_one_gpu_out():
    resid = {"measured": {"a": np.full(10, 0.05), "b": np.full(10, 0.05), "c": np.full(10, 1.0)}}
    cov = stl.interval_coverage(resid)["measured"]
    assert cov["c"]["coverage_pct"] == 0.0 and cov["a"]["coverage_pct"] == 100.0
    assert cov["all"]["coverage_pct"] == pytest.approx(20 / 30 * 100)
