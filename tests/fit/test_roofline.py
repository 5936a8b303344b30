"""The roofline reference time, its estimator, and PMGNS's roofline offset."""

import json

import numpy as np
import pytest
import torch
from train_helpers import flops_dataset

from perfseer.errors import PerfseerError
from perfseer.models import roofline as rl
from perfseer.fit.data import targets_of


def _by_hand(g, p):
    F, B = rl.node_costs(g)
    return sum(max(f / p.P, b / p.W) + p.c1 if f > 0 else p.a * b / p.W + p.c2 for f, b in zip(F, B))


@pytest.fixture(scope="module")
def data():
    tr, te = flops_dataset(60, 0, noise=0.05), flops_dataset(15, 1)
    tr[0].x[0, rl.FLOPS_COL] = 0.0  # one data-movement node
    return tr, te


def test_baseline_is_the_per_node_roofline(data):
    tr, _ = data
    p = rl.RooflineParams(P=3e9, W=2e8, a=0.5, c1=1e-3, c2=2e-4)
    b = rl.baseline_ms(tr[:5], p)
    assert np.allclose(b, [_by_hand(g, p) for g in tr[:5]], rtol=1e-9)
    # the torch version (PMGNS's forward) computes the same
    F = torch.cat([torch.as_tensor(rl.node_costs(g)[0]) for g in tr[:5]])
    B = torch.cat([torch.as_tensor(rl.node_costs(g)[1]) for g in tr[:5]])
    batch = torch.cat([torch.full((g.num_nodes,), i) for i, g in enumerate(tr[:5])])
    lb = rl.log_baseline_torch(F, B, batch, 5, torch.as_tensor(p.as_array()))
    assert np.allclose(lb.numpy(), np.log(b), atol=1e-9)


def test_fit_recovers_the_rates(data):
    tr, _ = data
    true = rl.RooflineParams(P=5e9, W=3e8, a=1.0, c1=2e-3, c2=1e-3)
    y = rl.baseline_ms(tr, true)
    got = rl.fit_params(tr, y, rl.RooflineParams(1e9, 1e9, 1.0, 1e-2, 1e-3), free=("P", "W", "c1"))
    assert np.allclose(np.log(rl.baseline_ms(tr, got)), np.log(y), atol=1e-3)
    with pytest.raises(PerfseerError, match="unknown roofline parameter"):
        rl.fit_params(tr, y, true, free=("Q",))


def test_spec_params_read_the_registry():
    p = rl.spec_params("rtx3090/amp-nchw-pt240", "fp16")
    assert p.P == pytest.approx(71.0e9) and p.W == pytest.approx(936e6)
    with pytest.raises(PerfseerError, match="no int4 peak"):
        rl.spec_params("rtx3090", "int4")


@pytest.mark.parametrize("residual", ["none", "ridge", "gbm"])
def test_estimator_round_trips(data, residual):
    if residual == "gbm":
        pytest.importorskip("lightgbm")
    tr, te = data
    est = rl.Roofline(device="rtx3090", precision="fp16", residual=residual, n_estimators=30)
    est.fit(tr, targets_of(tr)[:, 0], eval_set=(te, targets_of(te)[:, 0]))
    pred = est.predict(te)
    assert pred.shape == (15,) and np.isfinite(pred).all()
    back = rl.Roofline.from_dict(json.loads(json.dumps(est.to_dict())))
    assert np.allclose(back.predict(te), pred, rtol=1e-12)


def test_estimator_needs_a_device_or_fitted_rates(data):
    tr, _ = data
    with pytest.raises(PerfseerError, match="needs its rates fitted"):
        rl.Roofline(device="").fit(tr, targets_of(tr)[:, 0])


def test_pmgns_learns_the_residual_and_reloads(data, tmp_path):
    from perfseer.fit.methods import train_method
    from perfseer.fit.trainer import TrainConfig

    tr, te = data
    cfg = {"hidden_dim": 16, "head_hidden_dim": 16, "baseline": "roofline", "baseline_device": "i9-10940x"}
    fitted = train_method("pmgns", tr, te, cfg, train_config=TrainConfig(max_epochs=2, progress=False, seed=0))
    model = fitted.estimator.model
    assert bool(model.baseline_fitted) and model.baseline_params.shape == (1, 5)
    pred = fitted.predict(te)[:, 0]
    # the network's own output plus the standardised log roofline is what it predicts
    ts = fitted.estimator.target_scaler
    p = rl.RooflineParams.from_array(model.baseline_params[0].numpy())
    with torch.no_grad():
        from torch_geometric.data import Batch

        from perfseer.runtime.net import _model_input
        b = Batch.from_data_list([_model_input(fitted.estimator.feature_scaler.transform(g)) for g in te])
        head = super(type(model), model).forward(b)[:, 0].double().numpy()
    logb = np.log(rl.baseline_ms(te, p))
    assert np.allclose(np.log(pred), head * ts.std_[0] + logb, atol=1e-4)
    # the parameters are buffers: a fresh model with the saved state predicts the same
    fresh = type(model)(type(model.config).from_dict(model.config.to_dict()))
    fresh.load_state_dict(model.state_dict())
    fresh.eval()
    with torch.no_grad():
        assert torch.allclose(fresh(b), model.eval()(b))
    with pytest.raises(PerfseerError, match="baseline_fit='all'"):
        train_method("pmgns", tr, te, {"baseline": "roofline"}, train_config=TrainConfig(max_epochs=1, progress=False))


