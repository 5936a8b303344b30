"""Graph auto-encoder pre-training (perfseer.models.gae, perfseer.fit.pretrain)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch

from perfseer.errors import PerfseerError
from perfseer.models.gae import GraphAutoEncoder
from perfseer.models.registry import build_model
from perfseer.models.seernet import SeerNetConfig
from perfseer.fit.pretrain import PretrainConfig, init_from_pretrained, pretrain, save_pretrained
from perfseer.runtime.net import _model_input
from train_helpers import chain_graph


def test_losses_are_finite_and_fall():
    rng = np.random.default_rng(0)
    graphs = [chain_graph(rng) for _ in range(24)]
    gae, fs, hist = pretrain(graphs, {"hidden_dim": 16, "head_hidden_dim": 16}, PretrainConfig(epochs=15, batch_size=8))
    first, last = hist[0], hist[-1]
    assert all(np.isfinite([h[k] for h in hist for k in ("edge", "node", "global")]))
    assert last["node"] + last["edge"] < first["node"] + first["edge"]
    x, u = gae(Batch.from_data_list([_model_input(fs.transform(g)) for g in graphs[:3]]))
    assert x.shape == (sum(g.num_nodes for g in graphs[:3]), 16) and u.shape == (3, 16)


def test_card_round_trip_and_shape_mismatch(tmp_path):
    rng = np.random.default_rng(1)
    graphs = [chain_graph(rng) for _ in range(6)]
    gae, fs, hist = pretrain(graphs, {"hidden_dim": 8}, PretrainConfig(epochs=1))
    path = save_pretrained(tmp_path, "g", gae, fs, {"graphs": 6}, hist)
    assert json.loads(path.read_text())["format"] == "perfseer.pretrained-encoder"
    model = build_model("seernet", num_targets=1, hidden_dim=8, head_hidden_dim=4)
    init_from_pretrained(model, path)
    for a, b in zip(model.trunk.state_dict().values(), gae.trunk.state_dict().values()):
        assert torch.equal(a, b)
    with pytest.raises(PerfseerError, match="does not fit"):
        init_from_pretrained(build_model("seernet", num_targets=1, hidden_dim=16), path)
    with pytest.raises(PerfseerError, match="not a pre-trained"):
        (tmp_path / "x.json").write_text("{}")
        init_from_pretrained(model, tmp_path / "x.json")


def test_negative_edges_stay_in_their_graph():
    g = GraphAutoEncoder(SeerNetConfig(hidden_dim=4))
    rng = np.random.default_rng(2)
    b = Batch.from_data_list([_model_input(chain_graph(rng)) for _ in range(3)])
    assert set(g.losses(b, torch.Generator().manual_seed(0))) == {"edge", "node", "global"}


def test_train_method_starts_from_the_pretrained_trunk(tmp_path):
    from perfseer.fit.methods import train_method
    from perfseer.fit.trainer import TrainConfig
    from train_helpers import flops_dataset

    rng = np.random.default_rng(3)
    gae, fs, hist = pretrain([chain_graph(rng) for _ in range(8)], {"hidden_dim": 8}, PretrainConfig(epochs=1))
    path = save_pretrained(tmp_path, "g", gae, fs, {}, hist)
    data = flops_dataset(12)
    fitted = train_method("seernet", data[:8], data[8:], {"head_hidden_dim": 8}, pretrained=str(path),
                          train_config=TrainConfig(max_epochs=1, progress=False))
    assert fitted.config["hidden_dim"] == 8  # from the card
    assert fitted.estimator.feature_scaler.to_dict() == fs.to_dict()
    with pytest.raises(PerfseerError, match="needs seernet"):
        train_method("gcn", data[:8], data[8:], pretrained=str(path))
