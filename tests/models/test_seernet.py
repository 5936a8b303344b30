"""SeerNet's equations, sizes and ablation switches; SeerNet-Multi's shared trunk and heads."""

import pytest
import torch
from torch_geometric.data import Batch
from test_models_conformance import graphs

from perfseer.models import SeerBlock, SeerNet, SeerNetConfig, SeerNetMulti, SeerNetMultiConfig, SynMM, task_losses

SMALL = dict(hidden_dim=16, head_hidden_dim=16)


def test_default_size_is_about_the_papers_one_million():
    # PerfSeer Fig. 4 reports 1.02 M; 256-unit layers and one SeerBlock give 0.94 M here (935,937).
    n = SeerNet(SeerNetConfig()).num_parameters()
    assert 0.9e6 <= n <= 1.1e6, n


@pytest.mark.parametrize("switch", [dict(synmm=False), dict(gnpb=False), dict(use_edge_features=False),
                                    dict(use_global_features=False), dict(op_embedding_dim=16),
                                    dict(edge_update_global=True), dict(num_blocks=2),
                                    dict(head_globals=True)])
def test_ablation_switches_change_the_network(switch):
    torch.manual_seed(0)
    base = SeerNet(SeerNetConfig(**SMALL))
    torch.manual_seed(0)
    ablated = SeerNet(SeerNetConfig(**SMALL, **switch))
    assert ablated.num_parameters() != base.num_parameters()
    batch = Batch.from_data_list(graphs())
    out = ablated(batch)
    assert out.shape == (3, 1) and torch.isfinite(out).all()
    assert not torch.allclose(out, base(batch))


def test_ablation_sizes():
    h = 16
    full = SeerNet(SeerNetConfig(**SMALL)).num_parameters()
    assert full - SeerNet(SeerNetConfig(**SMALL, synmm=False)).num_parameters() == 2 * h * h + h  # SynMM's Linear
    # no z: z-init and z-aggregation temperatures, MLP_z (two layers), z's block of MLP_u
    no_z = 2 * h + 2 * (h * h + h) + h * h
    assert full - SeerNet(SeerNetConfig(**SMALL, gnpb=False)).num_parameters() == no_z


def test_head_globals_feeds_u_to_the_head():
    cfg = SeerNetConfig(**SMALL, head_globals=True)
    model = SeerNet(cfg).eval()
    assert model.head[0].in_features == 16 + cfg.global_dim  # MLP_head(u' || u)
    batch = Batch.from_data_list(graphs())
    u_prime = model.trunk(batch, batch.batch, batch.u, batch.num_graphs)
    torch.testing.assert_close(model(batch), model.head(torch.cat([u_prime, batch.u], dim=-1)))
    multi = SeerNetMulti(SeerNetMultiConfig(**SMALL, head_globals=True, num_targets=2))
    assert multi.embed(batch).shape == (3, 16 + cfg.global_dim)
    # without global features there is no u to read: the switch changes nothing
    off = SeerNet(SeerNetConfig(**SMALL, head_globals=True, use_global_features=False))
    assert off.head[0].in_features == 16


def test_ablated_edge_and_global_features_are_not_read():
    model = SeerNet(SeerNetConfig(**SMALL, use_edge_features=False, use_global_features=False)).eval()
    gs = graphs()
    a = model(Batch.from_data_list(gs))
    for g in gs:
        g.edge_attr = torch.randn_like(g.edge_attr)
        g.u = torch.randn_like(g.u)
    torch.testing.assert_close(model(Batch.from_data_list(gs)), a)


def test_synmm_is_a_linear_map_of_max_and_mean():
    agg = SynMM(4)
    x = torch.randn(5, 4)
    index = torch.tensor([0, 0, 1, 1, 1])
    want = torch.stack([agg.lin(torch.cat([x[i].max(0).values, x[i].mean(0)]))
                        for i in (index == 0, index == 1)])
    torch.testing.assert_close(agg(x, index, dim_size=2), want)


def test_seer_block_follows_equations_2_to_8():
    torch.manual_seed(0)
    h = 8
    block = SeerBlock(h, edge_in=h, global_in=h)
    # graph 0: nodes 0-2, edges 0->1, 0->2, 1->2; graph 1: node 3 alone
    x, e, u, z = torch.randn(4, h), torch.randn(3, h), torch.randn(2, h), torch.randn(2, h)
    ei = torch.tensor([[0, 0, 1], [1, 2, 2]])
    batch = torch.tensor([0, 0, 0, 1])
    x2, e2, u2, z2 = block(x, ei, e, u, z, batch, 2)

    e_want = block.mlp_e(torch.cat([e, x[ei[0]], x[ei[1]]], 1))                                # (2)
    e_bar = torch.stack([torch.zeros(h), e_want[0], (e_want[1] + e_want[2]) / 2, torch.zeros(h)])  # (3)
    x_want = block.mlp_v(torch.cat([e_bar, x + z[batch], u[batch]], 1))                         # (4)
    t = block.agg_z.t
    z_bar = torch.stack([(torch.softmax(x_want[m] * t, 0) * x_want[m]).sum(0) for m in (batch == 0, batch == 1)])
    z_want = block.mlp_z(z_bar + z)                                                                # (5), (6)
    u_want = block.mlp_u(torch.cat([block.agg_u(x_want, batch, dim_size=2), z_want, u], 1))       # (7), (8)
    for got, want in ((e2, e_want), (x2, x_want), (z2, z_want), (u2, u_want)):
        torch.testing.assert_close(got, want)


