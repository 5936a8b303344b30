"""A prediction and its domain embedding from one pass through the network, equal to the two
passes they took before; a loaded predictor is not switched between train and eval mode per call."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helpers import nb201_arch
from perfseer.api import extract
from perfseer.runtime.predictor import Predictor, load_predictor
from perfseer.fit.intervals import embeddings

# bundled predictors the serve tests use: SeerNet, SeerNet-Multi (one device), SeerNet-Multi (5 GPUs)
BUNDLED = ("rtx3090-amp-nchw-pt240.infer", "epyc-torch-t1.infer", "nb201-gpus.infer")


@pytest.fixture(scope="module")
def pg():
    return extract(nb201_arch(random.Random(5)))


@pytest.mark.parametrize("name", BUNDLED)
def test_one_pass_gives_the_predictions_and_embeddings_of_two(name, pg):
    p = load_predictor(name)
    graphs = [pg.with_batch(b).to_pyg() for b in (1, 3, 64)] * 30  # 90 graphs: two chunks of the network's 64
    values, emb = p.predict_with_embeddings(graphs)
    np.testing.assert_allclose(values, p.predict_graphs(graphs), rtol=1e-6)
    np.testing.assert_allclose(emb, embeddings(p.net, graphs), rtol=1e-6, atol=1e-9)
    assert emb.shape == (90, p.domain_embeddings.shape[1])


@pytest.mark.parametrize("name", BUNDLED)
def test_predict_rows_equal_those_of_two_passes(name, pg, monkeypatch):
    p = load_predictor(name)
    rows = p.predict(pg, batch=[1, 8, 128])
    # the two passes of before: the predictions alone, then assess computes the embeddings itself
    monkeypatch.setattr(Predictor, "predict_with_embeddings", lambda self, graphs: (self.predict_graphs(graphs), None))
    before = p.predict(pg, batch=[1, 8, 128])
    assert len(rows) == len(before)
    for a, b in zip(rows, before):
        assert a.keys() == b.keys()
        np.testing.assert_allclose(a["value"], b["value"], rtol=1e-6)
        np.testing.assert_allclose(a["interval"], b["interval"], rtol=1e-6)
        assert {k: v for k, v in a.items() if k not in ("value", "interval")} == \
            {k: v for k, v in b.items() if k not in ("value", "interval")}


def test_a_predictor_without_an_embedding_check_runs_no_embedding(pg):
    p = load_predictor(BUNDLED[0])
    p.domain_embeddings = None  # as a card from before the embedding check
    values, emb = p.predict_with_embeddings([pg.to_pyg()])
    assert emb is None and values.shape == (1, len(p.targets))


def test_loaded_predictors_stay_in_eval_mode_and_training_mode_is_restored(pg, monkeypatch):
    p = load_predictor(BUNDLED[1])
    model = p.net.model
    switches = []
    monkeypatch.setattr(type(model), "train", lambda self, mode=True: switches.append(mode) or self)
    graphs = [pg.to_pyg()]
    p.predict_graphs(graphs)
    p.predict_with_embeddings(graphs)
    embeddings(p.net, graphs)
    assert switches == [] and not model.training  # no walk over the modules per call
    monkeypatch.undo()
    model.train()  # predictions during training: eval mode for the pass, training mode after
    seen = []
    handle = model.trunk.register_forward_pre_hook(lambda m, args: seen.append((m.training, torch.is_grad_enabled())))
    out = p.predict_graphs(graphs)
    embeddings(p.net, graphs)
    handle.remove()
    assert seen == [(False, False)] * 2 and model.training and all(m.training for m in model.modules())
    model.eval()
    np.testing.assert_allclose(out, p.predict_graphs(graphs), rtol=1e-6)
