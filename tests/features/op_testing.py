"""Shared helpers of the one-node operator cost tests (``test_ops_<family>.py``).

Each ``test_ops_<family>.py`` lists the op types it tests in a module-level ``OPS``;
``test_ops_coverage.py`` checks that together they are exactly the registered op types.

Most tests build a one-node ONNX model and extract it (``helpers.one_node``).  A few operators
cannot come out of ONNX extraction as device nodes: their output shape is data-dependent
(``NonZero``, ``Compress``), not a tensor (``Optional``, ``SequenceConstruct``), unknown to ONNX
shape inference (ORT's ``SimplifiedLayerNormalization``, and ``GroupNormalization``, whose ONNX
schema has no shape inference; the extractor re-runs shape inference and drops declared
``value_info``, so declaring the output shape does not help), or always folded (``Shape``, ``Size``, ``Constant``,
``ConstantOfShape``, ``Range`` with static inputs).  Their cost functions are checked on a
hand-built one-node IR graph (:func:`ir_one_node`), which is what the extractor would produce.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import feature
from perfseer.features.perfgraph import PerfGraph, build_perfgraph
from perfseer.graph.ir import Graph, Node, Tensor, TensorKind

F32 = 4  # bytes per float32 element
F16 = 2
I64 = 8
I32 = 4
BOOL = 1


def check(pg: PerfGraph, op_type: str, node: int = 0, **expected: float) -> None:
    """Assert that node ``node`` is a covered ``op_type`` node with the given features.

    ``covered`` matters: a cost function that raises is silently replaced by the generic
    estimate, so without it a crash would only show up as wrong numbers.
    """
    assert pg.op_types[node] == op_type
    assert bool(pg.covered[node]), f"{op_type} fell back to the generic cost estimate"
    got = {name: feature(pg, name, node) for name in expected}
    assert got == pytest.approx(expected, rel=1e-12, abs=0)


def tensor(name: str, shape, dtype: str = "float32", kind: TensorKind = TensorKind.ACTIVATION,
           value=None) -> Tensor:
    """An IR tensor (no batch scaling: hand-built graphs are used at their own size)."""
    shape = tuple(int(d) for d in shape)
    return Tensor(name, dtype, shape, (0,) * len(shape), kind, None if value is None else np.asarray(value))


def ir_one_node(op_type: str, inputs: list[Tensor | None], outputs: list[Tensor | None],
                domain: str = "", **attrs) -> PerfGraph:
    """The PerfGraph of a hand-built graph holding one ``op_type`` node.

    ``None`` in ``inputs`` is an absent optional input; ``None`` in ``outputs`` is an output that
    is not a tensor (an optional, a sequence).
    """
    tensors = {t.name: t for t in (*inputs, *outputs) if t is not None}
    node = Node("node", op_type, domain, tuple(t.name if t else "" for t in inputs),
                tuple(t.name if t else f"out{i}" for i, t in enumerate(outputs)), dict(attrs))
    graph = Graph("ir", (node,), tensors,
                  inputs=tuple(t.name for t in inputs if t is not None and t.kind is TensorKind.INPUT),
                  outputs=tuple(t.name for t in outputs if t is not None), batch_size=1, opset=20)
    return build_perfgraph(graph)
