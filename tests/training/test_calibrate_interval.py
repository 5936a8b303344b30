"""The calibration interval on a synthetic problem with known noise: a new device whose log latency
is a linear function of three source devices' log predictions plus Gaussian noise.  Pure numpy,
about a second."""

from __future__ import annotations

import numpy as np
import pytest

from perfseer.errors import PerfseerError
from perfseer.training import calibrate as C

RIDGE = C.CalibrationConfig().ridge


def _device(rng, n, sigma):
    """``n`` models: source log predictions [n, 3], log global features [n, 5], the new device's log y."""
    f = rng.normal(0, 1.0, n)
    logp = np.stack([f + rng.normal(0, 0.2, n) for _ in range(3)], axis=1)
    glob = rng.normal(0, 1, (n, 5))
    logy = 0.4 + logp[:, 0] + 0.3 * (logp[:, 1] - logp[:, 0]) + rng.normal(0, sigma, n)
    return logp, glob, logy


def _calibrations(seed, draws, k, sigma, variant="cols"):
    """Per draw: nested residuals of K calibration models and the held-out rows' residuals."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        logp, glob, logy = _device(rng, k + 200, sigma)
        cal, test = slice(0, k), slice(k, None)
        groups = np.arange(k)
        fit = C.fit_correction(logp[cal], glob[cal], logy[cal], groups, RIDGE, variant)
        res = C.nested_residuals(logp[cal], glob[cal], logy[cal], groups, variant, RIDGE)
        out.append((res, groups, logy[test] - fit.predict_log(logp[test], glob[test])))
    return out


def test_nested_residuals_are_honest_and_the_fit_recovers_the_device():
    (res, groups, r_test), = _calibrations(0, 1, 30, 0.1)
    # honest residuals: about the noise, never much below it (choosing lambda on them would be)
    assert 0.07 < np.sqrt(np.mean(res ** 2)) < 0.2
    assert np.sqrt(np.mean(r_test ** 2)) < 0.15


@pytest.mark.parametrize("rule", ["conformal", "student-t"])
def test_distribution_free_rules_cover_about_90_percent_at_k_15(rule):
    cov = [np.mean(np.abs(rt) <= C.interval_halfwidth(r, g, 0.9, rule)["log_halfwidth"])
           for r, g, rt in _calibrations(1, 40, 15, 0.1)]
    assert 0.85 <= np.mean(cov) <= 0.97


def test_scaled_rule_learned_on_simulated_devices_covers_a_new_one(monkeypatch):
    # learn c(K) on devices with one noise level, check it on devices with another: |r| / s is
    # scale-free, so the level carries over
    for k in (10,):
        ratios = [np.abs(rt) / np.sqrt(np.mean(r ** 2)) for r, _, rt in _calibrations(2, 50, k, 0.1)]
        c = C.scale_for(ratios, 0.9)
        assert 1.3 < c < 3.5  # about t_{K-1} sqrt(1 + 1/K) = 1.8-1.9 for a Gaussian, wider for a noisy s
        monkeypatch.setitem(C.SCALE_TABLE, "random", {0.9: {k: c}})
        cov = []
        for r, g, rt in _calibrations(3, 50, k, 0.3):
            iv = C.interval_halfwidth(r, g, 0.9)
            assert iv["basis"] == "scaled" and iv["scale"] == pytest.approx(c)
            cov.append(np.mean(np.abs(rt) <= iv["log_halfwidth"]))
        assert 0.85 <= np.mean(cov) <= 0.95


def test_scale_for_and_the_table():
    ratios = [np.linspace(0, 2, 101), np.linspace(0, 4, 101)]
    c = C.scale_for(ratios, 0.75)
    cover = np.mean([np.mean(r <= c) for r in ratios])
    assert cover >= 0.75 and np.mean([np.mean(r < c) for r in ratios]) < 0.75  # the smallest such c
    with pytest.raises(PerfseerError, match="no simulated calibrations"):
        C.scale_for([], 0.9)
    table = {"random": {0.9: {10: 2.0, 50: 1.5}}}
    C_scale = C.SCALE_TABLE
    try:
        C.SCALE_TABLE = table
        assert C.scale_factor(5, 0.9) == 2.0 and C.scale_factor(100, 0.9) == 1.5  # held constant outside
        assert 1.5 < C.scale_factor(20, 0.9) < 2.0
        assert C.scale_factor(10, 0.8) is None and C.scale_factor(10, 0.9, "spanning") is None
    finally:
        C.SCALE_TABLE = C_scale
    # below the table's smallest K the scaled rule is never narrower than the Student-t bound
    try:
        C.SCALE_TABLE = table
        iv = C.interval_halfwidth(np.full(4, 0.1), np.arange(4), 0.9)
        assert iv["log_halfwidth"] == pytest.approx(iv["t_bound"]) and iv["t_bound"] > 2.0 * 0.1
    finally:
        C.SCALE_TABLE = C_scale
    # without a table for the level, the scaled rule falls back to conformal / Student-t
    iv = C.interval_halfwidth(np.full(6, 0.1), np.arange(6), 0.8)
    assert iv["rule"] == "scaled" and iv["basis"] in ("conformal", "student-t")
    with pytest.raises(PerfseerError, match="unknown interval rule"):
        C.interval_halfwidth(np.full(6, 0.1), np.arange(6), 0.9, "bogus")


def test_quantile_set_spans_the_predicted_range():
    logp = np.stack([np.linspace(0, 1, 101), np.linspace(0, 2, 101)], axis=1)
    pick = C.quantile_set(logp, 5)
    assert pick == sorted(pick) and len(pick) == 5 and pick[0] < 20 and pick[-1] > 80
    assert C.quantile_set(logp[:3], 10) == [0, 1, 2]
