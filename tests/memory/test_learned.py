"""The learned memory fallback: cards load and predict finite values; a model the simulator cannot
run gets the learned estimate and the reason, never a traceback."""

import math

import numpy as np
import pytest
import torch

import perfseer
from perfseer.errors import MemoryConfigError, SimulationError, UnsupportedModelError
from perfseer.memory import learned
from perfseer.memory.learned import module_bytes, persistent_bytes


class ExportOnly(torch.nn.Module):
    """Scales by its count of positive activations (a data-dependent shape: ``nonzero``), except
    when exported, as models with an export-friendly branch do."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(16)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        if not (torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export()):
            y = y * torch.nonzero(y.flatten()).shape[0]
        return self.fc(y.mean((2, 3)))


@pytest.fixture(scope="module")
def skeleton():
    from perfseer.sources.load import load_skeleton

    return load_skeleton(ExportOnly(), input_shape=(3, 32, 32))


@pytest.fixture
def cached_extract(skeleton, monkeypatch):
    """The fallbacks' ONNX export, done once for the module (the export is what takes time)."""
    import perfseer.features.extract
    import perfseer.sources.load

    calls = []

    def load(model, **kw):
        calls.append(kw.get("input_shape"))
        return skeleton

    monkeypatch.setattr(perfseer.features.extract, "load_skeleton", load)
    monkeypatch.setattr(perfseer.sources.load, "load_skeleton", load)
    return calls


def test_persistent_bytes_exact():
    m = ExportOnly()
    b = module_bytes(m)
    n = sum(p.numel() for p in m.parameters())
    assert b["param_bytes"] == b["trainable_param_bytes"] == 4 * n
    assert b["buffer_bytes"] == 4 * (16 + 16) + 8  # running mean, var and the int64 batch counter
    w = b["param_bytes"] + b["buffer_bytes"]
    assert persistent_bytes("infer", None, b["param_bytes"], b["trainable_param_bytes"], b["buffer_bytes"]) == w
    for opt, k in (("sgd", 1), ("sgd-momentum", 2), ("adam", 3), ("adamw", 3)):
        assert persistent_bytes("train", opt, b["param_bytes"], b["trainable_param_bytes"], b["buffer_bytes"]) \
            == w + k * b["param_bytes"]


@pytest.mark.parametrize("phase", ["infer", "train"])
def test_cards_load_and_predict_finite(phase):
    from perfseer.data.dataset import load_dataset

    card = learned.load_card(phase)
    assert card.name == learned.CARDS[phase]
    metrics = [t.metric for t in card.targets]
    for opt in ((None,) if phase == "infer" else ("sgd", "adamw")):
        assert set(learned.columns(phase, opt)) <= set(metrics)
    ds = load_dataset("datasets/memory_sim")
    idx = ds.labels.loc[ds.labels.phase == phase, "graph"].to_numpy()[:3]
    values = card.predict_graphs([ds.graphs[int(i)] for i in idx])
    assert values.shape == (len(idx), len(metrics)) and np.isfinite(values).all() and (values > 0).all()
    assert card.card.get("intervals") and card.card.get("domain")


def test_model_the_simulator_cannot_run_gets_the_learned_estimate(cached_extract):
    phase = "train"
    m = ExportOnly()
    est = perfseer.memory(m, batch=8, phase=phase, optimizer="sgd-momentum", input_shape=(3, 32, 32),
                          device="a100-40gb", mig=True)
    assert est.method == "learned" and est.basis.startswith(f"learned (card memory-sim.{phase}")
    assert "the simulator could not run" in est.notes[0] and "nonzero" in est.notes[0]
    w = module_bytes(m)
    fixed = persistent_bytes(phase, "sgd-momentum" if phase == "train" else None, w["param_bytes"],
                             w["trainable_param_bytes"], w["buffer_bytes"])
    assert math.isfinite(est.total) and est.total > fixed + est.context
    assert sum(est.breakdown.values()) == est.total
    assert est.interval is None or est.interval[0] <= est.total <= est.interval[1]
    assert est.fits is True and est.mig[0]["smallest"]
    assert len(cached_extract) == 1  # one extraction, re-bound to the batch


