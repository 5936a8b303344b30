"""The step domain of a measured training card (perfseer.trust.step) and the routing outside it
(perfseer.runtime.anchor): the RTX 3090 training card measured each model at one batch, the largest
that fit (up to 512), so ResNet-50 at batch 16 is passed over for the next basis, anchored on the card."""

import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import perfseer
from perfseer.features import schema
from perfseer.runtime import anchor, monotone
from perfseer.runtime.predictor import cached_predictor
from perfseer.trust import step as st

CARD = "rtx3090-amp-nchw-pt112.train"
N = list(schema.GLOBAL_FEATURES)


def _graph(batch: float, params: float, act_per_sample: float):
    u = np.zeros(len(N))
    u[N.index("batch_size")], u[N.index("params")] = batch, params
    u[N.index("num_edges")], u[N.index("edge_bytes_mean")] = 100, act_per_sample * batch / 100
    return SimpleNamespace(u=u)


MEM = {"fixed": 1e9, "per_param": 16.0, "per_act": 0.5, "capacity": 24 * 2**30}


def test_the_largest_batch_that_fits_and_the_ratio_by_hand():
    g = _graph(64, 25e6, 200e6)  # 1 GB + 0.4 GB fixed; 100 MB a sample
    assert st.largest_batch(g, MEM) == pytest.approx((24 * 2**30 - 1e9 - 4e8) / 1e8)
    step = {"top": 512, "memory": MEM, "range": [-1.0, 0.5]}
    assert st.ratio(g, step) == pytest.approx(64 / st.largest_batch(g, MEM))
    small = _graph(64, 25e6, 2e6)  # fits far beyond 512: the benchmark's first batch, 512, is the reference
    assert st.ratio(small, step) == pytest.approx(64 / 512)
    assert st.step_reasons(step, [small])[0] and not st.step_reasons(step, [_graph(512, 25e6, 2e6)])[0]
    assert st.step_reasons(None, [small]) == [[]]
    assert anchor.anchor_batch(small, step) == 512  # the batch the measurements would have taken
    assert anchor.anchor_batch(_graph(512, 25e6, 2e6), step) == 512
    assert anchor.anchor_batch(_graph(16, 25e6, 200e6), step) == 192  # the ladder at or below 244, the largest that fits
    assert [anchor.rung(x) for x in (1, 1.9, 3, 5.9, 6, 7, 12.5, 200, 384, 511, 600)] == [1, 1, 2, 4, 6, 6, 12, 192, 384,
                                                                                        384, 512]


def test_the_shipped_card_knows_its_own_rows_and_not_small_steps():
    card = cached_predictor(CARD).card
    step = card["domain"]["step"]
    assert step["rows"] == 652 and step["inside"] >= 0.98  # its fitted and validation rows
    assert step["memory"]["fit"]["models"] >= 20  # fitted to the simulator, not written by hand
    pg = perfseer.extract("example:resnet50", batch=16)
    out = cached_predictor(CARD).predict_bound(pg, [16, 512])
    assert out[0]["outside_step"] and not out[1]["outside_step"]


def _predict(model, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return perfseer.predict(model, **kw)


def test_outside_the_step_domain_the_route_answers_anchored_on_the_card():
    rows = {r["batch_size"]: r for r in _predict("example:resnet50", device="rtx3090", phase="train",
                                                 batch=[16, 512])}
    assert "measured-device predictor " + CARD == rows[512]["basis"] and not rows[512].get("fallback_from")
    low = rows[16]
    assert low["fallback_from"]["basis"] == "measured-device predictor " + CARD
    assert "step domain" in low["fallback_from"]["reason"] and low["value"] > 0
    assert low["basis"].startswith("measured-device predictor " + CARD + " at batch") and "batch ratio" in low["basis"]
    assert low["value"] < rows[512]["value"] / 4  # 16 samples, not the 512-sample step of the card
    assert json.dumps(low)  # a JSON row: basis, fallback_from with its reason


def test_force_basis_measured_and_the_card_by_name_answer_with_the_card_flagged():
    for kw in ({"device": "rtx3090", "force": True}, {"device": "rtx3090", "basis": "measured"}, {"predictor": CARD}):
        (row,) = _predict("example:resnet50", phase="train", batch=16, **kw)
        assert row["basis"] == "measured-device predictor " + CARD and not row.get("fallback_from")
        assert any(f.startswith("outside the card's step domain") for f in row["flags"])


def test_the_cli_says_which_basis_answered_and_why_in_one_note(capsys):
    from perfseer.cli.main import main

    assert main(["predict", "example:resnet50", "--device", "rtx3090", "--phase", "train", "--batch",
                 "1,16,64"]) == 0
    out = capsys.readouterr().out
    assert out.count("outside its step domain") == 1


def test_across_bases_the_latency_never_falls():
    rows = [{"batch_size": b, "metric": "latency_ms", "value": v, "device": "d", "phase": "train", "precision": "p",
             "interval": None, "flags": []} for b, v in ((16, 30.0), (64, 20.0), (256, 90.0))]
    out = monotone.across(rows)
    assert [r["value"] for r in out] == [30.0, 30.0, 90.0] and "batch 16" in out[1]["flags"][-1]


def test_the_memory_estimate_is_fitted_to_simulated_models():
    """perfseer.fit.stepdomain: per_act from the simulator's bytes per sample, fixed and per_param
    from a line through its fixed bytes; the 2-fold check scores the largest batch on held-out models."""
    from perfseer.fit.stepdomain import fit_memory, holdout_error

    graphs, sims = {}, []
    for i in range(8):
        p, a = 1e7 * (i + 1), 5e7 * (8 - i)
        graphs[f"m{i}", "3x224x224"] = _graph(8, p, a)
        sims.append({"model": f"m{i}", "input_shape": "3x224x224", "per_sample": 0.3 * a, "fixed": 1.3e9 + 12.0 * p})
    mem = fit_memory(sims, graphs, 24 * 2**30)
    assert mem["per_act"] == pytest.approx(0.3) and mem["per_param"] == pytest.approx(12.0)
    assert mem["fixed"] == pytest.approx(1.3e9)
    assert holdout_error(sims, graphs, 24 * 2**30)["median_abs_log2"] == pytest.approx(0.0, abs=1e-9)
    step = st.build_step([_graph(b, 1e7, 5e7) for b in (128, 256, 512) * 10], mem, 512)
    assert step["inside"] == 1.0 and step["range"][0] < -0.9 and step["range"][1] > -0.1


def test_anchored_widening_is_read_from_the_step_anchor_output():
    """The anchored interval's widening is the step-anchor measurement, stored by
    ``python -m benchmarks.lib.step_anchor LOGO --write``, not a constant typed into the runtime."""
    import json

    from benchmarks.lib import step_anchor
    from perfseer.runtime import anchor

    stored = json.loads(anchor.RATIO_FILE.read_text())
    assert anchor.RATIO_Q90 == stored["ratio_q90"] and 0.0 < anchor.RATIO_Q90 < 2.0
    assert stored["command"].startswith("python -m benchmarks.lib.step_anchor") and stored["pairs"] > 0
    summary = {"groups": {"train": {"pairs": 8, "gpus": ["mi100"], "anygpu": {"ratio_q90": 0.41234},
                                    "spec": {"ratio_q90": 0.9}},
                          "all": {"anygpu": {"ratio_q90": 0.7}}}}
    w = step_anchor.widening(summary, ".bench-work/any-gpu/logo.json")
    assert w["ratio_q90"] == 0.4123 and w["pairs"] == 8 and w["command"].endswith("logo.json --write")
