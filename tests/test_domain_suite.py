"""The domain-verdict study's choice and scores (benchmarks/suites/domain.py), on made-up numbers."""

import numpy as np
from benchmarks.suites import domain as D

C = {"candidates": ["checks", "checks+knn>3", "checks+knn>2"], "in_aim": 1.25, "tie": 0.02}


def _res(out_ratios: dict, in_ratio: float = 0.95) -> dict:
    return {"val": {r: {"in_ratio": in_ratio, "out_ratio": v} for r, v in out_ratios.items()}}


def test_the_best_validation_rule_is_chosen_and_a_near_tie_goes_to_the_simpler():
    res = {"a": _res({"checks": 1.50, "checks+knn>3": 1.60, "checks+knn>2": 1.40}),
           "b": _res({"checks": 1.30, "checks+knn>3": 1.30, "checks+knn>2": 1.20})}
    assert D.choose(res, C) == "checks+knn>3"  # mean 1.45 against 1.40: beyond the tie
    res["a"]["val"]["checks+knn>3"]["out_ratio"] = 1.53  # mean 1.415: within 0.02 of it, the simpler wins
    assert D.choose(res, C) == "checks"


def test_a_rule_whose_in_domain_rows_miss_the_aim_is_not_chosen():
    res = {"a": _res({"checks": 1.5, "checks+knn>3": 3.0, "checks+knn>2": 1.0})}
    res["a"]["val"]["checks+knn>3"]["in_ratio"] = 1.3
    assert D.choose(res, C) == "checks"


def test_scores_split_the_rows_and_compare_with_the_pooled_error():
    ape = np.array([5.0, 5.0, 20.0, 30.0])
    s = D._score(ape, np.array([False, False, True, True]), K=15.0)
    assert (s["rows_in"], s["rows_out"], s["mape_in"], s["mape_out"]) == (2, 2, 5.0, 25.0)
    assert s["in_ratio"] == 5.0 / 15.0 and s["out_ratio"] == 25.0 / 15.0
    assert D._score(ape, np.zeros(4, bool), 15.0)["mape_out"] is None


def test_knn_ratio_is_one_scale_for_training_like_rows_and_large_far_away():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(200, 3)), [[0.0, 0.0, 0.0], [40.0, 40.0, 40.0]]])
    r = D._knn_ratio(X, np.arange(200), [200, 201], k=5, quantile=0.9)
    assert r[0] < 1.0 and r[1] > 10.0
