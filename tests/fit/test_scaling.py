"""Feature and target scaling: fitted statistics, masking, inversion and JSON round trips."""

import json

import numpy as np
import pytest
import torch
from train_helpers import flops_dataset

from perfseer.errors import PerfseerError
from perfseer.features import schema
from perfseer.runtime.scaling import FEATURE_GROUPS, FeatureScaler, TargetScaler, signed_log1p


def test_features_are_log_scaled_and_standardised_on_train():
    graphs = flops_dataset(20)
    fs = FeatureScaler().fit(graphs)
    x = torch.cat([fs.transform(g).x for g in graphs]).double()
    flops = schema.NODE_FEATURES.index("flops")
    assert x[:, flops].mean().item() == pytest.approx(0.0, abs=1e-5)
    assert x[:, flops].std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)
    assert x[:, schema.NODE_FEATURES.index("num_heads")].abs().max().item() == 0.0  # constant column
    raw = graphs[0].x[:, flops].double()
    expected = (torch.log1p(raw) - fs.mean_["x"][flops]) / fs.std_["x"][flops]
    assert torch.allclose(fs.transform(graphs[0]).x[:, flops].double(), expected, atol=1e-4)
    assert graphs[0].x[:, flops].min() > 1000  # the input is not modified
    assert torch.equal(signed_log1p(torch.tensor([-1.0, 0.0])), torch.tensor([-np.log(2.0), 0.0]).float())


def test_feature_scaler_json_round_trip_and_masks():
    graphs = flops_dataset(10)
    fs = FeatureScaler(mask=["edge", "node_hp"]).fit(graphs)
    back = FeatureScaler.from_dict(json.loads(json.dumps(fs.to_dict())))
    a, b = fs.transform(graphs[3]), back.transform(graphs[3])
    for field in ("x", "edge_attr", "u"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert a.edge_attr.abs().max() == 0.0
    hp = list(FEATURE_GROUPS["node_hp"][1])
    assert a.x[:, hp].abs().max() == 0.0 and a.x[:, len(hp):].abs().max() > 0
    assert a.u.abs().max() > 0
    with pytest.raises(PerfseerError, match="choose from node_hp, node_cost, edge, global"):
        FeatureScaler(mask=["edges"])
    with pytest.raises(PerfseerError, match="not fitted"):
        FeatureScaler().transform(graphs[0])


def test_target_scaler_inverts_and_round_trips():
    y = np.array([[1.0, 0.0], [10.0, 50.0], [1000.0, 100.0]])
    ts = TargetScaler(["latency_ms", "util_pct"]).fit(y)  # util_pct: log1p, can be 0
    assert ts.transforms == ["log", "log1p"]
    z = ts.transform(y)
    assert np.allclose(z.mean(0), 0.0) and np.allclose(z.std(0), 1.0)
    assert np.allclose(ts.inverse_transform(z), y)
    back = TargetScaler.from_dict(json.loads(json.dumps(ts.to_dict())))
    assert np.array_equal(back.inverse_transform(z), ts.inverse_transform(z))
    with pytest.raises(PerfseerError, match="values <= 0"):
        TargetScaler(["latency_ms"]).fit([1.0, 0.0])
    with pytest.raises(PerfseerError, match=r"expected \[N, 2\]"):
        ts.transform(np.ones((3, 3)))
