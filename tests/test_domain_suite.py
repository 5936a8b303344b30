"""The domain-verdict study's choice and scores (benchmarks/suites/domain.py), on made-up numbers."""

import numpy as np
import pytest
from benchmarks.runner import BenchError
from benchmarks.suites import domain as D

C = {"candidates": ["checks", "checks+spread>0.25"], "in_aim": 1.25, "out_aim": 2.0, "tie": 0.02}


def _fold(val_fams: int, ape, checks, spread) -> dict:
    """A fold whose validation and test rows are the same made-up rows."""
    part = {"ape": list(ape), "checks": list(checks), "spread": list(spread)}
    return {"val_families_fold": val_fams, "val": part, "test": part}


def _results(ape, checks, spread) -> dict:
    """Four folds; fold j validates on the families of fold j + 1, every set the same rows."""
    return {"s": {"card": "c", "folds": {str(j): _fold((j + 1) % 4, ape, checks, spread) for j in range(4)}}}


def test_group_spread_averages_seeds_then_takes_the_spread_of_the_groups():
    logs = np.array([[0.0, 1.0], [0.2, 1.0], [1.0, 1.0]])  # members 0 and 1 seeds of one architecture
    s = D.group_spread(logs, [0, 0, 1])
    assert s[0] == pytest.approx(np.std([0.1, 1.0])) and s[1] == 0.0


def test_spread_of_a_packed_blend_groups_a_seedmean_members_seeds():
    runs = {"a": {"p": [1.0, 2.0]}, "b": {"p": [4.0, 2.0]}, "b-s1": {"p": [16.0, 2.0]}, "b-s12x": {"p": [1e9, 1e9]}}
    s = D._spread({"methods": runs}, "stack+shift:a+b-seedmean", "p")
    # group b: mean log of 4 and 16 = log 8 ("b-s12x" is not a seed); against log 1
    assert s[0] == pytest.approx(np.std([0.0, np.log(8.0)])) and s[1] == pytest.approx(0.0)


def test_a_spread_rule_marks_the_rows_above_its_validation_quantile_on_top_of_the_checks():
    spread = np.arange(8.0)
    thr = D._threshold("checks+spread>0.25", spread)
    assert thr == pytest.approx(np.quantile(spread, 0.75))
    out = D._mark({"checks": [True] + [False] * 7, "spread": spread}, thr)
    assert out.tolist() == [True, False, False, False, False, False, True, True]
    assert D._threshold("checks", spread) is None
    with pytest.raises(BenchError, match="unknown rule"):
        D._threshold("checks+knn>2", spread)


def test_the_rule_that_singles_out_the_worse_rows_is_chosen():
    ape = [5.0] * 6 + [30.0, 30.0]
    res = _results(ape, [False] * 8, [0, 0, 0, 0, 0, 0, 1, 1])  # the checks find nothing, the spread both
    rule, detail = D.choose(res, C)
    assert rule == "checks+spread>0.25" and detail["s"]["out_ratio"] == pytest.approx(30.0 / 11.25)


def test_a_near_tie_goes_to_the_rule_listed_first_and_the_in_aim_is_kept():
    ape = [5.0] * 6 + [30.0, 30.0]
    res = _results(ape, [False] * 6 + [True, True], [0, 0, 0, 0, 0, 0, 1, 1])  # both rules mark the same rows
    assert D.choose(res, C)[0] == "checks"
    bad = dict(C, in_aim=0.1)
    with pytest.raises(BenchError, match="no candidate rule"):
        D.choose(res, bad)


def test_a_test_folds_choice_never_sees_its_own_families():
    # the validation rows of fold 3 are fold 0's families: only there does the spread find the bad rows
    good = _fold(0, [5.0] * 6 + [30.0, 30.0], [False] * 8, [0, 0, 0, 0, 0, 0, 1, 1])
    other = lambda j: _fold(j, [5.0] * 6 + [30.0, 30.0], [False] * 6 + [True, True], [1, 1, 0, 0, 0, 0, 0, 0])
    res = {"s": {"card": "c", "folds": {"0": other(1), "1": other(2), "2": other(3), "3": good}}}
    assert D.choose(res, C, exclude=0)[0] == "checks"  # fold 0 is chosen for without fold 3's validation rows
    only_fold0 = {"s": {"card": "c", "folds": {"3": good}}}
    assert D.choose(only_fold0, C)[0] == "checks+spread>0.25"  # what fold 0's own families would have chosen
    ev = D.evaluate(res, C)
    assert ev["picks"][0] == "checks"
    assert set(ev["settings"]["s"]["rows"]) == {"shipped", "chosen"}
    assert len(ev["settings"]["s"]["rows"]["chosen"]["per_fold"]) == 4


def test_scores_split_the_rows_and_compare_with_the_pooled_error():
    ape = np.array([5.0, 5.0, 20.0, 30.0])
    s = D._score(ape, np.array([False, False, True, True]), K=15.0)
    assert (s["rows_in"], s["rows_out"], s["mape_in"], s["mape_out"]) == (2, 2, 5.0, 25.0)
    assert s["in_ratio"] == 5.0 / 15.0 and s["out_ratio"] == 25.0 / 15.0
    assert D._score(ape, np.zeros(4, bool), 15.0)["mape_out"] is None
