"""Node, edge and global features of a small graph, computed by hand."""

import numpy as np
import pytest
from onnx import helper

import perfseer
from perfseer.features import schema
from helpers import make_model


def _two_branch():
    c = helper.make_node
    nodes = [c("Conv", ["x", "w"], ["a"], kernel_shape=[1, 1]),
             c("Relu", ["a"], ["b"]),
             c("Sigmoid", ["a"], ["s"]),
             c("Add", ["b", "s"], ["y"])]
    return make_model(nodes, {"x": (1, 2, 4, 4)}, ["y"], {"w": np.ones((3, 2, 1, 1), np.float32)})


def test_features_by_hand():
    pg = perfseer.extract(_two_branch())
    assert pg.op_types == ("Conv", "Relu", "Sigmoid", "Add")
    # edges: conv->relu, conv->sigmoid, relu->add, sigmoid->add
    assert sorted(map(tuple, pg.edge_index.T.tolist())) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    e = dict(zip(schema.EDGE_FEATURES, pg.edge_attr[0]))
    assert e["bytes"] == 3 * 16 * 4 and e["elements"] == 48
    assert (e["rank"], e["batch"], e["channels"], e["height"], e["width"], e["tokens"]) == (4, 1, 3, 4, 4, 16)
    flops = np.array([2 * 48 * 2, 48, 4 * 48, 48], float)
    col = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
    np.testing.assert_array_equal(pg.x[:, col["flops"]], flops)
    mac = np.array([(32 + 6 + 48) * 4, 96 * 4, 96 * 4, 144 * 4], float)
    np.testing.assert_array_equal(pg.x[:, col["memory_access_bytes"]], mac)
    np.testing.assert_allclose(pg.x[:, col["arithmetic_intensity"]], flops / mac)
    np.testing.assert_allclose(pg.x[:, col["flops_share"]], flops / flops.sum())
    np.testing.assert_allclose(pg.x[:, col["weight_share"]], [1, 0, 0, 0])
    u = dict(zip(schema.GLOBAL_FEATURES, pg.u))
    assert u["num_nodes"] == 4 and u["num_edges"] == 4
    assert u["density"] == pytest.approx(4 / (4 * 3))
    assert u["flops_total"] == flops.sum() and u["flops_max"] == flops.max()
    assert u["flops_median"] == np.median(flops) and u["flops_mean"] == flops.mean()
    assert u["memory_access_total"] == mac.sum()
    assert u["weight_total"] == 24 and u["params"] == 6 and u["batch_size"] == 1
    assert u["edge_bytes_mean"] == 192
    assert u["arithmetic_intensity"] == pytest.approx(flops.sum() / mac.sum())


def test_token_tensor_shape_features():
    c = helper.make_node
    nodes = [c("MatMul", ["x", "w"], ["h"]), c("Relu", ["h"], ["y"])]
    pg = perfseer.extract(make_model(nodes, {"x": (2, 197, 64)}, ["y"], {"w": np.zeros((64, 32), np.float32)}))
    e = dict(zip(schema.EDGE_FEATURES, pg.edge_attr[0]))
    # (B, N, C): channels = C, height = tokens = N, width 1 - not NCHW padding
    assert (e["rank"], e["batch"], e["channels"], e["height"], e["width"], e["tokens"]) == (3, 2, 32, 197, 1, 197)


def test_pyg_round_trip(tmp_path):
    from perfseer.features.pyg import load_graphs, save_graphs

    pgs = [perfseer.extract(_two_branch()), perfseer.extract("example:resnet18", batch=4)]
    path = tmp_path / "g.safetensors"
    save_graphs(pgs, path, meta=[{"i": 0}, {"i": 1}])
    datas, meta = load_graphs(path)
    assert meta == [{"i": 0}, {"i": 1}]
    for pg, d in zip(pgs, datas):
        ref = pg.to_pyg()
        for key in ("x", "edge_index", "edge_attr", "u", "op_type"):
            assert (getattr(ref, key) == getattr(d, key)).all()
        assert d.x.shape[1] == len(schema.NODE_FEATURES) and d.u.shape == (1, len(schema.GLOBAL_FEATURES))
    assert not any(p.suffix in (".pkl", ".pt") for p in tmp_path.iterdir())


def test_load_rejects_other_schema(tmp_path):
    from safetensors.numpy import save_file

    from perfseer.errors import SchemaError
    from perfseer.features.pyg import load_graphs

    bad = tmp_path / "bad.safetensors"
    save_file({"x": np.zeros((1, 1), np.float32)}, str(bad), metadata={"format": "perfseer.graphs",
                                                                          "schema": '{"version": "0.1"}'})
    with pytest.raises(SchemaError, match="schema 0.1"):
        load_graphs(bad)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(SchemaError):
        load_graphs(junk)
