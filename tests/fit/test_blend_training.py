"""train_method("blend"): members trained separately, weights on validation, a card that reloads."""

import numpy as np
import pytest
import torch
from train_helpers import flops_dataset

from perfseer.fit.methods import train_method
from perfseer.fit.trainer import TrainConfig


def test_blend_trains_members_fits_weights_and_predicts_their_geometric_mean():
    tr, va, te = flops_dataset(24, 0, noise=0.1), flops_dataset(10, 1, noise=0.1), flops_dataset(6, 2)
    tc = TrainConfig(max_epochs=2, batch_size=8, progress=False)
    fitted = train_method("blend", tr, va, {"members": "seernet[readout=sum]+gcn", "hidden_dim": 8, "head_hidden_dim": 8},
                          train_config=tc, targets=["latency_ms"], test_set=te)
    w = [float(x) for x in fitted.config["weights"].split(",")]
    assert len(w) == 2 and np.isclose(sum(w), 1) and all(x >= 0 for x in w)
    members = [train_method(n, tr, va, c, train_config=tc, targets=["latency_ms"])
               for n, c in (("seernet", {"readout": "sum", "hidden_dim": 8, "head_hidden_dim": 8}),
                            ("gcn", {"hidden_dim": 8, "head_hidden_dim": 8}))]
    want = np.exp(sum(wi * np.log(m.predict(te)) for wi, m in zip(w, members)))
    np.testing.assert_allclose(fitted.predict(te), want, rtol=1e-4)
    r = fitted.train_result
    assert r.epochs_run == 4 and set(r.metrics) == {"train", "val", "test"} and {h["member"] for h in r.history} == {0, 1}


def test_a_blend_card_saves_and_loads(tmp_path):
    from perfseer.runtime.predictor import Predictor, Target, load_predictor

    tr, va, te = flops_dataset(16, 0), flops_dataset(8, 1), flops_dataset(4, 2)
    fitted = train_method("blend", tr, va, {"members": "seernet+pmgns", "hidden_dim": 8, "head_hidden_dim": 8,
                                           "weights": "0.4,0.6"},
                          train_config=TrainConfig(max_epochs=1, batch_size=8, progress=False), targets=["latency_ms"])
    assert fitted.config["weights"] == "0.4,0.6"  # given weights are kept, not fitted
    p = Predictor.from_training("b", "blend", fitted.estimator, [Target("latency_ms", "dev", "infer")], [], {}, {})
    p.save(tmp_path)
    q = load_predictor(tmp_path / "b.json")
    np.testing.assert_allclose(q.predict_graphs(te), fitted.predict(te), rtol=1e-6)
    assert q.card["model"]["name"] == "blend"


def test_a_resumed_blend_keeps_its_finished_members(tmp_path):
    tr, va = flops_dataset(16, 0), flops_dataset(8, 1)
    cfg = {"members": "gcn+gin", "hidden_dim": 8, "head_hidden_dim": 8}
    tc = TrainConfig(max_epochs=2, batch_size=8, progress=False, checkpoint_dir=str(tmp_path))
    first = train_method("blend", tr, va, cfg, train_config=tc, targets=["latency_ms"])
    assert (tmp_path / "member0" / "finished.json").is_file() and (tmp_path / "member1" / "finished.json").is_file()
    # resumed with a larger budget: finished members are restored, not trained further
    again = train_method("blend", tr, va, cfg, targets=["latency_ms"],
                         train_config=TrainConfig(max_epochs=5, batch_size=8, progress=False,
                                                  checkpoint_dir=str(tmp_path), resume=True))
    assert again.train_result.epochs_run == first.train_result.epochs_run == 4
    np.testing.assert_allclose(again.predict(va), first.predict(va), rtol=1e-6)


def test_fit_shift_scales_the_blend_by_the_validation_fitted_constant():
    from perfseer.models.blend import fit_log_shift

    tr, va, te = flops_dataset(16, 0, noise=0.1), flops_dataset(10, 1, noise=0.1), flops_dataset(6, 2)
    tc = TrainConfig(max_epochs=1, batch_size=8, progress=False)
    cfg = {"members": "gcn+pmgns", "hidden_dim": 8, "head_hidden_dim": 8, "weights": "0.5,0.5"}
    plain = train_method("blend", tr, va, cfg, train_config=tc, targets=["latency_ms"])
    shifted = train_method("blend", tr, va, cfg | {"fit_shift": True}, train_config=tc, targets=["latency_ms"])
    y_val = np.array([float(g.y[0, 0]) for g in va])
    b = fit_log_shift(np.log(plain.predict(va)[:, 0]), y_val)[0]
    np.testing.assert_allclose(shifted.predict(te), plain.predict(te) * np.exp(b), rtol=1e-4)
    assert shifted.config["shift"] and shifted.config["fit_shift"]


