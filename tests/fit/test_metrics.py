"""Metrics against hand-computed values, ties included."""

import math

import numpy as np
import pytest

from perfseer.errors import PerfseerError
from perfseer.fit.metrics import (
    evaluate, evaluate_targets, kendall, mape, rankdata, rmse, spearman, within,
)

T, P = [1.0, 2.0, 4.0, 5.0], [1.1, 1.8, 4.0, 6.0]  # relative errors 10 %, 10 %, 0 %, 20 %


def test_errors_by_hand():
    assert mape(T, P) == pytest.approx(10.0)
    assert rmse(T, P) == pytest.approx(math.sqrt((0.01 + 0.04 + 0 + 1) / 4))
    assert within(T, P, 5) == pytest.approx(25.0)
    assert within(T, P, 10) == pytest.approx(75.0)  # exactly 10 % counts as within, despite rounding
    assert within(T, P, 20) == pytest.approx(100.0)


def test_evaluate_has_every_metric():
    m = evaluate(T, P)
    assert set(m) == {"n", "mape", "rmse", "acc5", "acc10", "acc20", "spearman", "kendall"}
    assert (m["n"], m["acc10"], m["spearman"], m["kendall"]) == (4, pytest.approx(75.0), 1.0, 1.0)
    both = evaluate_targets(np.array([T, T]).T, np.array([P, T]).T, ["a", "b"])
    assert both["a"]["mape"] == pytest.approx(10.0) and both["b"]["mape"] == 0.0


def test_rank_correlations_with_ties_by_hand():
    x, y = [1, 2, 2, 3], [1, 3, 2, 4]
    assert rankdata(x).tolist() == [1.0, 2.5, 2.5, 4.0]
    # ranks [1, 2.5, 2.5, 4] vs [1, 3, 2, 4]: sum dxdy 4.5, sum dx^2 4.5, sum dy^2 5
    assert spearman(x, y) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    # 6 pairs: 5 concordant, 1 tied in x only: tau_b = 5 / sqrt(5 * 6)
    assert kendall(x, y) == pytest.approx(5 / math.sqrt(30))
    assert kendall([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # tied in both inputs at once: the pair counts in n1, n2 and the joint ties
    assert kendall([1, 1, 2], [5, 5, 6]) == pytest.approx(1.0)


def test_constant_input_has_no_rank_correlation():
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(kendall([1, 2, 3], [2, 2, 2]))


def test_rank_correlations_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for n in (2, 5, 33, 500):
        a = rng.integers(0, 6, n).astype(float)  # many ties
        b = a + rng.integers(-2, 3, n)
        assert kendall(a, b) == pytest.approx(stats.kendalltau(a, b).statistic, abs=1e-12)
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)


def test_bad_input_is_refused():
    with pytest.raises(PerfseerError, match="3 values but y_pred has 2"):
        mape([1, 2, 3], [1, 2])
    with pytest.raises(PerfseerError, match="targets > 0"):
        mape([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(PerfseerError, match="targets > 0"):
        evaluate([1.0, -1.0], [1.0, 1.0])
    assert rmse([0.0, 0.0], [1.0, 1.0]) == 1.0  # RMSE needs no positive target
    with pytest.raises(PerfseerError, match="NaN"):
        rmse([1.0, float("nan")], [1.0, 1.0])
    with pytest.raises(PerfseerError, match="no values"):
        evaluate([], [])
