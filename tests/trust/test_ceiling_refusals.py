"""A value above the sanity ceiling is refused where it is made, not only by the router: a measured
card's rows, the spec transfer's (and its rows when a source refused), the spec model's, the
service's rows and the learned memory estimate all carry ``value: None`` and a ``reason``, the
flag kept; no number above the ceiling reaches a user."""

import numpy as np
import pytest

import perfseer
from perfseer.runtime.predictor import Predictor, load_predictor
from perfseer.trust import bounds as bnd

CARD = "rtx3090-amp-nchw-pt240.infer"
HUGE = 1e12  # ms: far above any ceiling (1,000 x the roofline + 10 ms per operator)


@pytest.fixture(scope="module")
def graph():
    return perfseer.extract("example:resnet18", batch=1)


@pytest.fixture
def wild(monkeypatch):
    """Every measured card's network answers HUGE (embeddings as it would compute them)."""
    real = Predictor.predict_with_embeddings

    def huge(self, graphs):
        values, emb = real(self, graphs)
        return np.full_like(np.asarray(values, dtype=float), HUGE), emb

    monkeypatch.setattr(Predictor, "predict_with_embeddings", huge)


def _refused(row):
    return row["value"] is None and row["interval"] is None and "above the sanity ceiling" in row["reason"]


def test_refuse_above_ceiling_keeps_other_rows():
    over = {"value": 99.0, "interval": [1.0, 99.0], "throughput_per_s": 3.0,
            "flags": ["predicted 1e+12 ms is above the sanity ceiling 99 ms (x spec); no answer"]}
    assert _refused(bnd.refuse_above_ceiling(over)) and "throughput_per_s" not in over
    assert over["flags"]  # the flag stays: the router reads it
    floor = {"value": 1.0, "interval": [1.0, 2.0], "flags": ["predicted 0.1 ms is below the physical floor 1 ms"]}
    plain = {"value": 5.0, "interval": [4.0, 6.0], "flags": []}
    assert bnd.refuse_above_ceiling(dict(floor)) == floor and bnd.refuse_above_ceiling(dict(plain)) == plain
    v, _, _, flags = bnd.check(1e304, 1.0, 2.0, 1.0, 100.0, "ms", "spec")
    assert v == 100.0 and "no answer" in flags[0] and "lowered" not in flags[0]


def test_a_measured_card_refuses_its_own_value_above_the_ceiling(graph, wild):
    rows = load_predictor(CARD).predict(graph, batch=[1, 4])
    assert rows and all(_refused(r) for r in rows if r["metric"] == "latency_ms")


def test_the_spec_model_refuses_its_own_value_above_the_ceiling(graph, monkeypatch):
    from perfseer.runtime.spec import SpecModel, load_spec_model

    real = SpecModel.graph_latency

    def huge(self, *args, **kwargs):
        return {**real(self, *args, **kwargs), "latency_ms": HUGE}

    monkeypatch.setattr(SpecModel, "graph_latency", huge)
    # the kernel networks' own answer (the route sends a CNN's fp32 inference to the any-GPU model: below)
    rows = load_spec_model().predict(graph, batch=[1, 2], device="a100-40gb", use_route=False)
    assert len(rows) == 2 and all(_refused(r) for r in rows)


def test_the_routed_spec_answer_refuses_a_value_above_the_ceiling(graph, monkeypatch):
    from perfseer.runtime.spec import load_spec_model
    from perfseer.specmodel.anygpu import AnyGpuModel

    real = AnyGpuModel.step_ms

    def huge(self, *args, **kwargs):
        return {**real(self, *args, **kwargs), "latency_ms": HUGE}

    monkeypatch.setattr(AnyGpuModel, "step_ms", huge)
    rows = load_spec_model().predict(graph, batch=[1, 2], device="a100-40gb")  # cnn/infer/fp32: any-GPU model
    assert len(rows) == 2 and all("any-GPU operator model" in r["basis"] for r in rows)
    assert all(_refused(r) for r in rows)


def test_the_transfer_refuses_a_batch_whose_source_refused(graph, wild):
    from perfseer.runtime.transfer import load_transfer

    rows = load_transfer().predict(graph, batch=[1, 8], device="l40s")
    assert len(rows) == 2
    for r in rows:
        assert r["value"] is None and r["interval"] is None and "source" in r["reason"]
        assert any("above the sanity ceiling" in f for f in r["flags"])


def test_no_value_above_the_ceiling_reaches_perfseer_predict(graph, wild):
    rows = perfseer.predict(graph, predictor=CARD, batch=[1, 4])
    assert rows and all(r["value"] is None and r["reason"] for r in rows)
    rows = perfseer.predict(graph, device="rtx3090", batch=[1, 4])  # the card refused, the spec basis answers
    assert {r["batch_size"] for r in rows if r["value"] is not None} == {1, 4}
    for r in rows:
        assert (r["value"] is None and r["reason"]) or not bnd.above_ceiling(r)


def test_no_value_above_the_ceiling_reaches_the_service(wild, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from perfseer.serve.app import ServeConfig, create_app

    app = create_app(ServeConfig(jobs=1, upload_dir=str(tmp_path / "up")))
    with TestClient(app) as client:
        r = client.post("/v1/predict", json={"model": "example:resnet18", "batch": [1, 2], "predictors": [CARD]})
        assert r.status_code == 200, r.text
        rows = r.json()["predictions"]
        assert rows and all(x["value"] is None and "above the sanity ceiling" in x["reason"] for x in rows)


def test_a_refused_memory_estimate_beside_predict_is_a_refused_row(monkeypatch):
    from perfseer.errors import AbsurdAnswerError
    from perfseer.memory import api

    def absurd(*args, **kwargs):
        raise AbsurdAnswerError("m: the memory estimate 5.5e+19 bytes is over the sanity ceiling", "check the shapes")

    monkeypatch.setattr(api, "memory", absurd)
    rows, notes = api.memory_rows("example:resnet18", [{"batch_size": 2, "device": "a100-40gb", "phase": "infer"}])
    assert notes == [] and len(rows) == 1
    assert rows[0]["value"] is None and rows[0]["metric"] == "memory_sim" and "sanity ceiling" in rows[0]["reason"]