def test_members_with_their_own_seeds_are_a_seed_ensemble():
    tr, va, te = flops_dataset(16, 0, noise=0.1), flops_dataset(8, 1, noise=0.1), flops_dataset(4, 2)
    tc = TrainConfig(max_epochs=1, batch_size=8, progress=False, seed=0)
    cfg = {"members": "gcn+gcn", "hidden_dim": 8, "head_hidden_dim": 8, "weights": "0.5,0.5"}
    same = train_method("blend", tr, va, cfg, train_config=tc, targets=["latency_ms"])
    seeded = train_method("blend", tr, va, cfg | {"seeds": "0,7"}, train_config=tc, targets=["latency_ms"])
    alone = [train_method("gcn", tr, va, {"hidden_dim": 8, "head_hidden_dim": 8}, targets=["latency_ms"],
                          train_config=TrainConfig(max_epochs=1, batch_size=8, progress=False, seed=s)) for s in (0, 7)]
    np.testing.assert_allclose(same.predict(te), alone[0].predict(te), rtol=1e-4)  # two copies of seed 0
    np.testing.assert_allclose(seeded.predict(te), np.sqrt(alone[0].predict(te) * alone[1].predict(te)), rtol=1e-4)


def test_tie_seeds_gives_a_networks_seeds_one_weight():
    tr, va = flops_dataset(16, 0, noise=0.1), flops_dataset(8, 1, noise=0.1)
    tc = TrainConfig(max_epochs=1, batch_size=8, progress=False)
    cfg = {"members": "gcn+gcn+pmgns", "seeds": "0,1,0", "tie_seeds": True, "hidden_dim": 8, "head_hidden_dim": 8}
    fitted = train_method("blend", tr, va, cfg, train_config=tc, targets=["latency_ms"])
    w = [float(x) for x in fitted.config["weights"].split(",")]
    assert np.isclose(w[0], w[1]) and np.isclose(sum(w), 1)


def test_warm_from_reuses_the_members_a_blend_card_already_trained(tmp_path):
    """A recipe that changes one member retrains that member only; the reused one is the network
    training would give again, and a card trained on other rows is refused."""
    from perfseer.errors import PerfseerError
    from perfseer.runtime.predictor import Predictor, Target

    tr, va, te = flops_dataset(16, 0, noise=0.1), flops_dataset(8, 1, noise=0.1), flops_dataset(4, 2)
    tc = TrainConfig(max_epochs=2, batch_size=8, progress=False)
    base = {"hidden_dim": 8, "head_hidden_dim": 8, "seeds": "0,1"}
    old = train_method("blend", tr, va, base | {"members": "gcn+gin"}, train_config=tc, targets=["latency_ms"])
    Predictor.from_training("old", "blend", old.estimator, [Target("latency_ms", "dev", "infer")], [], {}, {}).save(tmp_path)
    new_cfg = base | {"members": "gcn+pmgns", "warm_from": str(tmp_path)}     # a folder of cards
    new = train_method("blend", tr, va, new_cfg, train_config=tc, targets=["latency_ms"])
    assert new.train_result.epochs_run == 2                                  # pmgns only; gcn reused
    assert "reused" in new.train_result.stopped
    scratch = train_method("blend", tr, va, base | {"members": "gcn+pmgns"}, train_config=tc, targets=["latency_ms"])
    got, want = new.estimator.model.members[0].state_dict(), scratch.estimator.model.members[0].state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    np.testing.assert_allclose(new.predict(te), scratch.predict(te), rtol=1e-6)
    with pytest.raises(PerfseerError, match="trained on these rows"):
        train_method("blend", flops_dataset(16, 5), va, new_cfg, train_config=tc, targets=["latency_ms"])
    with pytest.raises(PerfseerError, match="no blend card"):
        train_method("blend", tr, va, new_cfg | {"warm_from": str(tmp_path / "none.json")}, train_config=tc,
                     targets=["latency_ms"])