@pytest.mark.parametrize("model,cfg", [
    ("pmgns", {"baseline": "roofline", "baseline_device": "i9-10940x"}),
    ("blend", {"members": "pmgns+pmgns[baseline=roofline;baseline_device=i9-10940x]", "weights": "0.4,0.6"}),
])
def test_a_card_with_the_roofline_offset_reloads(tmp_path, model, cfg):
    from perfseer.runtime.predictor import Predictor, Target, load_predictor
    from perfseer.fit.methods import train_method
    from perfseer.fit.trainer import TrainConfig

    tr, va, te = flops_dataset(16, 0), flops_dataset(8, 1), flops_dataset(4, 2)
    fitted = train_method(model, tr, va, cfg | {"hidden_dim": 8, "head_hidden_dim": 8},
                          train_config=TrainConfig(max_epochs=1, batch_size=8, progress=False), targets=["latency_ms"])
    p = Predictor.from_training("p", model, fitted.estimator, [Target("latency_ms", "dev", "infer")], [], {}, {})
    p.save(tmp_path)
    q = load_predictor(tmp_path / "p.json")
    np.testing.assert_allclose(q.predict_graphs(te), fitted.predict(te), rtol=1e-6)


# -- the per-group roofline (fit="groups") ----------------------------------------------------------

@pytest.fixture(scope="module")
def mixed():
    """Graphs whose convolutions are spatial, 1x1 or grouped (three operator groups) plus ReLUs."""
    from perfseer.features.schema import NODE_FEATURES

    kh, kw, grp = (NODE_FEATURES.index(n) for n in ("kernel_h", "kernel_w", "groups"))
    out = []
    for split, (n, seed) in enumerate([(60, 0), (15, 1)]):
        gs = flops_dataset(n, seed, noise=0.05 * (split == 0))
        for i, g in enumerate(gs):
            conv = torch.nonzero(g.x[:, kh] == 3).reshape(-1)
            if i % 3 == 1:
                g.x[conv[:1], kh] = g.x[conv[:1], kw] = 1.0      # a pointwise convolution
            if i % 3 == 2:
                g.x[conv[-1:], grp] = 8.0                        # a grouped one
        out.append(gs)
    return out


def test_group_baseline_is_the_per_node_roofline_per_group(mixed):
    from perfseer.models.estimator import OP_GROUP_NAMES, node_groups

    tr, _ = mixed
    G = len(OP_GROUP_NAMES)
    theta = np.column_stack([np.geomspace(1e9, 1e10, G), np.geomspace(1e8, 5e8, G), np.geomspace(1e-4, 1e-2, G)])
    groups = [node_groups(g) for g in tr[:6]]
    assert {0, 1, 2, OP_GROUP_NAMES.index("activation")} <= set(np.concatenate(groups).tolist())
    by_hand = [sum(max(f / theta[k, 0], b / theta[k, 1]) + theta[k, 2] if f > 0 else b / theta[k, 1] + theta[k, 2]
                   for f, b, k in zip(*rl.node_costs(g), gr)) for g, gr in zip(tr[:6], groups)]
    b = rl._Costs(tr[:6]).group_terms(theta)[:, 4]
    assert np.allclose(b, by_hand, rtol=1e-9)
    F = torch.cat([torch.as_tensor(rl.node_costs(g)[0]) for g in tr[:6]])
    B = torch.cat([torch.as_tensor(rl.node_costs(g)[1]) for g in tr[:6]])
    batch = torch.cat([torch.full((g.num_nodes,), i) for i, g in enumerate(tr[:6])])
    lb = rl.log_group_baseline_torch(F, B, torch.as_tensor(np.concatenate(groups)), batch, 6, torch.as_tensor(theta))
    assert np.allclose(lb.numpy(), np.log(b), atol=1e-9)


