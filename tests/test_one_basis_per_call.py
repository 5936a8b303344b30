"""A basis whose value hits a sanity bound at one batch size of a call is passed over at all of
them when another basis follows, so that one basis answers a device along the batch axis and the
latency a user reads does not fall as the batch grows (the batch sweep found AlexNet at 2.15 ms at
batch 1 from the spec model, 0.88 ms at batch 2 from the transfer, on an RTX 4060)."""

import warnings

import pytest

import perfseer
from perfseer.runtime import route
from perfseer.runtime.predictor import Predictor

NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


class _LowAtOne(Predictor):
    """A measured card whose value at batch 1 is below a physical floor; sane elsewhere, and far
    below what the spec model says (so mixing the two would make latency fall with the batch)."""

    weight_work = False

    def __init__(self):
        self.name = "low"

    def answer(self, pg, batches, options, graphs=None, family=None):
        return [{"model": "m", "batch_size": b, "metric": "latency_ms", "unit": "ms", "device": options.device,
                 "phase": "infer", "precision": "fp32", "value": 1e-6 * b, "interval": None, "in_domain": True,
                 "domain_reasons": [], "outside_space": [], "basis": "measured-device predictor low",
                 "flags": ["predicted 1e-06 ms is below the physical floor 0.01 ms (memory floor of a100-40gb); "
                           "raised to it"] if b == 1 else []}
                for b in batches]


@pytest.fixture
def low_card_covers_a100(monkeypatch):
    monkeypatch.setattr(route, "measured_predictors",
                        lambda device, phase="infer", precision=None, cards=None: [("low", "a100/fp32")])


def _answer(batches):
    cell = perfseer.extract(NB201, batch=1)
    unit = route.Unit("device", "a100-40gb", "a100-40gb", "infer", "fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = route.answer_units(cell, [(b, unit) for b in batches], load=lambda name: _LowAtOne())
    return [row for b in batches for row in got[b, unit][0]]


def test_a_sanity_hit_at_one_batch_size_passes_the_basis_over_at_all(low_card_covers_a100):
    rows = _answer([1, 2, 4, 8])
    valued = [r for r in rows if r["value"] is not None]
    assert [r["batch_size"] for r in valued] == [1, 2, 4, 8]
    assert len({r["basis"] for r in valued}) == 1 and "low" not in valued[0]["basis"]  # the next basis, at all
    assert all(r["fallback_from"]["basis"] == "measured-device predictor low" for r in valued)
    assert "sanity bound at batch 1" in valued[1]["fallback_from"]["reason"]
    (refused,) = [r for r in rows if r["value"] is None]  # the hit itself is shown refused, with its reason
    assert refused["batch_size"] == 1 and "physical floor" in refused["reason"]
    lat = [r["value"] for r in valued]
    assert lat == sorted(lat)


def test_a_basis_without_a_hit_still_answers_every_batch_size(low_card_covers_a100):
    rows = _answer([2, 4])  # batch 1 not asked: no hit, the card answers
    assert [r["value"] for r in rows] == [2e-6, 4e-6] and all("low" in r["basis"] for r in rows)
