"""The calibration interval on a synthetic problem with known noise: a new device whose log latency
is a linear function of three source devices' log predictions plus Gaussian noise.  Pure numpy,
about a second."""

from __future__ import annotations

import numpy as np
import pytest

from perfseer.errors import PerfseerError
from perfseer.fit import calibrate as C

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
            iv = C.interval_halfwidth(r, g, 0.9, "scaled")
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
        iv = C.interval_halfwidth(np.full(4, 0.1), np.arange(4), 0.9, "scaled")
        assert iv["log_halfwidth"] == pytest.approx(iv["t_bound"]) and iv["t_bound"] > 2.0 * 0.1
    finally:
        C.SCALE_TABLE = C_scale
    # without a table for the level, the scaled rule falls back to conformal / Student-t
    iv = C.interval_halfwidth(np.full(6, 0.1), np.arange(6), 0.8, "scaled")
    assert iv["rule"] == "scaled" and iv["basis"] in ("conformal", "student-t")
    with pytest.raises(PerfseerError, match="unknown interval rule"):
        C.interval_halfwidth(np.full(6, 0.1), np.arange(6), 0.9, "bogus")


def _far_device(rng, n, k):
    """A device whose error grows with the distance from the K calibration models in a 2-d
    "embedding": the calibration models sit in the unit disc, the others up to 4 away."""
    emb = rng.normal(0, 1, (n, 2))
    emb[k:] *= rng.uniform(0.5, 4.0, (n - k, 1))
    r = rng.normal(0, 1, n) * 0.05 * (1 + np.linalg.norm(emb, axis=1))
    return emb, r


def test_distance_rule_widens_with_distance_and_flags_far_models(monkeypatch):
    rng = np.random.default_rng(5)
    k, groups = 20, np.arange(20)
    monkeypatch.setitem(C.DISTANCE_TABLE, "random", {0.9: {k: 1.8}})
    emb, r = _far_device(rng, 400, k)
    iv = C.interval_halfwidth(r[:k], groups, 0.9, "distance", coords=emb[:k])
    assert iv["basis"] == "distance" and iv["distance"]["scale"] == 1.8
    assert iv["distance"]["d_ref"] > 0 and len(iv["distance"]["coords"]) == k
    q, far = C.row_halfwidths(iv, emb[k:])
    d = C.nearest_distance(emb[k:], emb[:k])
    # the half-width grows with the distance from the calibration set, linearly
    assert np.all(np.diff(q[np.argsort(d)]) >= -1e-12) and q.max() > 1.5 * q.min()
    assert np.array_equal(far, d > iv["distance"]["far"]) and far.any() and not far.all()
    # the calibration models themselves are at distance 0: the narrowest interval, never flagged
    q0, far0 = C.row_halfwidths(iv, emb[:k])
    assert np.allclose(q0, q0[0]) and not far0.any()
    # without coordinates (a source with no embedding) or with another rule: one half-width for all
    assert C.interval_halfwidth(r[:k], groups, 0.9, "distance")["basis"].startswith("scaled")
    assert C.row_halfwidths(C.interval_halfwidth(r[:k], groups, 0.9, "scaled"), emb[k:]) == (None, None)


def test_distance_rule_learned_on_simulated_devices_covers_new_ones(monkeypatch):
    # c(K) learned on simulated devices, coverage checked on other draws: the rule's scale-free
    # ratio |r| / (s_w w(d)) carries the level over, and covers the far rows better than a
    # constant width does
    rng = np.random.default_rng(6)
    k, groups = 20, np.arange(20)

    def sims(n):
        out = []
        for _ in range(n):
            emb, r = _far_device(rng, 300, k)
            loo = C.loo_distance(emb[:k], groups)
            unit = C.row_scales(r[:k], loo, C.nearest_distance(emb[k:], emb[:k]), C.DISTANCE_RULE["beta"])
            out.append((emb, r, np.abs(r[k:]) / unit))
        return out

    c = C.scale_for([x[2] for x in sims(40)], 0.9)
    monkeypatch.setitem(C.DISTANCE_TABLE, "random", {0.9: {k: c}})
    cov, cov_far, cov_const_far = [], [], []
    for emb, r, _ in sims(40):
        iv = C.interval_halfwidth(r[:k], groups, 0.9, "distance", coords=emb[:k])
        q, _ = C.row_halfwidths(iv, emb[k:])
        d = C.nearest_distance(emb[k:], emb[:k])
        far = d > np.quantile(d, 0.8)
        cov.append(np.mean(np.abs(r[k:]) <= q))
        cov_far.append(np.mean(np.abs(r[k:][far]) <= q[far]))
        q_const = np.quantile(np.abs(r[k:]) / np.sqrt(np.mean(r[:k] ** 2)), 0.9) * np.sqrt(np.mean(r[:k] ** 2))
        cov_const_far.append(np.mean(np.abs(r[k:][far]) <= q_const))
    assert 0.85 <= np.mean(cov) <= 0.95
    assert np.mean(cov_far) > np.mean(cov_const_far) + 0.05


def test_quantile_set_spans_the_predicted_range():
    logp = np.stack([np.linspace(0, 1, 101), np.linspace(0, 2, 101)], axis=1)
    pick = C.quantile_set(logp, 5)
    assert pick == sorted(pick) and len(pick) == 5 and pick[0] < 20 and pick[-1] > 80
    assert C.quantile_set(logp[:3], 10) == [0, 1, 2]


def test_residual_scale_spreads():
    r = np.array([0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8, 0.9])
    assert np.isclose(C.residual_scale(r), np.sqrt(np.mean(r ** 2)))
    # conformal rank ceil((9 + 1) 0.9) = 9: the largest |r|; with 19 rows the 18th
    assert C.residual_scale(r, "conformal") == 0.9
    assert C.residual_scale(np.arange(1, 20) / 10, "conformal") == 1.8
    assert C.residual_scale(r, "median") == 0.5
    # row_scales with a spread: the spread of r / w times w(d), w = 1 without a distance rule
    d = np.ones(9)
    assert np.allclose(C.row_scales(r, d, np.ones(3), 0.0, stat="conformal"), 0.9)
    with pytest.raises(PerfseerError, match="unknown residual scale"):
        C.residual_scale(r, "mad")