def test_group_fit_follows_groups_that_differ_from_the_shared_roofline(mixed):
    tr, _ = mixed
    shared = rl.RooflineParams(P=5e9, W=3e8, a=1.0, c1=2e-3, c2=1e-3)
    start = rl.group_start(tr, shared)
    true = start.copy()
    true[2, 0] /= 4.0                    # spatial convolutions reach a quarter of the shared peak
    true[1, 2] *= 5.0                    # pointwise ones pay five times the overhead
    y = rl._Costs(tr).group_terms(true)[:, 4]
    shared_err = np.abs(np.log(rl._Costs(tr).group_terms(start)[:, 4] / y)).mean()
    got = rl.fit_group_params(tr, y, start, penalty=1e-4)
    err = np.abs(np.log(rl._Costs(tr).group_terms(got)[:, 4] / y)).mean()
    assert err < 0.1 * shared_err
    # a strong pull keeps every group at the start
    held = rl.fit_group_params(tr, y, start, penalty=1e4)
    assert np.allclose(np.log(held), np.log(start), atol=0.05)


def test_group_roofline_estimator_round_trips(mixed):
    tr, te = mixed
    est = rl.Roofline(device="i9-10940x", fit="groups", residual="ridge", group_penalties="0.1,1")
    est.fit(tr, targets_of(tr)[:, 0], eval_set=(te, targets_of(te)[:, 0]))
    assert est.groups_.shape == (len(rl.group_start(tr, est.params_)), 3) and est.group_penalty_ in (0.1, 1.0)
    pred = est.predict(te)
    assert np.isfinite(pred).all()
    back = rl.Roofline.from_dict(json.loads(json.dumps(est.to_dict())))
    assert np.allclose(back.predict(te), pred, rtol=1e-12)


def test_pmgns_with_the_group_roofline_offsets_by_it_and_reloads(mixed):
    from torch_geometric.data import Batch

    from perfseer.fit.methods import train_method
    from perfseer.fit.trainer import TrainConfig
    from perfseer.runtime.net import _model_input

    tr, te = mixed
    cfg = {"hidden_dim": 16, "head_hidden_dim": 16, "baseline": "roofline", "baseline_device": "i9-10940x",
           "baseline_fit": "groups"}
    fitted = train_method("pmgns", tr, te, cfg, train_config=TrainConfig(max_epochs=2, progress=False, seed=0))
    model = fitted.estimator.model.eval()
    theta = model.baseline_groups[0].numpy()
    b = Batch.from_data_list([_model_input(fitted.estimator.feature_scaler.transform(g)) for g in te])
    with torch.no_grad():
        from perfseer.models.estimator import node_groups

        assert torch.equal(model.node_groups(b), torch.as_tensor(np.concatenate([node_groups(g) for g in te])))
        logb = model.log_baseline(b)[:, 0].numpy()
        assert np.allclose(logb, np.log(rl._Costs(te).group_terms(theta)[:, 4]), atol=1e-5)
        fresh = type(model)(type(model.config).from_dict(model.config.to_dict()))
        fresh.load_state_dict(model.state_dict())
        assert torch.allclose(fresh.eval()(b), model(b))
    with pytest.raises(PerfseerError, match="baseline_penalty"):
        train_method("pmgns", tr, te, cfg | {"baseline_penalty": 0.0}, train_config=TrainConfig(max_epochs=1, progress=False))


# -- recurrent steps (steps=True) --------------------------------------------------------------------

@pytest.fixture(scope="module")
def recurrent():
    """``flops_dataset`` graphs where every fourth one has its first compute node turned into an LSTM of
    T = 5 + i % 7 steps in D = 1 or 2 directions (its FLOPs and bytes unchanged)."""
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.features.schema import NODE_FEATURES

    t_col, d_col = NODE_FEATURES.index("axis_size"), NODE_FEATURES.index("mm_batch")
    out = []
    for split, (n, seed) in enumerate([(60, 0), (15, 1)]):
        gs = flops_dataset(n, seed, noise=0.0)
        for i, g in enumerate(gs):
            if i % 4 == 0:
                j = int(torch.nonzero(g.x[:, rl.FLOPS_COL] > 0).reshape(-1)[0])
                g.op_type[j] = OP_VOCAB.index("LSTM")
                g.x[j, t_col], g.x[j, d_col] = 5 + i % 7, 1 + i % 2
            g.x[-1, t_col] = 50.0                                    # not recurrent: no effect
        out.append(gs)
    return out


