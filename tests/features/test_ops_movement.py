"""Data movement (perfseer.features.ops.movement): 0 FLOPs, the cost is memory traffic.

memory = input bytes + static bytes (shape vectors, indices, weights) + output bytes, except
Gather / GatherElements / GatherND, which read only the output's worth of their data tensor (plus
the indices).  NonZero: 1 FLOP per input element.  axis_size: the length of the axis an op works
along (the output's for Concat), with ONNX's default axis where the attribute is omitted.

How each op is tested:
* device nodes fed by a graph input: most ops, and EyeLike (it reads only its input's shape,
  but perfseer keeps it as a device op);
* always folded when their inputs are static, which extraction always makes them, since every input
  shape is bound: Shape, Size (they read only a shape), Constant (no inputs), ConstantOfShape and
  Range (fed by an activation their output shape would be data-dependent, which extraction rejects).
  Their folding is checked on an extracted model, their cost functions on hand-built IR nodes;
* data-dependent or non-tensor outputs that ONNX shape inference cannot shape (NonZero, Compress,
  Optional, SequenceConstruct): hand-built IR nodes only.
"""

import numpy as np
import pytest
from onnx import helper

import perfseer
from helpers import make_model, one_node
from op_testing import BOOL, F32, I64, check, ir_one_node, tensor
from perfseer.graph.ir import TensorKind

OPS = ["Reshape", "Transpose", "Concat", "Split", "Slice", "Pad", "Tile", "Expand", "Identity", "Flatten",
       "Squeeze", "Unsqueeze", "DepthToSpace", "SpaceToDepth", "ScatterND", "ScatterElements", "Scatter",
       "Trilu", "OneHot", "Shape", "Size", "ConstantOfShape", "Range", "EyeLike", "Compress",
       "ReverseSequence", "CenterCropPad", "Col2Im", "Constant", "Optional", "SequenceConstruct",
       "Gather", "GatherElements", "GatherND", "NonZero"]


@pytest.fixture(autouse=True)
def as_written(monkeypatch):
    """Cost functions of Flatten/GlobalAveragePool as written: canonicalisation would rename them
    (tests/graph/test_canonical.py tests that)."""
    monkeypatch.setattr("perfseer.graph.canonical.ENABLED", False)


def i64(*v):
    return np.array(v, np.int64)


def zeros(*shape):
    return np.zeros(shape, np.float32)


