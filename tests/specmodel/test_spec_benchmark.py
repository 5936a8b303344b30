"""benchmarks/lib/spec_neusight.py's interval helpers on synthetic leave-one-GPU-out rows (no data needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


from benchmarks.lib import spec_neusight as sn  # noqa: E402


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