def test_multi_heads_and_shared_parameters_partition_the_model():
    torch.manual_seed(0)
    model = SeerNetMulti(SeerNetMultiConfig(**SMALL, num_targets=3))
    shared = {id(p) for p in model.shared_parameters()}
    heads = [{id(p) for p in model.task_parameters(t)} for t in range(3)]
    assert shared.isdisjoint(set().union(*heads)) and all(a.isdisjoint(b) for a in heads for b in heads if a is not b)
    assert shared | set().union(*heads) == {id(p) for p in model.parameters()}
    assert {id(p) for p in model.task_parameters()} == set().union(*heads)
    with pytest.raises(Exception, match="out of range"):
        model.task_parameters(3)

    batch = Batch.from_data_list(graphs())
    pred = model(batch)
    torch.testing.assert_close(pred[:, 1:2], model.heads[1](model.embed(batch)))

    target = torch.randn(3, 3)
    target[0, 2] = float("nan")  # a metric not measured for graph 0
    losses = model.task_losses(pred, target)
    assert len(losses) == 3 and all(torch.isfinite(l) for l in losses)
    torch.testing.assert_close(losses[2], ((pred[1:, 2] - target[1:, 2]) ** 2).mean())
    # what PCGrad does: one gradient per task on the shared parameters; heads see only their task
    shared_params = list(model.shared_parameters())
    grads = [torch.autograd.grad(l, shared_params, retain_graph=True) for l in losses]
    assert len(grads) == 3 and all(g.shape == p.shape for g, p in zip(grads[0], shared_params))
    other = torch.autograd.grad(losses[0], list(model.task_parameters(1)), retain_graph=True, allow_unused=True)
    assert all(g is None or not g.any() for g in other)


def test_task_losses_huber_and_empty_column():
    pred = torch.zeros(2, 2, requires_grad=True)
    target = torch.tensor([[3.0, float("nan")], [0.5, float("nan")]])
    hub, empty = task_losses(pred, target, "huber")
    torch.testing.assert_close(hub, torch.tensor((2.5 + 0.125) / 2))
    assert empty.item() == 0.0 and empty.requires_grad


def test_sum_readout_adds_node_and_global_costs_in_the_target_unit():
    torch.manual_seed(0)
    model = SeerNet(SeerNetConfig(**SMALL, readout="sum"))
    model.set_target_scaling([2.0], [1.5])  # log-ms mean and std, as the trainer hands them over
    batch = Batch.from_data_list(graphs())
    model.train()
    model(batch)  # the first training batch sets the offset: mean prediction = mean target
    model.eval()
    out = model(batch)
    torch.testing.assert_close(out.mean(), torch.tensor(0.0), atol=1e-5, rtol=0)
    head = model.head
    x, emb = model.trunk.states(batch, batch.batch, batch.u, 3)
    s_node = head.node_head(torch.cat([x, batch.x], -1)) + head.offset
    s_glob = head.global_head(emb) + head.offset
    ms = torch.stack([torch.exp(s_node[batch.batch == g]).sum() + torch.exp(s_glob[g]).sum() for g in range(3)])
    torch.testing.assert_close(torch.exp(out[:, 0] * 1.5 + 2.0), ms, rtol=1e-4, atol=0)  # y = sum of node costs + global


def test_sum_readout_grows_with_a_repeated_subgraph():
    # two disjoint copies of a graph cost at least what one does: the sum extrapolates in size
    from torch_geometric.data import Data

    torch.manual_seed(0)
    model = SeerNet(SeerNetConfig(**SMALL, readout="sum", use_global_features=False)).eval()
    g = graphs()[0]
    twice = Data(x=torch.cat([g.x, g.x]), edge_index=torch.cat([g.edge_index, g.edge_index + 5], 1),
                 edge_attr=torch.cat([g.edge_attr, g.edge_attr]), u=g.u, op_type=torch.cat([g.op_type, g.op_type]),
                 num_nodes=10)
    with torch.no_grad():
        one, two = model(Batch.from_data_list([g])), model(Batch.from_data_list([twice]))
    assert float(two) > float(one)


def test_readout_defaults_and_old_cards():
    assert SeerNetConfig.from_dict({"hidden_dim": 8}).readout == "graph"  # a card from before the field
    assert SeerNetMultiConfig().readout == "graph"
    with pytest.raises(Exception, match="readout"):
        SeerNetMultiConfig(readout="sum")
    with pytest.raises(Exception, match="readout"):
        SeerNetConfig(readout="mean")