# -- device nodes fed by an activation -----------------------------------------------------------
# (op, graph inputs, initializers, attributes, opset, bytes read (inputs + static), bytes written,
#  axis_size)
CASES = [
    # X (2, 3, 4) -> (2, 12) with shape [0, 12] (int64, 2 elements)
    ("Reshape", {"x": (2, 3, 4)}, {"shape": i64(0, 12)}, {}, 20, 24 * F32 + 2 * I64, 24 * F32, 0),
    ("Transpose", {"x": (2, 3, 4)}, {}, {"perm": [0, 2, 1]}, 20, 24 * F32, 24 * F32, 0),
    # (2, 3, 4) ++ (2, 5, 4) on axis 1 -> (2, 8, 4): axis_size is the output's 8
    ("Concat", {"a": (2, 3, 4), "b": (2, 5, 4)}, {}, {"axis": 1}, 20, (24 + 40) * F32, 64 * F32, 8),
    # (2, 3, 4) split [1, 3] on axis 2 -> (2, 3, 1) and (2, 3, 3)
    ("Split", {"x": (2, 3, 4)}, {"split": i64(1, 3)}, {"axis": 2}, 20, 24 * F32 + 2 * I64, (6 + 18) * F32, 4),
    # X (2, 6, 4)[:, 1:5] -> (2, 4, 4): starts, ends, axes (1 int64 each)
    ("Slice", {"x": (2, 6, 4)}, {"starts": i64(1), "ends": i64(5), "axes": i64(1)}, {}, 20,
     48 * F32 + 3 * I64, 32 * F32, 0),
    # X (2, 3, 4) padded by 1 + 1 on the last axis -> (2, 3, 6); pads: 6 int64
    ("Pad", {"x": (2, 3, 4)}, {"pads": i64(0, 0, 1, 0, 0, 1)}, {}, 20, 24 * F32 + 6 * I64, 36 * F32, 0),
    # X (2, 3) tiled (1, 2) -> (2, 6)
    ("Tile", {"x": (2, 3)}, {"repeats": i64(1, 2)}, {}, 20, 6 * F32 + 2 * I64, 12 * F32, 0),
    # X (2, 1, 4) expanded to (1, 3, 4) -> (2, 3, 4)
    ("Expand", {"x": (2, 1, 4)}, {"shape": i64(1, 3, 4)}, {}, 20, 8 * F32 + 3 * I64, 24 * F32, 0),
    ("Identity", {"x": (2, 3, 4)}, {}, {}, 20, 24 * F32, 24 * F32, 0),
    # default axis 1: (2, 3, 4) -> (2, 12); axis_size = 3
    ("Flatten", {"x": (2, 3, 4)}, {}, {}, 20, 24 * F32, 24 * F32, 3),
    ("Squeeze", {"x": (2, 1, 4)}, {"axes": i64(1)}, {}, 20, 8 * F32 + I64, 8 * F32, 0),
    ("Unsqueeze", {"x": (2, 4)}, {"axes": i64(1)}, {}, 20, 8 * F32 + I64, 8 * F32, 0),
    # (1, 8, 2, 2) <-> (1, 2, 4, 4), block 2
    ("DepthToSpace", {"x": (1, 8, 2, 2)}, {}, {"blocksize": 2}, 20, 32 * F32, 32 * F32, 0),
    ("SpaceToDepth", {"x": (1, 2, 4, 4)}, {}, {"blocksize": 2}, 20, 32 * F32, 32 * F32, 0),
    # data (2, 5), indices (1, 2) int64, updates (1,) float
    ("ScatterND", {"x": (2, 5)}, {"idx": i64([0, 1]), "upd": zeros(1)}, {}, 20,
     10 * F32 + 2 * I64 + 1 * F32, 10 * F32, 0),
    # data (2, 5), indices (2, 2) int64, updates (2, 2) float, along axis 1 (length 5)
    ("ScatterElements", {"x": (2, 5)}, {"idx": np.zeros((2, 2), np.int64), "upd": zeros(2, 2)}, {"axis": 1}, 20,
     10 * F32 + 4 * I64 + 4 * F32, 10 * F32, 5),
    # the deprecated Scatter (opset 10) is ScatterElements
    ("Scatter", {"x": (2, 5)}, {"idx": np.zeros((2, 2), np.int64), "upd": zeros(2, 2)}, {"axis": 1}, 10,
     10 * F32 + 4 * I64 + 4 * F32, 10 * F32, 5),
    ("Trilu", {"x": (2, 4, 4)}, {}, {}, 20, 32 * F32, 32 * F32, 0),
    # indices (2, 3) int64, depth 5 (int64 scalar), values (2,) float -> (2, 3, 5) float
    ("OneHot", {"i": ((2, 3), np.int64)}, {"depth": np.array(5, np.int64), "values": zeros(2)}, {}, 20,
     6 * I64 + I64 + 2 * F32, 30 * F32, 0),
    # identity matrix shaped like X (3, 3)
    ("EyeLike", {"x": (3, 3)}, {}, {}, 20, 9 * F32, 9 * F32, 0),
    # X (2, 6, 6) cropped / padded to (4, 8) on axes 1, 2 -> (2, 4, 8)
    ("CenterCropPad", {"x": (2, 6, 6)}, {"shape": i64(4, 8)}, {"axes": [1, 2]}, 20,
     72 * F32 + 2 * I64, 64 * F32, 0),
    # columns (1, 3 * 2 * 2, 3 * 3) folded into a (1, 3, 4, 4) image with 2 x 2 blocks
    ("Col2Im", {"x": (1, 12, 9)}, {"image": i64(4, 4), "block": i64(2, 2)}, {}, 20,
     108 * F32 + 4 * I64, 48 * F32, 0),
    # X (2, 5, 3) reversed along time axis 1 per batch row; sequence_lens (2,) int64
    ("ReverseSequence", {"x": (2, 5, 3)}, {"lens": i64(5, 3)}, {"batch_axis": 0, "time_axis": 1}, 20,
     30 * F32 + 2 * I64, 30 * F32, 0),
]


@pytest.mark.parametrize("op, inputs, inits, attrs, opset, read, written, axis_size", CASES,
                         ids=[c[0] for c in CASES])
def test_movement_device_node(op, inputs, inits, attrs, opset, read, written, axis_size):
    pg = one_node(op, inputs, inits, n_outputs=2 if op == "Split" else 1, opset=opset, **attrs)
    check(pg, op, flops=0, macs=0, output_bytes=written, memory_access_bytes=read + written,
          axis_size=axis_size)


# -- gathers: only what is gathered is read ------------------------------------------------------
def test_gather_embedding_reads_only_gathered_rows():
    # table (10, 4) float (a parameter), ids (2, 3) int64 -> (2, 3, 4); default axis 0 (10 rows)
    pg = one_node("Gather", {"ids": ((2, 3), np.int64)}, {"table": zeros(10, 4)}, input_order=["table", "ids"])
    out = 2 * 3 * 4 * F32
    check(pg, "Gather", flops=0, axis_size=10, weight_bytes=10 * 4 * F32, params=10 * 4,
          input_bytes=6 * I64, output_bytes=out, memory_access_bytes=6 * I64 + out + out)


def test_gather_activation_with_static_indices():
    # X (2, 10, 3), indices [0, 2] (int64 initializer) on axis 1 -> (2, 2, 3); the indices are
    # read once: gathered data + indices + output
    pg = one_node("Gather", {"x": (2, 10, 3)}, {"idx": i64(0, 2)}, axis=1)
    out = 2 * 2 * 3 * F32
    check(pg, "Gather", flops=0, axis_size=10, memory_access_bytes=(out + 2 * I64) + out)


