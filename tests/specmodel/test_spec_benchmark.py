"""benchmarks/spec_neusight.py's interval helpers on synthetic leave-one-GPU-out rows (no data needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import spec_neusight as sn  # noqa: E402


def _rows(err_by_gpu):
    rows = []
    for g, errs in err_by_gpu.items():
        for i, e in enumerate(errs):
            rows.append({"gpu": g, "workload": f"w{i}", "phase": "infer", "measured_ms": 100.0,
                         "spec_ms": 100.0 * (1 + e), "roofline_ms": 50.0, "by_family": {}})
    return pd.DataFrame(rows)


def test_conformal_coverage_is_leave_one_gpu_out():
    # four GPUs predicted within 10 %, P4 three times too slow: its q comes from the others, so it is not covered
    errs = {g: [0.02, -0.05, 0.08, -0.1] for g in sn.GPUS if g != "tesla-p4"}
    errs["tesla-p4"] = [2.0, 2.0]
    cov = sn._conformal_coverage(_rows(errs))
    assert cov["per_gpu"]["tesla-p4"]["coverage_pct"] == 0.0
    assert cov["per_gpu"]["t4"]["coverage_pct"] == 100.0
    assert cov["per_gpu"]["tesla-p4"]["in_domain"] is False  # P4 is below the others' bandwidth and SMs
    assert cov["all"]["coverage_pct"] == pytest.approx(16 / 18 * 100)


def test_trust_calibration_has_what_the_card_needs():
    df = _rows({g: [0.1, -0.1, 0.2, -0.2] for g in sn.GPUS})
    t = sn.trust_calibration(df, "cmd")
    assert t["fp32"]["n"] == 20 and t["fp32"]["q"] == pytest.approx(-np.log(0.8), rel=1e-6)  # 19th of 20 |ln(1 / (1 + e))|
    assert "cmd" in t["source"] and len(t["fp32"]["log_residuals"]) == 20


def test_shrink_weights_between_the_mlp_and_the_physics_estimate():
    """benchmarks/spec_shrink.py: w = 1 sums the MLP's kernels, w = 0 the physics estimate
    (roofline + floor), 0.5 their per-kernel geometric mean; the nested choice never looks at the
    held-out GPU (a candidate perfect on it alone and poor on every inner fold is not chosen)."""
    import spec_shrink as ss

    # two kernels, MLP at 4x and 9x the roofline (1 and 2 µs), physics (roofline + 1 µs floor) 2x and 1.5x
    p = pd.DataFrame({"train": "a,b", "gpu": "c", "wi": 0, "phase": "infer", "measured_ms": 0.026, "scale": 1.0,
                      "troof_us": [1.0, 2.0], "logr": np.log10([4.0, 9.0]), "logr_phys": np.log10([2.0, 1.5])})
    ms = {w: float(ss.end_to_end(p, np.full(2, w))["ms"].iloc[0]) for w in (1.0, 0.0, 0.5)}
    assert ms[1.0] == pytest.approx(0.004 + 0.018)
    assert ms[0.0] == pytest.approx(0.002 + 0.003)
    assert ms[0.5] == pytest.approx((np.sqrt(4 * 2) * 1 + np.sqrt(9 * 1.5) * 2) / 1000)

    def fold(train, gpu, err):
        return {"train": ",".join(train), "gpu": gpu, "wi": 0, "phase": "infer", "err": err}

    gpus = sn.GPUS
    good_inner, good_outer = [], []
    for h in gpus:  # candidate "inner": 5 % on every inner fold, 50 % held out; "outer": the reverse
        tr = tuple(x for x in gpus if x != h)
        for i in tr:
            inner_train = tuple(x for x in tr if x != i)
            good_inner.append(fold(inner_train, i, 5.0))
            good_outer.append(fold(inner_train, i, 50.0))
        good_inner.append(fold(tr, h, 50.0))
        good_outer.append(fold(tr, h, 1.0))
    res = ss._nested({"inner": pd.DataFrame(good_inner), "outer": pd.DataFrame(good_outer)})
    assert [c for _, c, _, _ in res] == ["inner"] * len(gpus)
    assert all(v == 50.0 for _, _, v, _ in res)
