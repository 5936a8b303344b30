"""A step time never decreases with the batch (perfseer.runtime.monotone): the envelope's rule on
hand-made rows, and zoo models that broke it before the envelope (the batch sweep's violations:
torchvision ResNet-34 on the RTX 3090 training card, all-MiniLM-L6-v2 on a B200 through the spec
model) answered at batch 1-1024 as a user asks."""

import warnings

import pytest

from benchmarks.lib import batch_sweep
from perfseer.runtime import monotone


def _rows(values: dict[int, float | None], **extra) -> list[dict]:
    return [dict({"batch_size": b, "metric": "latency_ms", "value": v, "device": "d", "phase": "infer",
                  "precision": "fp32", "interval": None if v is None else [v * 0.9, v * 1.1], "flags": []}, **extra)
            for b, v in values.items()]


def test_the_ladder_is_the_powers_of_two_below_and_the_one_above():
    assert monotone.ladder([1]) == [1]
    assert monotone.ladder([8]) == [1, 2, 4, 8]
    assert monotone.ladder([96]) == [1, 2, 4, 8, 16, 32, 64, 96, 128]
    assert monotone.ladder([3, 1024]) == [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def test_a_fall_is_raised_to_the_largest_answer_below_and_a_rise_is_kept():
    rows = _rows({1: 5.0, 2: 7.0, 4: 6.0, 8: 6.5, 16: 9.0})
    out = {r["batch_size"]: r for r in monotone.envelope(rows, [1, 2, 4, 8, 16])}
    assert [out[b]["value"] for b in (1, 2, 4, 8, 16)] == [5.0, 7.0, 7.0, 7.0, 9.0]
    assert out[4]["interval"] == [pytest.approx(6.3), pytest.approx(7.7)]  # moved with the value
    assert "raised to the answer at batch 2" in out[4]["flags"][-1]
    assert out[16] is rows[4] and out[16]["flags"] == []  # an answer already monotone is the same row


def test_a_batch_between_powers_of_two_lies_between_their_answers():
    out = {r["batch_size"]: r["value"] for r in monotone.envelope(_rows({32: 4.0, 64: 5.0, 96: 9.0, 128: 8.0}),
                                                                 [64, 96, 128])}
    assert out == {64: 5.0, 96: 8.0, 128: 8.0}  # 96 lowered to the answer at 128
    out = {r["batch_size"]: r["value"] for r in monotone.envelope(_rows({64: 5.0, 96: 3.0, 128: 8.0}), [96])}
    assert out == {96: 5.0}  # raised to the answer at 64


def test_refused_rows_and_other_metrics_neither_raise_nor_are_changed():
    rows = _rows({1: 50.0, 2: 3.0, 4: None}) + [{"batch_size": 4, "metric": "energy_j", "value": 1.0, "device": "d",
                                                 "phase": "infer", "precision": "fp32"}]
    refused_at_1 = lambda r: r["batch_size"] != 1  # noqa: E731  (a value a route would not show)
    out = monotone.envelope(rows, [2, 4], usable=refused_at_1)
    assert [(r["batch_size"], r["metric"], r["value"]) for r in out] == [(2, "latency_ms", 3.0), (4, "latency_ms", None),
                                                                        (4, "energy_j", 1.0)]
    other = _rows({1: 5.0}) + [dict(r, device="e") for r in _rows({2: 1.0})]  # devices apart
    assert [r["value"] for r in monotone.envelope(other, [1, 2])] == [5.0, 1.0]


class _Falling:
    """A basis whose answers fall with the batch, keeping the batch sizes it is asked."""

    name = "falling"

    def __init__(self):
        self.asked = []

    def answer(self, pg, batches, options, graphs=None, family=None):
        self.asked.append(list(batches))
        return _rows({b: 10.0 / b for b in batches})


def test_answer_asks_the_ladder_and_returns_the_batches_asked():
    basis = _Falling()
    rows = monotone.answer(basis, None, [8], options=None)
    assert [(r["batch_size"], r["value"]) for r in rows] == [(8, 10.0)]
    rows = monotone.answer(basis, None, [16, 3], options=None)
    assert [(r["batch_size"], r["value"]) for r in rows] == [(3, 10.0), (16, 10.0)]
    assert basis.asked == [[1, 2, 4, 8], [1, 2, 3, 4, 8, 16]]


# (model, device, phase): each broke monotonicity in the sweep before the envelope
# (T5-small on an MI300X broke it the same way as all-MiniLM-L6-v2; its export takes 30 s here)
BROKE = [("torchvision:resnet34", "rtx3090", "train"),
         ("hf:sentence-transformers/all-MiniLM-L6-v2", "b200", "infer")]


@pytest.mark.parametrize("model, device, phase", BROKE)
def test_zoo_models_that_fell_with_the_batch_no_longer_do(model, device, phase):
    r = batch_sweep.sweep_model(model, [device], phases=(phase,))
    assert not r.get("extract_error") and r["answered"] == len(batch_sweep.BATCHES)
    assert r["violations"] == []


def test_the_rtx3090_training_card_is_the_envelope_of_its_own_answers():
    """The card's network still falls (it was measured at one batch size per model); what a user
    reads from the card (perfseer.predict with basis="measured", the card's predict) is, at each batch
    size, the largest of its answers at that batch size and below (asked for the device alone, the
    route passes the card over outside its step domain: tests/test_step_domain.py)."""
    import perfseer
    from perfseer.runtime.predictor import cached_predictor
    from perfseer.runtime.route import cached_extract

    pg = cached_extract("torchvision:resnet34", batch=1, weight_work=None)
    card = cached_predictor("rtx3090-amp-nchw-pt112.train")
    raw = {r["batch_size"]: r["value"] for r in card.predict_bound(pg, batch_sweep.BATCHES)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = perfseer.predict(pg, device="rtx3090", batch=batch_sweep.BATCHES, phase="train", basis="measured")
    shown = {r["batch_size"]: r["value"] for r in rows}
    assert any(raw[b] < raw[a] for a, b in zip(batch_sweep.BATCHES, batch_sweep.BATCHES[1:]))  # the cause
    for b in batch_sweep.BATCHES:
        assert shown[b] == pytest.approx(max(raw[a] for a in batch_sweep.BATCHES if a <= b))
    own = card.predict(pg, batch=[256, 1, 128])  # the card's own predict: the same, in the order asked
    assert [(r["batch_size"], r["value"]) for r in own] == [(b, pytest.approx(shown[b])) for b in (256, 1, 128)]


def test_the_service_answers_what_perfseer_predict_does_between_powers_of_two(tmp_path):
    """The service re-binds the graph in its sandbox: the powers of two the envelope reads too."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import perfseer
    from perfseer.serve.app import ServeConfig, create_app

    card = "rtx3090-amp-nchw-pt112.train"
    app = create_app(ServeConfig(jobs=1, job_time_s=300, cache_size=4, models_dir=str(tmp_path),
                                 upload_dir=str(tmp_path / "uploads")))
    with TestClient(app) as c:
        r = c.post("/v1/predict", json={"model": "example:resnet18", "batch": [96], "predictors": [card]})
    assert r.status_code == 200, r.text
    served = [x["value"] for x in r.json()["predictions"] if x["metric"] == "latency_ms"]
    mine = [x["value"] for x in perfseer.predict("example:resnet18", predictor=card, batch=96)]
    assert served == pytest.approx(mine) and len(mine) == 1
