"""The calibrated domain verdict on the shipped cards: the training zoo's common models are in
domain at batch 1-256; a small step is said once, as a widened interval; one footnote per kind."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from helpers import run_cli
from perfseer import load_predictor
from perfseer.cli.footnotes import footnotes

CARD = "rtx3090-amp-nchw-pt240.infer"


@pytest.fixture(scope="module")
def card():
    return load_predictor(CARD)


@pytest.fixture(scope="module")
def resnet50(card):
    return card.predict("example:resnet50", batch=[1, 256])


def test_resnet50_at_batch_1_and_256_is_in_domain_on_the_rtx3090_card(card, resnet50):
    one, big = resnet50
    assert one["in_domain"] and big["in_domain"] and one["domain_reasons"] == big["domain_reasons"] == []
    q = card.card["intervals"]["targets"][f"latency_ms@{one['device']}:infer"]["q"]
    factor = card.card["intervals"]["ood_factor"]
    # batch 1 is a step shorter than any training step (timm measured at the largest batch that fit):
    # said in a flag, the interval widened by the card's out-of-domain factor
    assert len(one["flags"]) == 1 and one["flags"][0].startswith("step smaller than the training steps at batch 1; ")
    assert np.log(one["interval"][1] / one["value"]) == pytest.approx(q * factor, rel=1e-6)
    assert big["flags"] == [] and np.log(big["interval"][1] / big["value"]) == pytest.approx(q, rel=1e-6)


def test_the_bundled_zoo_models_are_in_domain_at_batch_1_to_256(card):
    for model in ("example:resnet18", "example:vit_b_16", "example:mobilenet_v3_small"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rows = card.predict(model, batch=[1, 8, 64, 256])
        assert all(r["in_domain"] and r["domain_reasons"] == [] for r in rows), (model, rows)


def test_the_training_card_too():
    rows = load_predictor("rtx3090-amp-nchw-pt112.train").predict("example:resnet50", batch=[1, 256])
    assert all(r["in_domain"] for r in rows)
    assert any(f.startswith("step smaller than the training steps at batch 1") for f in rows[0]["flags"])


def test_an_unseen_operator_type_or_input_is_still_out(card):
    from perfseer.features.extract import extract
    from perfseer.trust import domain as dom

    pg = extract("example:resnet50", batch=1)
    g, ops, d = pg.to_pyg(), sorted(set(pg.op_types)), card.card["domain"]
    assert dom.verdicts(d, [g], [ops], ["3x224x224"]) == [(True, [])]
    (ok, reasons), = dom.verdicts(d, [g], [ops + ["NonMaxSuppression"]], ["1x64x64"])
    assert not ok and reasons == ["operator types never seen in training: NonMaxSuppression",
                                  "1 input channels; training inputs had 3",
                                  ("input of 4,096 values per sample outside the training range "
                                   "76,800-3.15e+06")]


def test_one_footnote_per_kind_of_flag():
    rows = [[(f"step smaller than the training steps at batch {b}; interval widened x2.41 (predicted {b * 1.4:.3g} "
              f"ms < 12.4 ms, the smallest training value: small steps were not measured)"),
             ("model family 'xcit' never seen in training; interval widened x2.41 (held-out families err more than "
              "the card's k-fold score)")] for b in (1, 2, 4, 8)] + [[]]
    marks, notes = footnotes(rows)
    assert marks == [[1, 2]] * 4 + [[]]
    assert notes == ["step smaller than the training steps (batch 1-8): extrapolated, interval widened",
                     "model family unseen in training (interval widened): xcit"]


def test_predict_table_shows_in_and_one_short_note(capsys):
    code, out, _ = run_cli(capsys, "predict", "example:resnet50", "--predictor", CARD, "--batch", "1,8,256")
    assert code == 0 and "OUT" not in out
    notes = [line.strip() for line in out.splitlines() if line.strip().startswith("[")]
    assert notes == ["[1] step smaller than the training steps (batch 1-8): extrapolated, interval widened"]
    code, out, _ = run_cli(capsys, "predict", "example:resnet50", "--predictor", CARD, "--batch", "1,8,256",
                           "--explain")
    assert code == 0 and "predicted 1.4 ms < 12.4 ms, the smallest training value" in out


def test_the_spec_transfer_carries_its_sources_step_flag():
    from perfseer.runtime.route import predict_on_device

    one, big = predict_on_device("example:resnet50", "l40s", batch=[1, 256], prefer="transfer")
    assert one["in_domain"] and big["in_domain"] and big["flags"] == []
    assert len(one["flags"]) == 1 and "step smaller than the training steps at batch 1" in one["flags"][0]
    assert one["interval"][1] / one["interval"][0] > big["interval"][1] / big["interval"][0]
