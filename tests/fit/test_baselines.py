"""One conformance test over the non-neural baselines, and a learning sanity check each."""

import json
import sys

import numpy as np
import pytest
from train_helpers import flops_dataset

from perfseer.errors import MissingDependencyError, PerfseerError
from perfseer.models.additive import Additive
from perfseer.models.estimator import NotFittedError
from perfseer.models.flops_only import FlopsOnly
from perfseer.models.gbm import GBM
from perfseer.fit.data import targets_of
from perfseer.fit.metrics import mape

ESTIMATORS = {"flops": lambda: FlopsOnly(), "gbm": lambda: GBM(n_estimators=100),
              "additive": lambda: Additive(epochs=30)}


@pytest.fixture(scope="module")
def data():
    return flops_dataset(80, 0, targets=2, noise=0.05), flops_dataset(20, 1, targets=2)


def needs(name):
    if name == "gbm":
        pytest.importorskip("lightgbm")


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_conformance(name, data, tmp_path):
    needs(name)
    (tr, te), est = data, ESTIMATORS[name]()
    assert not [k for k in vars(est) if k.endswith("_")]  # __init__ learns nothing
    with pytest.raises(NotFittedError, match=r"call fit\(graphs, y\)"):
        est.predict(te)
    y = targets_of(tr)
    assert est.fit(tr, y[:, 0]) is est
    assert [k for k in vars(est) if k.endswith("_")]
    one = est.predict(te)
    assert one.shape == (20,) and np.isfinite(one).all() and (one > 0).all()
    back = type(est).from_dict(json.loads(json.dumps(est.to_dict())))
    assert np.array_equal(back.predict(te), one)
    est.save(tmp_path / "est.json")
    assert np.array_equal(type(est).load(tmp_path / "est.json").predict(te), one)

    two = ESTIMATORS[name]().fit(tr, y).predict(te)
    assert two.shape == (20, 2)
    assert est.predict([]).shape == (0,)
    with pytest.raises(PerfseerError, match="80 graphs but 79 targets"):
        ESTIMATORS[name]().fit(tr, y[:-1])
    with pytest.raises(PerfseerError, match="<= 0"):
        ESTIMATORS[name]().fit(tr, np.zeros(80))
    with pytest.raises(PerfseerError, match="not a saved"):
        type(est).from_dict({"format": "perfseer.estimator", "name": "other"})


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_learns_flops_proportional_latency(name):
    needs(name)
    tr, te = flops_dataset(150, 0), flops_dataset(30, 2)
    est = {"flops": FlopsOnly, "gbm": GBM, "additive": Additive}[name]()  # the defaults
    est.fit(tr, targets_of(tr)[:, 0])
    assert mape(targets_of(te)[:, 0], est.predict(te)) < 10


def test_flops_only_is_a_power_law_of_flops():
    tr = flops_dataset(30, 0)
    est = FlopsOnly().fit(tr, targets_of(tr)[:, 0])
    a, b = est.coef_[:, 0]
    assert b == pytest.approx(1.0, abs=1e-6) and np.exp(a) == pytest.approx(1e-6, rel=1e-4)


def test_gbm_without_lightgbm_names_the_install(monkeypatch, data):
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    tr, _ = data
    with pytest.raises(MissingDependencyError, match=r"pip install 'perfseer\[baselines\]'"):
        GBM().fit(tr, targets_of(tr)[:, 0])


def test_gbm_early_stops_on_eval_set(data):
    pytest.importorskip("lightgbm")
    tr, te = data
    est = GBM(n_estimators=400, early_stopping_rounds=5).fit(tr, targets_of(tr), eval_set=(te, targets_of(te)))
    assert all(1 <= it < 400 for it in est.best_iterations_)


def test_op_group_features_split_the_graph_costs(data):
    from perfseer.features import schema
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.models.estimator import OP_GROUP_NAMES, op_group_features

    graphs = list(data[0])[:5]
    f = op_group_features(graphs)
    G = len(OP_GROUP_NAMES)
    assert f.shape == (len(graphs), 3 * G) and (f >= 0).all()
    fl = schema.NODE_FEATURES.index("flops")
    for g, row in zip(graphs, f):
        # every node lands in one group: counts and FLOPs add up to the graph's
        assert row[:G].sum() == len(np.asarray(g.op_type).reshape(-1))
        assert np.isclose(row[G:2 * G].sum(), np.asarray(g.x)[:, fl].sum())
    # a 1x1 convolution is pointwise, a grouped one depthwise, a Relu an activation
    x = np.zeros((3, len(schema.NODE_FEATURES)), dtype=np.float32)
    hp = schema.HP_INDEX
    x[:, [hp["kernel_h"], hp["kernel_w"], hp["groups"]]] = [[1, 1, 1], [3, 3, 32], [0, 0, 0]]
    x[:, fl] = [10.0, 20.0, 5.0]

    class _G:
        op_type = np.array([OP_VOCAB.index("Conv"), OP_VOCAB.index("Conv"), OP_VOCAB.index("Relu")])

    _G.x = x
    row = op_group_features([_G])[0]
    for name, flops in (("conv_pointwise", 10.0), ("conv_depthwise", 20.0), ("activation", 5.0)):
        i = OP_GROUP_NAMES.index(name)
        assert row[i] == 1 and row[G + i] == flops


def test_gbm_on_the_bag_of_operator_costs(data, tmp_path):
    needs("gbm")
    tr, te = data
    est = GBM(n_estimators=100, features="global+ops").fit(tr, targets_of(tr)[:, 0])
    p = est.predict(te)
    assert p.shape == (len(te),) and np.isfinite(p).all() and (p > 0).all()
    est.save(tmp_path / "g.json")
    assert np.allclose(GBM.load(tmp_path / "g.json").predict(te), p)
    with pytest.raises(PerfseerError, match="features"):
        GBM(features="ops-only")
