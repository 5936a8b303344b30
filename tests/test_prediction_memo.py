"""A Predictor keeps the network's answers for graphs it has seen (keyed by their content): a
repeated call gives the same rows without running the network, a changed graph runs it again."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import perfseer
from perfseer.runtime.predictor import _graphs_key, load_predictor


@pytest.fixture(scope="module")
def cell():
    return perfseer.extract("nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|skip_connect~1|+|avg_pool_3x3~0|none~1|nor_conv_1x1~2|",
                            batch=1)


def test_repeated_prediction_is_remembered_and_equal(cell, monkeypatch):
    p = load_predictor("nb201-gpus.infer")
    p.__dict__.get("_memo", {}).clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = p.predict_bound(cell, [1, 64])
        calls = []
        monkeypatch.setattr(type(p), "_predict_with_embeddings",
                            lambda self, graphs: calls.append(1) or (_ for _ in ()).throw(AssertionError("ran")))
        second = p.predict_bound(cell, [1, 64])  # from the memo: the network is not run
        assert not calls
        assert [r["value"] for r in first] == [r["value"] for r in second]
        assert [r["interval"] for r in first] == [r["interval"] for r in second]
        pair = [cell.to_pyg(), cell.with_batch(64).to_pyg()]  # the graphs of the calls above
        values, _ = p.predict_with_embeddings(pair)
        values[:] = -1.0  # the caller's copy, not the memo's
        again, _ = p.predict_with_embeddings(pair)
        assert (again > 0).all()
        with pytest.raises(AssertionError, match="ran"):  # another batch size is another graph: run
            p.predict_bound(cell, [8])


def test_graph_key_follows_the_content(cell):
    a, b = cell.to_pyg(), cell.to_pyg()
    assert _graphs_key(1, [a]) == _graphs_key(1, [b])
    assert _graphs_key(1, [a]) != _graphs_key(2, [a])  # another network
    b.x = b.x.clone()
    b.x[0, 0] += 1.0
    assert _graphs_key(1, [a]) != _graphs_key(1, [b])
    b.odd = object()  # an attribute it cannot key: nothing is remembered
    assert _graphs_key(1, [b]) is None


def test_spec_transfer_warm_equals_cold():
    from perfseer.runtime.transfer import load_transfer

    pg = perfseer.extract("example:resnet18", batch=1)
    t = load_transfer()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in t._loaded.values():
            p.__dict__.get("_memo", {}).clear()
        cold = t.predict(pg, batch=[1, 16], device="a100-40gb", precision="amp-fp16")
        warm = t.predict(pg, batch=[1, 16], device="a100-40gb", precision="amp-fp16")
    assert [r["value"] for r in cold] == [r["value"] for r in warm]
    assert all(np.isfinite(r["value"]) for r in warm if r["value"] is not None)


def test_long_graph_lists_are_not_kept(cell):
    from perfseer.runtime.predictor import MEMO_MAX_GRAPHS

    p = load_predictor("nb201-gpus.infer")
    p.__dict__.get("_memo", {}).clear()
    graphs = [cell.to_pyg()] * (MEMO_MAX_GRAPHS + 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values, _ = p.predict_with_embeddings(graphs)
    assert not p._memo and np.allclose(values, values[0])


def test_forget_predictions_empties_every_memo(cell):
    from perfseer.runtime.predictor import forget_predictions

    p = load_predictor("nb201-gpus.infer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p.predict_bound(cell, [1])
    assert p._memo
    forget_predictions()
    assert not p._memo
