"""Variant ``auto``'s interval residuals with the variant choice nested in the leave-one-model-out
loop (calibrate.auto_residuals): honest where the chosen variant's own residuals are optimistic.
Synthetic, pure numpy except the last test (a tiny SeerNet source); a few seconds."""

from __future__ import annotations

import numpy as np

from perfseer.fit import calibrate as C
from test_calibrate import source  # noqa: F401  (the tiny SeerNet source fixture)
from train_helpers import chain_graph

RIDGE = C.CalibrationConfig().ridge
CANDIDATES = ("full", "cols", "one")


def test_auto_residuals_take_each_rows_inner_choice():
    nested = {"a": np.array([0.1, 0.2, 0.3, 0.4]), "b": np.array([-1.0, -2.0, -3.0, -4.0])}
    inner = {"a": np.array([1.0, 1.0, 0.5, 0.5]), "b": np.array([2.0, 2.0, 0.1, 0.1])}
    res, used = C.auto_residuals(nested, inner)
    assert res.tolist() == [0.1, 0.2, -3.0, -4.0] and used == ["a", "a", "b", "b"]


def test_inner_error_is_the_folds_own_leave_one_model_out_error():
    rng = np.random.default_rng(3)
    logp, glob = rng.normal(0, 1, (12, 3)), rng.normal(0, 1, (12, 5))
    logy = logp[:, 0] + rng.normal(0, 0.1, 12)
    groups = np.repeat(np.arange(6), 2)  # two rows per model: both get their fold's error
    res, err = C.nested_residuals(logp, glob, logy, groups, "full", RIDGE, inner=True)
    assert np.allclose(res, C.nested_residuals(logp, glob, logy, groups, "full", RIDGE))
    out = groups == 0
    _, mse = C._fit_scored(logp[~out], glob[~out], logy[~out], groups[~out], RIDGE, "full")
    assert np.allclose(err[out], mse) and err[0] == err[1]


def test_nested_choice_is_not_optimistic_where_the_minimum_is():
    """Three variants of equal quality (the device depends on nothing the variants differ in):
    the smallest of their nested RMS values is below the held-out RMS; the nested choice's is not
    (on average over draws)."""
    rng = np.random.default_rng(0)
    s_min, s_nest, s_test = [], [], []
    for _ in range(60):
        n, k = 210, 10
        f = rng.normal(0, 1, n)
        logp = np.stack([f + rng.normal(0, 0.05, n) for _ in range(3)], axis=1)
        glob = rng.normal(0, 1, (n, 5))
        logy = 0.3 + logp[:, 0] + rng.normal(0, 0.1, n)
        cal, test, groups = slice(0, k), slice(k, None), np.arange(k)
        nested, inner = {}, {}
        for v in CANDIDATES:
            nested[v], inner[v] = C.nested_residuals(logp[cal], glob[cal], logy[cal], groups, v, RIDGE, inner=True)
        rms = {v: np.sqrt(np.mean(r ** 2)) for v, r in nested.items()}
        best = min(rms, key=rms.get)
        res, _ = C.auto_residuals(nested, inner)
        fit = C.fit_correction(logp[cal], glob[cal], logy[cal], groups, RIDGE, best)
        s_min.append(rms[best])
        s_nest.append(np.sqrt(np.mean(res ** 2)))
        s_test.append(np.sqrt(np.mean((logy[test] - fit.predict_log(logp[test], glob[test])) ** 2)))
    s_min, s_nest, s_test = map(np.mean, (s_min, s_nest, s_test))
    assert s_nest > s_min  # the choice's optimism removed
    assert abs(s_nest - s_test) < abs(s_min - s_test)


def test_calibrate_auto_interval_reads_the_nested_choice(source):  # noqa: F811
    source, _ = source
    rng = np.random.default_rng(1)
    graphs = [chain_graph(rng) for _ in range(12)]
    y = 3.0 * source.predict_graphs(graphs)[:, 1] * np.exp(rng.normal(0, 0.05, 12))
    models = [f"m{i}" for i in range(12)]
    cal = C.calibrate(source, graphs, y, models, config=C.CalibrationConfig(method="loglinear"))
    used = cal.extra["residual_variants"]
    assert set(used) == set(C.AUTO_VARIANTS) and sum(used.values()) == 12
    assert np.isclose(cal.extra["rms_nested_choice"], np.sqrt(np.mean(cal.residuals ** 2)))
    assert np.allclose(cal.interval["residuals"], np.round(cal.residuals, 5))
    # the card's variant is still the one of lowest nested RMS over all K rows
    assert cal.extra["variant"] == min(cal.extra["variant_rms"], key=cal.extra["variant_rms"].get)
    # a fixed variant keeps its own nested residuals
    fixed = C.calibrate(source, graphs, y, models, config=C.CalibrationConfig(method="loglinear", variant="cols"))
    assert "residual_variants" not in fixed.extra
    assert np.isclose(np.sqrt(np.mean(fixed.residuals ** 2)), fixed.extra["variant_rms"]["cols"])
