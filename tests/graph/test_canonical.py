"""Exporter-specific spellings are rewritten to the canonical (dynamo exporter's) form."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import perfseer
from helpers import make_model
from perfseer.graph import canonical


def ops(pg):
    return list(pg.op_types)


def test_flatten_and_global_average_pool():
    # legacy: GlobalAveragePool -> Flatten; canonical: ReduceMean(axes 2, 3, keepdims) -> Reshape
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["y"], name="flat")]
    pg = perfseer.extract(make_model(nodes, {"x": ("N", 8, 4, 4)}, ["y"]), batch=2)
    assert ops(pg) == ["ReduceMean", "Reshape"]
    axes = pg.graph.tensors[pg.graph.nodes[0].inputs[1]].value
    assert axes.tolist() == [2, 3] and pg.graph.nodes[0].attrs == {"keepdims": 1}
    assert pg.flops == 2 * 8 * 4 * 4  # one FLOP per input element, as for the pool
    assert pg.graph.tensors["y"].shape == (2, 8)
    assert pg.with_batch(5).graph.tensors["y"].shape == (5, 8)


@pytest.mark.parametrize("half_first", [False, True])
def test_erf_gelu_becomes_one_gelu(half_first):
    # 0.5 * x * (1 + erf(x / sqrt(2))), as opset-17 exporters write F.gelu
    consts = {"s2": np.array(2 ** 0.5, np.float32), "one": np.array(1.0, np.float32),
              "half": np.array(0.5, np.float32)}
    nodes = [helper.make_node("Div", ["x", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"])]
    if half_first:
        nodes += [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "a"], ["y"])]
    else:
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])]
    pg = perfseer.extract(make_model(nodes, {"x": ("N", 16)}, ["y"], consts))
    assert ops(pg) == ["Gelu"]
    assert pg.graph.nodes[0].inputs == ("x",) and pg.graph.nodes[0].outputs == ("y",)
    assert pg.params == 0  # the constants went with the pattern


def test_erf_that_is_not_gelu_is_left_alone():
    nodes = [helper.make_node("Div", ["x", "c"], ["d"]), helper.make_node("Erf", ["d"], ["y"])]
    pg = perfseer.extract(make_model(nodes, {"x": ("N", 16)}, ["y"], {"c": np.array(3.0, np.float32)}))
    assert ops(pg) == ["Div", "Erf"]


def test_canonical_graphs_are_unchanged(monkeypatch):
    # the bundled graphs were exported by perfseer's own (canonical) frontend: nothing to rewrite
    pg = perfseer.extract("example:resnet18")
    monkeypatch.setattr(canonical, "ENABLED", False)
    raw = perfseer.extract("example:resnet18")
    assert ops(pg) == ops(raw) and np.array_equal(pg.x, raw.x) and np.array_equal(pg.u, raw.u)