def test_inference_the_simulator_cannot_run_gets_onnx_liveness(cached_extract):
    est = perfseer.memory(ExportOnly(), batch=8, phase="infer", input_shape=(3, 32, 32))
    assert est.method == "onnx-liveness" and est.basis == "ONNX liveness"
    assert "the simulator could not run" in est.notes[0] and "nonzero" in est.notes[0]
    assert math.isfinite(est.total) and est.breakdown["weights"] > 0


def test_cli_report_states_the_basis(cached_extract):
    from perfseer.cli.memory import format_report, memory_report

    rep = memory_report(ExportOnly(), [4], phase="train", optimizer="adamw", input_shape=(3, 32, 32),
                        device="a100-40gb", max_batch=True)
    e = rep["estimates"][0]
    assert rep["max_batch"]["batch"] > 4 and rep["max_batch"]["basis"].startswith("learned (card memory-sim.train")
    assert e["method"] == "learned" and e["basis"].startswith("learned (card memory-sim.train")
    text = format_report(rep)
    assert "[learned (card memory-sim.train" in text and "note: the simulator could not run" in text
    assert "largest batch on a100-40gb:" in text


@pytest.mark.parametrize("phase", ["train", "infer"])
def test_simulation_and_export_both_failing_is_a_clear_error(phase, monkeypatch):
    import perfseer.features.extract
    import perfseer.sources.load

    def load(model, **kw):
        raise UnsupportedModelError("the output shape of NonZero depends on its input", "export with a static size")

    monkeypatch.setattr(perfseer.features.extract, "load_skeleton", load)
    monkeypatch.setattr(perfseer.sources.load, "load_skeleton", load)  # inference: the liveness estimate reads it here
    with pytest.raises(SimulationError, match="could not run .*nonzero.*could not be extracted either"):
        perfseer.memory(ExportOnly(), batch=2, phase=phase, input_shape=(3, 32, 32))


def test_learned_fallback_is_fp32_only():
    with pytest.raises(MemoryConfigError, match="fp32 only"):
        perfseer.memory(ExportOnly(), batch=2, phase="train", precision="amp-bf16", input_shape=(3, 32, 32))


def test_a_simulation_past_its_time_limit_falls_back(cached_extract, monkeypatch):
    import time

    import perfseer.memory.api as memory_api
    from perfseer.memory.api import SIM_TIMEOUT_ENV

    def slow_step(*a, **k):  # a simulation that takes long in Python (ExportOnly's own fails in ms,
        end = time.monotonic() + 30  # on its nonzero, which could beat the limit)
        while time.monotonic() < end:
            pass
        raise AssertionError("the time limit did not stop the simulation")

    monkeypatch.setattr(memory_api, "trace_step", slow_step)
    monkeypatch.setenv(SIM_TIMEOUT_ENV, "0.05")
    est = perfseer.memory(ExportOnly(), batch=2, phase="train", input_shape=(3, 32, 32))
    assert est.method == "learned" and f"ran past 0.05 s ({SIM_TIMEOUT_ENV})" in est.notes[0]


def test_a_learned_value_above_the_cards_ceiling_is_no_estimate(cached_extract, monkeypatch):
    """The card refuses a value above its sanity ceiling; the estimate built on it is refused with the reason."""
    from perfseer.errors import AbsurdAnswerError

    card = learned.load_card("train")
    real = card.predict_with_embeddings

    def huge(graphs):
        values, emb = real(graphs)
        return np.full_like(np.asarray(values, dtype=float), 1e15), emb

    monkeypatch.setattr(card, "predict_with_embeddings", huge)
    with pytest.raises(AbsurdAnswerError, match="gave no answer .*above the sanity ceiling"):
        perfseer.memory(ExportOnly(), batch=8, phase="train", optimizer="adamw", input_shape=(3, 32, 32))


def test_a_learned_largest_batch_refuses_a_non_finite_value(cached_extract, monkeypatch):
    from perfseer.errors import AbsurdAnswerError
    from perfseer.memory.api import max_batch_for

    card = learned.load_card("train")
    monkeypatch.setattr(card, "predict_graphs", lambda graphs: np.full((len(graphs), len(card.targets)), np.nan))
    with pytest.raises(AbsurdAnswerError, match="returned nan"):
        max_batch_for(ExportOnly(), device="a100-40gb", phase="train", input_shape=(3, 32, 32))
