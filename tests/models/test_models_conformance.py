"""One conformance test over every registered neural model: shapes, gradients, configs, invariance."""

import json

import pytest
import torch
from torch_geometric.data import Batch, Data

from perfseer.errors import PerfseerError
from perfseer.features.pyg import OP_VOCAB
from perfseer.models import MODELS, build_from_dict, build_model, is_neural, neural_models

# Small sizes keep the suite fast; the default sizes are checked in test_seernet.py.
SMALL = {
    "seernet": dict(hidden_dim=32, head_hidden_dim=32, num_blocks=2),
    "seernet-multi": dict(hidden_dim=32, head_hidden_dim=32),
    "mlp-node": dict(max_nodes=4, hidden_dim=32),  # 4 < 5 nodes: truncation is exercised
    "pmgns": dict(hidden_dim=32, head_hidden_dim=32),
    "gcn": dict(hidden_dim=32, head_hidden_dim=32),
    "gat": dict(hidden_dim=32, head_hidden_dim=32, use_edge_features=True),
    "gin": dict(hidden_dim=32, head_hidden_dim=32),
    "blend": dict(hidden_dim=32, head_hidden_dim=32, members="seernet[readout=sum;num_blocks=2]+pmgns"),
}
# config variants that change the architecture, run through the same tests as the models
VARIANTS = {
    "seernet[readout=sum]": ("seernet", dict(hidden_dim=32, head_hidden_dim=32, num_blocks=2, readout="sum")),
    "seernet[readout=sum;head_globals=true]": ("seernet", dict(hidden_dim=32, head_hidden_dim=32, readout="sum",
                                                                head_globals=True)),
}
CASES = sorted(SMALL) + sorted(VARIANTS)
T = 3


def graph(n, edges, seed):
    g = torch.Generator().manual_seed(seed)
    ei = torch.tensor(edges, dtype=torch.long).t().reshape(2, -1)
    return Data(x=torch.randn(n, 31, generator=g), edge_index=ei, edge_attr=torch.randn(ei.shape[1], 8, generator=g),
                u=torch.randn(1, 20, generator=g), op_type=torch.randint(0, len(OP_VOCAB), (n,), generator=g),
                num_nodes=n)


def graphs():
    # a diamond with a skip edge, a lone node without edges, a chain
    return [graph(5, [(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (0, 4)], 0), graph(1, [], 1),
            graph(3, [(0, 1), (1, 2)], 2)]


def permuted(d, perm):
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm))
    eperm = torch.randperm(d.edge_index.shape[1], generator=torch.Generator().manual_seed(3))
    return Data(x=d.x[perm], op_type=d.op_type[perm], edge_index=inv[d.edge_index][:, eperm],
                edge_attr=d.edge_attr[eperm], u=d.u, num_nodes=d.num_nodes)


def make(case, **kw):
    torch.manual_seed(0)
    name, small = VARIANTS.get(case, (case, SMALL.get(case)))
    return build_model(name, num_targets=T, **small, **kw)


def base_name(case):
    return VARIANTS.get(case, (case,))[0]


def test_every_neural_model_is_covered():
    assert set(neural_models()) == set(SMALL)
    assert set(SMALL) <= set(MODELS)


@pytest.mark.parametrize("name", CASES)
def test_forward_shapes_and_gradients(name):
    model = make(name)
    out = model(Batch.from_data_list(graphs()))
    assert out.shape == (3, T) and torch.isfinite(out).all()
    out.square().mean().backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None, f"{name}: no gradient reaches {pname}"
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, f"{name}: zero gradient at {pname}"
    # one graph of one node and no edges, in training mode (no batch statistics to fail on)
    single = model(Batch.from_data_list([graphs()[1]]))
    assert single.shape == (1, T) and torch.isfinite(single).all()


@pytest.mark.parametrize("name", CASES)
def test_config_round_trip_gives_identical_output(name):
    model = make(name).eval()
    card = json.loads(json.dumps(model.config.to_dict()))
    twin = build_from_dict(base_name(name), card)
    assert twin.config == model.config
    twin.load_state_dict(model.state_dict())
    twin.eval()
    batch = Batch.from_data_list(graphs())
    torch.testing.assert_close(twin(batch), model(batch), rtol=0, atol=0)


@pytest.mark.parametrize("name", CASES)
def test_node_order(name):
    model = make(name).eval()
    gs = graphs()
    perms = [torch.tensor([3, 0, 4, 2, 1]), torch.tensor([0]), torch.tensor([2, 0, 1])]
    a = model(Batch.from_data_list(gs))
    b = model(Batch.from_data_list([permuted(g, p) for g, p in zip(gs, perms)]))
    if model.permutation_invariant:
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    else:
        assert not torch.allclose(a, b)


@pytest.mark.parametrize("name", CASES)
def test_wrong_feature_width_is_refused(name):
    model = make(name)
    d = graphs()[0]
    d.x = d.x[:, :30]
    with pytest.raises(PerfseerError, match="expects x with 31 columns"):
        model(Batch.from_data_list([d]))


@pytest.mark.parametrize("name", sorted(SMALL))
def test_config_validation(name):
    cfg_cls = MODELS[name][0]
    with pytest.raises(PerfseerError, match="no field"):
        cfg_cls.from_dict({"hidden_size": 3})
    with pytest.raises(PerfseerError, match="num_targets must be int"):
        cfg_cls(num_targets="2")
    with pytest.raises(PerfseerError, match="num_targets must be > 0"):
        cfg_cls(num_targets=0)
    with pytest.raises(PerfseerError, match="loss"):
        cfg_cls(loss="mape")
    assert isinstance(cfg_cls().loss, str)


def test_unknown_model_lists_the_choices():
    with pytest.raises(PerfseerError, match="unknown model 'seernett'.*gcn.*seernet"):
        build_model("seernett")
    with pytest.raises(PerfseerError, match="unknown model"):
        build_from_dict("nope", {})
    with pytest.raises(PerfseerError, match="unknown model"):
        is_neural("nope")


def test_register_refuses_a_taken_name():
    from perfseer.models.registry import register
    from perfseer.models.seernet import SeerNet, SeerNetConfig

    register("seernet", SeerNetConfig, SeerNet)  # the same pair again is harmless
    with pytest.raises(PerfseerError, match="already registered"):
        register("seernet", SeerNetConfig, object)


def test_pmgns_asks_for_huber():
    assert build_model("pmgns", **SMALL["pmgns"]).config.loss == "huber"
    assert build_model("gcn", **SMALL["gcn"]).config.loss == "mse"