def test_a_recurrent_node_pays_its_overhead_per_step_and_direction(recurrent):
    tr, _ = recurrent
    L = rl.node_launches(tr[0])
    assert L.max() == 5 * 1 and (L == 1).sum() == len(L) - 1             # only the LSTM: T x D
    assert rl.node_launches(tr[4]).max() == (5 + 4) * 1 and rl.node_launches(tr[1]).max() == 1
    p = rl.RooflineParams(P=3e9, W=2e8, a=0.5, c1=1e-3, c2=2e-4)
    plain, steps = rl.baseline_ms(tr[:8], p), rl.baseline_ms(tr[:8], p, steps=True)
    extra = np.array([(rl.node_launches(g).sum() - g.num_nodes) * p.c1 for g in tr[:8]])
    assert np.allclose(steps - plain, extra, rtol=1e-9) and extra[0] > 0 and extra[1] == 0
    F = torch.cat([torch.as_tensor(rl.node_costs(g)[0]) for g in tr[:8]])
    B = torch.cat([torch.as_tensor(rl.node_costs(g)[1]) for g in tr[:8]])
    L = torch.cat([torch.as_tensor(rl.node_launches(g)) for g in tr[:8]])
    batch = torch.cat([torch.full((g.num_nodes,), i) for i, g in enumerate(tr[:8])])
    lb = rl.log_baseline_torch(F, B, batch, 8, torch.as_tensor(p.as_array()), L)
    assert np.allclose(lb.numpy(), np.log(steps), atol=1e-9)


def test_a_group_without_training_nodes_starts_as_one_that_computes(recurrent):
    from perfseer.models.estimator import OP_GROUP_NAMES

    tr, _ = recurrent
    shared = rl.RooflineParams(P=5e9, W=3e8, a=0.5, c1=2e-3, c2=1e-9)
    moving = tr[1].clone()
    moving.x[:, rl.FLOPS_COL] = 0.0                          # every node of its groups moves data only
    start = rl.group_start([moving], shared)                 # no LSTM
    rec = OP_GROUP_NAMES.index("recurrent")
    assert tuple(start[rec]) == (shared.P, shared.W, shared.c1)
    seen = np.unique(rl._Costs([moving]).grp)
    assert rec not in seen and np.all(start[seen, 2] == shared.c2) and np.all(start[seen, 1] == shared.W / shared.a)


def test_the_group_roofline_with_steps_recovers_the_per_step_overhead(recurrent):
    """Times made with a per-step overhead: the plain group fit can not follow the recurrent graphs,
    the one with steps fits them."""
    tr, te = recurrent
    shared = rl.RooflineParams(P=5e9, W=3e8, a=1.0, c1=5e-2, c2=1e-3)
    true = rl.group_start(tr, shared)
    y = rl._Costs(tr, steps=True).group_terms(true)[:, 4]
    err = {}
    for steps in (False, True):
        est = rl.Roofline(fit="groups", recurrent_steps=steps, group_penalties="0.01")
        est.fit(tr, y)
        yt = rl._Costs(te, steps=True).group_terms(true)[:, 4]
        err[steps] = float(np.mean(np.abs(est.predict(te).reshape(-1) / yt - 1)))
    assert err[True] < 1e-4 and err[False] > 0.01


def test_pmgns_with_steps_offsets_by_the_same_baseline_and_reloads(recurrent):
    from torch_geometric.data import Batch

    from perfseer.fit.methods import train_method
    from perfseer.fit.trainer import TrainConfig
    from perfseer.runtime.net import _model_input

    tr, te = recurrent
    for fit in ("overheads", "groups"):
        cfg = {"hidden_dim": 16, "head_hidden_dim": 16, "baseline": "roofline", "baseline_device": "i9-10940x",
               "baseline_fit": fit, "baseline_steps": True}
        fitted = train_method("pmgns", tr, te, cfg, train_config=TrainConfig(max_epochs=2, progress=False, seed=0))
        model = fitted.estimator.model.eval()
        b = Batch.from_data_list([_model_input(fitted.estimator.feature_scaler.transform(g)) for g in te])
        with torch.no_grad():
            L = np.concatenate([rl.node_launches(g) for g in te])
            assert L.max() > 1 and torch.equal(model.node_launches(b), torch.as_tensor(L))
            costs = rl._Costs(te, steps=True)
            want = (costs.group_terms(model.baseline_groups[0].numpy()) if fit == "groups"
                    else costs.terms(rl.RooflineParams.from_array(model.baseline_params[0].numpy())))[:, 4]
            assert np.allclose(model.log_baseline(b)[:, 0].numpy(), np.log(want), atol=1e-5)
            fresh = type(model)(type(model.config).from_dict(model.config.to_dict()))
            fresh.load_state_dict(model.state_dict())
            assert torch.allclose(fresh.eval()(b), model(b))