def test_gather_elements():
    # data (2, 5), indices (2, 3) int64 (activations) on axis 1 -> (2, 3)
    pg = one_node("GatherElements", {"x": (2, 5), "idx": ((2, 3), np.int64)}, axis=1)
    out = 2 * 3 * F32
    check(pg, "GatherElements", flops=0, axis_size=5, memory_access_bytes=(out + 6 * I64) + out)


def test_gather_nd():
    # data (2, 4, 3), indices (2, 1) int64, batch_dims 1: one row of 3 per batch -> (2, 3)
    pg = one_node("GatherND", {"x": (2, 4, 3), "idx": ((2, 1), np.int64)}, batch_dims=1)
    out = 2 * 3 * F32
    check(pg, "GatherND", flops=0, memory_access_bytes=(out + 2 * I64) + out)


# -- always folded during extraction -------------------------------------------------------------
@pytest.mark.parametrize("op", ["Shape", "Size"])
def test_shape_and_size_fold(op):
    pg = one_node(op, {"x": (2, 3, 4)})
    assert pg.num_nodes == 0 and pg.graph.folded_nodes == 1


def test_constant_folds_into_a_weight():
    # Constant (2,) float -> Add: the constant is folded and read by Add as a weight
    nodes = [helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    pg = perfseer.extract(make_model(nodes, {"x": (2, 2)}, ["y"]))
    assert pg.op_types == ("Add",) and pg.graph.folded_nodes == 1
    check(pg, "Add", weight_bytes=2 * F32, memory_access_bytes=(4 + 2 + 4) * F32)


def test_constant_of_shape_and_range_fold():
    # Shape(x) -> ConstantOfShape -> Add(x, .) and Range(0, 4, 1) -> Add(., .): only the Adds remain
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"]),
             helper.make_node("Add", ["x", "c"], ["y"], name="add"),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["y", "r"], ["z"], name="add2")]
    inits = {"start": np.array(0.0, np.float32), "limit": np.array(4.0, np.float32),
             "delta": np.array(1.0, np.float32)}
    pg = perfseer.extract(make_model(nodes, {"x": (2, 4)}, ["z"], inits))
    assert pg.op_types == ("Add", "Add") and pg.graph.folded_nodes == 3
    # the folded (2, 4) and (4,) float tensors are read as weights
    check(pg, "Add", 0, weight_bytes=8 * F32, memory_access_bytes=(8 + 8 + 8) * F32)
    check(pg, "Add", 1, weight_bytes=4 * F32, memory_access_bytes=(8 + 4 + 8) * F32)


# -- cost functions of ops extraction never leaves as device nodes (hand-built IR) ----------------
def test_shape_size_cost_functions():
    x = tensor("x", (2, 3, 4))
    pg = ir_one_node("Shape", [x], [tensor("s", (3,), "int64")])
    check(pg, "Shape", flops=0, macs=0, memory_access_bytes=24 * F32 + 3 * I64)
    pg = ir_one_node("Size", [x], [tensor("n", (), "int64")])
    check(pg, "Size", flops=0, memory_access_bytes=24 * F32 + I64)


def test_constant_cost_function():
    pg = ir_one_node("Constant", [], [tensor("c", (2, 3))], value_floats=[0.0] * 6)
    check(pg, "Constant", flops=0, memory_access_bytes=6 * F32)


def test_constant_of_shape_and_range_cost_functions():
    pg = ir_one_node("ConstantOfShape", [tensor("s", (2,), "int64")], [tensor("y", (4, 5))])
    check(pg, "ConstantOfShape", flops=0, memory_access_bytes=2 * I64 + 20 * F32)
    scalar = [tensor(n, (), "int64") for n in ("start", "limit", "delta")]
    pg = ir_one_node("Range", scalar, [tensor("r", (7,), "int64")])
    check(pg, "Range", flops=0, memory_access_bytes=3 * I64 + 7 * I64)


def test_nonzero():
    # data-dependent output (2, count): one compare per input element
    pg = ir_one_node("NonZero", [tensor("x", (2, 3, 4))], [tensor("y", (3, 10), "int64")])
    check(pg, "NonZero", flops=2 * 3 * 4, macs=0, memory_access_bytes=24 * F32 + 30 * I64)


def test_compress():
    # X (2, 4), condition (4,) bool on axis 1 keeping 3 columns -> (2, 3)
    cond = tensor("c", (4,), "bool", TensorKind.BUFFER, np.array([True, False, True, True]))
    pg = ir_one_node("Compress", [tensor("x", (2, 4)), cond], [tensor("y", (2, 3))], axis=1)
    check(pg, "Compress", flops=0, axis_size=4, memory_access_bytes=8 * F32 + 4 * BOOL + 6 * F32)


@pytest.mark.parametrize("op, n_inputs", [("Optional", 1), ("SequenceConstruct", 2)])
def test_optional_and_sequence(op, n_inputs):
    # outputs are an optional / a sequence, not tensors: only the inputs' bytes count
    inputs = [tensor(f"x{i}", (2, 3)) for i in range(n_inputs)]
    pg = ir_one_node(op, inputs, [None])
    check(pg, op, flops=0, output_bytes=0, memory_access_bytes=n_inputs * 6 * F32)
