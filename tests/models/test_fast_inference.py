"""The prediction fast paths (:class:`perfseer.models.base.MLP` running its layers' functions,
PMGNS's :func:`~perfseer.models.pmgns.sage_inference`, dropout skipped in eval mode) give the same
values bit for bit as the module calls they replace, which run when gradients are on."""

import pytest
import torch
from torch_geometric.data import Batch
from test_models_conformance import graphs

from perfseer.models import build_model
from perfseer.models.pmgns import plain_sage, sage_inference


def _both(model, batch):
    with torch.no_grad():
        fast = model(batch)
    with torch.enable_grad():  # the module calls (PyG's SAGEConv, nn.Sequential)
        slow = model(batch).detach()
    return fast, slow


@pytest.mark.parametrize("name, kw", [
    ("pmgns", {"dropout": 0.2}),
    ("pmgns", {"aggr": "add"}),
    ("pmgns", {"aggr": "max"}),  # not a plain SAGE: PyG's path either way
    ("seernet", {"dropout": 0.1, "readout": "sum"}),
    ("seernet", {}),  # the global node's softmax aggregations and the edge mean computed in place
    ("seernet-multi", {"num_blocks": 2}),
    ("gcn", {"dropout": 0.3}),
    ("blend", {"members": "seernet+pmgns+pmgns"}),
])
def test_the_fast_path_is_the_module_path_bit_for_bit(name, kw):
    torch.manual_seed(0)
    model = build_model(name, hidden_dim=16, head_hidden_dim=16, num_targets=2, **kw).eval()
    fast, slow = _both(model, Batch.from_data_list(graphs()))
    assert torch.equal(fast, slow)


def test_sage_inference_is_sage_conv_with_isolated_nodes_and_repeated_edges():
    from torch_geometric.nn import SAGEConv

    torch.manual_seed(1)
    for aggr in ("mean", "add", "sum"):
        conv = SAGEConv(5, 7, aggr=aggr)
        x = torch.randn(6, 5)
        ei = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 2, 2, 3, 0, 1]])  # node 4, 5: no incoming edges
        assert plain_sage(conv)
        with torch.no_grad():
            assert torch.equal(sage_inference(conv, x, ei), conv(x, ei))


def test_a_hooked_layer_takes_the_module_path():
    from torch_geometric.nn import SAGEConv

    conv = SAGEConv(3, 3)
    conv.register_forward_hook(lambda *a: None)
    assert not plain_sage(conv)
    assert not plain_sage(SAGEConv(3, 3, normalize=True)) and not plain_sage(SAGEConv(3, 3, root_weight=False))


def test_a_training_model_keeps_its_dropout():
    torch.manual_seed(0)
    model = build_model("pmgns", hidden_dim=16, head_hidden_dim=16, num_targets=1, dropout=0.5).train()
    batch = Batch.from_data_list(graphs())
    with torch.no_grad():
        a, b = model(batch), model(batch)
    assert not torch.equal(a, b)  # dropout draws differ: it ran


def test_collate_inputs_is_pyg_collation():
    from perfseer.runtime.net import _model_input, collate_inputs

    gs = graphs()
    for chunk in (gs[:1], gs, gs[::-1] + gs):
        fast, pyg = collate_inputs(chunk), Batch.from_data_list([_model_input(g) for g in chunk])
        for key in ("x", "edge_index", "edge_attr", "u", "op_type", "batch", "ptr"):
            a, b = getattr(fast, key), getattr(pyg, key)
            assert a.dtype == b.dtype and torch.equal(a, b), key
        assert fast.num_graphs == pyg.num_graphs and fast.num_nodes == pyg.num_nodes


def test_blas_threads_lowered_for_a_block_and_restored_with_the_same_distances():
    import numpy as np

    from perfseer import blas
    from perfseer.trust import domain

    rng = np.random.default_rng(0)
    ref, q = rng.normal(size=(300, 32)), rng.normal(size=(11, 32))
    api = blas._api()
    before = api[0]() if api else None
    with blas.limited(1):
        if api:
            assert api[0]() == 1
        one = domain.nearest_distance(ref, q)
    assert (api[0]() if api else None) == before
    many = np.sqrt(((q[:, None, :] - ref[None]) ** 2).sum(-1).min(1))
    np.testing.assert_allclose(one, many, rtol=1e-9)


def test_the_kept_in_degree_follows_a_graph_changed_in_place():
    from torch_geometric.nn import SAGEConv

    torch.manual_seed(2)
    conv = SAGEConv(4, 4)
    x = torch.randn(5, 4)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    with torch.no_grad():
        assert torch.equal(sage_inference(conv, x, ei), conv(x, ei))
        ei[1, 0] = 4  # the same tensor, other edges: the kept degree must not be reused
        assert torch.equal(sage_inference(conv, x, ei), conv(x, ei))
        assert torch.equal(sage_inference(conv, x[:4], ei[:, 1:3]), conv(x[:4], ei[:, 1:3]))
