"""A seeded fuzz corpus of malformed ONNX files, and the worker harness that runs it.

The corpus is not stored: it is generated, identically for a given seed, from valid seeds

* the example graphs bundled with perfseer (``src/perfseer/examples``),
* the model files of ONNX's backend test data shipped inside the ``onnx`` package
  (``simple``, ``pytorch-operator``, ``pytorch-converted``, ``real``, ``light``),
* small models built here: Range feeding a broadcast, Expand/Tile/ConstantOfShape from shape
  constants, sequence ops, and model-zoo style files of opsets 3-9 with legacy attributes,

by byte flips, truncation and protobuf edits (absurd attribute values, wrong dtypes, dangling
inputs, cycles, duplicate outputs, unknown domains, opset 0, constants whose data disagree with
their dims, huge ``Range``/``Expand``/``ConstantOfShape`` lengths, sequence positions, absurd
input dims).  :class:`Harness` keeps a worker process (address space limited by
``resource.setrlimit(RLIMIT_AS)``, ``TIME_LIMIT`` seconds per case), replaced when it dies or hangs;
:mod:`benchmarks.lib.fuzz_api` adds the seed kinds of issue 38 and runs every case through
``perfseer.predict`` and ``perfseer.memory`` (``python -m benchmarks run fuzz``; a sample in
``tests/test_fuzz.py``).
"""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 2 << 30  # bytes of address space for the worker (torch alone maps about 1.1 GB)
TIME_LIMIT = 30.0  # seconds per file, wall clock (the worker shares 2 cores with other jobs)
ABSURD_MS = 1e6  # a predicted latency above this (16 minutes per step) is garbage
GENERIC = ("cannot be determined",)  # errors that do not name the real cause

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
_SEED_DIRS = ("simple", "pytorch-operator", "pytorch-converted", "real", "light")


# -- seeds --------------------------------------------------------------------------------------

def _vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=None, opset=17, ir=None):
    g = helper.make_graph(nodes, "seed", inputs, [_vi(o, 0) for o in outputs],
                          initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    if ir is not None:
        m.ir_version = ir
    return m


def built_seeds() -> dict[str, onnx.ModelProto]:
    """Small models exercising the paths the audit found unsafe."""
    i64 = lambda *v: np.asarray(v[0] if len(v) == 1 else v, np.int64)  # noqa: E731
    x = _vi("x", shape=["N", 3, 16, 16])
    seeds = {}
    seeds["conv_net"] = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], strides=[1, 1],
                          pads=[1, 1, 1, 1], dilations=[1, 1], group=1),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("Flatten", ["p"], ["f"], name="flat", axis=1),
         helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1)],
        [x], ["y"], {"w": np.zeros((8, 3, 3, 3), np.float32), "b": np.zeros(8, np.float32),
                     "fw": np.zeros((10, 512), np.float32), "fb": np.zeros(10, np.float32)})
    # Range -> broadcast: an outer sum of two aranges, reduced and added to the input.
    seeds["range_broadcast"] = _model(
        [helper.make_node("Range", ["s0", "l0", "d0"], ["r0"], name="range0"),
         helper.make_node("Range", ["s1", "l1", "d1"], ["r1"], name="range1"),
         helper.make_node("Unsqueeze", ["r0", "ax1"], ["r0c"], name="col"),
         helper.make_node("Add", ["r0c", "r1"], ["outer"], name="outer"),
         helper.make_node("ReduceSum", ["outer"], ["tot"], name="total", keepdims=0),
         helper.make_node("Cast", ["tot"], ["totf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("Add", ["x", "totf"], ["y"], name="add")],
        [x], ["y"], {"s0": i64(0), "l0": i64(64), "d0": i64(1), "s1": i64(0), "l1": i64(64), "d1": i64(1),
                     "ax1": np.asarray([1], np.int64)})
    seeds["expand_tile"] = _model(
        [helper.make_node("ConstantOfShape", ["shp"], ["cs"], name="fill",
                          value=numpy_helper.from_array(np.ones(1, np.float32))),
         helper.make_node("Expand", ["cs", "eshp"], ["ex"], name="expand"),
         helper.make_node("Tile", ["ex", "reps"], ["tl"], name="tile"),
         helper.make_node("ReduceMean", ["tl"], ["m"], name="mean", keepdims=0),
         helper.make_node("Mul", ["x", "m"], ["y"], name="mul")],
        [x], ["y"], {"shp": i64(4, 1), "eshp": i64(4, 8), "reps": i64(2, 2)})
    seeds["reshape_chain"] = _model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
         helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
         helper.make_node("Concat", ["n1", "rest"], ["tshape"], name="concat", axis=0),
         helper.make_node("Reshape", ["x", "tshape"], ["y"], name="reshape")],
        [x], ["y"], {"zero": i64(0), "ax0": np.asarray([0], np.int64), "rest": np.asarray([-1], np.int64)})
    seeds["sequence_split"] = _model(
        [helper.make_node("SplitToSequence", ["x", "two"], ["seq"], name="split", axis=1),
         helper.make_node("SequenceAt", ["seq", "zero"], ["a"], name="at0"),
         helper.make_node("SequenceAt", ["seq", "one"], ["b"], name="at1"),
         helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        [_vi("x", shape=["N", 4, 8, 8])], ["y"], {"two": i64(2, 2), "zero": i64(0), "one": i64(1)})
    seeds["sequence_concat"] = _model(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"),
         helper.make_node("Sigmoid", ["x"], ["b"], name="sig"),
         helper.make_node("SequenceConstruct", ["a", "b"], ["seq"], name="construct"),
         helper.make_node("SequenceInsert", ["seq", "x"], ["seq2"], name="insert"),
         helper.make_node("ConcatFromSequence", ["seq2"], ["y"], name="cat", axis=1)],
        [x], ["y"])
    seeds["sequence_length"] = _model(
        [helper.make_node("SequenceConstruct", ["x", "x"], ["seq"], name="construct"),
         helper.make_node("SequenceLength", ["seq"], ["n"], name="len"),
         helper.make_node("Cast", ["n"], ["nf"], name="cast", to=TensorProto.FLOAT),
         helper.make_node("SequenceErase", ["seq", "zero"], ["seq1"], name="erase"),
         helper.make_node("SequenceAt", ["seq1", "zero"], ["a"], name="at"),
         helper.make_node("Mul", ["a", "nf"], ["y"], name="mul")],
        [x], ["y"], {"zero": i64(0)})
    for opset in (3, 6, 8, 9):
        seeds[f"legacy_opset{opset}"] = legacy_model(opset)
    return seeds


def legacy_model(opset: int) -> onnx.ModelProto:
    """A model-zoo style classifier of an old opset: Conv, BatchNormalization with ``spatial``,
    Mul/Add with legacy ``broadcast``/``axis`` (opsets < 7), Dropout with ``ratio`` (and
    ``is_test`` before opset 7), Reshape with a ``shape`` attribute (opsets < 5), Gemm."""
    x = _vi("x", shape=[1, 3, 32, 32])
    old = opset < 7
    bn_attrs = {"epsilon": 1e-5}
    if old:
        bn_attrs.update(is_test=1, spatial=1)
    if opset < 6:
        bn_attrs["consumed_inputs"] = [0, 0, 0, 1, 1]
    scale_attrs = {"broadcast": 1, "axis": 1} if old else {}
    drop_attrs = {"ratio": 0.5, **({"is_test": 1} if old else {})}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "mu", "var"], ["bn"], name="bn1", **bn_attrs),
        helper.make_node("Mul", ["bn", "sc"], ["m"], name="scale", **scale_attrs),
        helper.make_node("Add", ["m", "sh"], ["a"], name="shift", **scale_attrs),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Dropout", ["p"], ["d"], name="drop", **drop_attrs),
    ]
    inits = {"w": np.zeros((16, 3, 3, 3), np.float32), "b": np.zeros(16, np.float32),
             "g": np.ones(16, np.float32), "be": np.zeros(16, np.float32), "mu": np.zeros(16, np.float32),
             "var": np.ones(16, np.float32), "fw": np.zeros((10, 1024), np.float32),
             "fb": np.zeros(10, np.float32)}
    # opsets < 7: per-channel [C] scale broadcast from axis 1; later: [C, 1, 1]
    inits["sc"] = np.ones(16 if old else (16, 1, 1), np.float32)
    inits["sh"] = np.zeros(16 if old else (16, 1, 1), np.float32)
    if opset < 5:
        nodes.append(helper.make_node("Reshape", ["d"], ["f"], name="flat", shape=[1, 1024]))
    else:
        nodes.append(helper.make_node("Reshape", ["d", "fshape"], ["f"], name="flat"))
        inits["fshape"] = np.asarray([1, 1024], np.int64)
    gemm_attrs = {"transB": 1, **({"broadcast": 1} if old else {})}
    nodes.append(helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", **gemm_attrs))
    m = _model(nodes, [x], ["y"], inits, opset=opset, ir=3)
    # old files list their weights among the graph inputs
    m.graph.input.extend(helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inits.items()
                         if v.dtype == np.float32)
    return m


def seed_files() -> dict[str, bytes]:
    """Every seed, by name, as serialised bytes."""
    out: dict[str, bytes] = {}
    for p in sorted((ROOT / "src" / "perfseer" / "examples").glob("*.onnx")):
        out[f"example/{p.stem}"] = p.read_bytes()
    for d in _SEED_DIRS:
        for p in sorted((ONNX_DATA / d).glob("**/*.onnx")):
            out[f"onnx/{d}/{p.parent.name if p.name == 'model.onnx' else p.stem}"] = p.read_bytes()
    for name, m in built_seeds().items():
        out[f"built/{name}"] = m.SerializeToString()
    return out


# -- mutations ----------------------------------------------------------------------------------

ABSURD_INTS = (-1, 0, -(2 ** 40), 2 ** 40, 2 ** 62, -(2 ** 62), 2 ** 31)
INT_ATTRS = ("strides", "pads", "kernel_shape", "group", "dilations", "axis", "axes", "perm", "output_padding",
             "output_shape", "blocksize", "size", "keepdims", "to", "split", "shape", "num_outputs", "k")


def _byte_flip(rng, data):
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b)


def _truncate(rng, data):
    return data[:rng.randrange(1, len(data))]


def _pick_node(rng, m):
    return rng.choice(m.graph.node) if m.graph.node else None


def _absurd_attr(rng, m):
    cands = [(n, a) for n in m.graph.node for a in n.attribute
             if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
    if not cands:
        return False
    n, a = rng.choice(cands)
    v = rng.choice(ABSURD_INTS)
    if a.type == onnx.AttributeProto.INT:
        a.i = v
    else:
        vals = list(a.ints) or [1]
        vals[rng.randrange(len(vals))] = v
        del a.ints[:]
        a.ints.extend(vals)
    return True


def _add_absurd_attr(rng, m):
    n = _pick_node(rng, m)
    if n is None:
        return False
    n.attribute.append(helper.make_attribute(rng.choice(INT_ATTRS), [rng.choice(ABSURD_INTS)] * rng.randint(1, 4)))
    return True


def _wrong_dtype(rng, m):
    target = rng.choice(("init", "input", "cast"))
    bad = rng.choice((0, 8, 9, 99, -3, TensorProto.INT8, TensorProto.COMPLEX64, TensorProto.STRING))
    if target == "init" and m.graph.initializer:
        rng.choice(m.graph.initializer).data_type = bad
    elif target == "input" and m.graph.input:
        rng.choice(m.graph.input).type.tensor_type.elem_type = bad
    else:
        for n in m.graph.node:
            for a in n.attribute:
                if a.name == "to":
                    a.i = bad
                    return True
        return False
    return True


def _dangling(rng, m):
    n = _pick_node(rng, m)
    if n is None or not n.input:
        return False
    n.input[rng.randrange(len(n.input))] = "no_such_tensor"
    return True


def _cycle(rng, m):
    nodes = m.graph.node
    if len(nodes) < 2:
        return False
    i = rng.randrange(len(nodes) - 1)
    j = rng.randrange(i, len(nodes))
    if not nodes[i].input or not nodes[j].output:
        return False
    nodes[i].input[rng.randrange(len(nodes[i].input))] = nodes[j].output[0]
    return True


def _duplicate_output(rng, m):
    nodes = m.graph.node
    if len(nodes) < 2:
        return False
    a, b = rng.sample(range(len(nodes)), 2)
    if not nodes[a].output or not nodes[b].output:
        return False
    nodes[b].output[0] = nodes[a].output[0]
    return True


def _unknown_domain(rng, m):
    n = _pick_node(rng, m)
    if n is None:
        return False
    n.domain = rng.choice(("com.unknown", "ai.onnx.ml", "com.microsoft", "\x00bad"))
    return True


def _opset(rng, m):
    choice = rng.choice(("zero", "huge", "none", "negative"))
    if choice == "none":
        del m.opset_import[:]
        m.opset_import.add(domain="com.other", version=1)
        return True
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = {"zero": 0, "huge": 10 ** 6, "negative": -5}[choice]
    return True


def _bad_constant(rng, m):
    inits = [t for t in m.graph.initializer if math.prod(t.dims) <= 4096]
    if not inits:
        return False
    t = rng.choice(inits)
    how = rng.choice(("dims_up", "dims_down", "dims_huge", "raw_cut", "neg_dim"))
    dims = list(t.dims) or [1]
    if how == "dims_up":
        dims[0] = dims[0] * 2 + 1
    elif how == "dims_down":
        dims[0] = max(dims[0] // 2, 0)
    elif how == "dims_huge":
        dims[0] = 2 ** 40
    elif how == "neg_dim":
        dims[0] = -3
    else:
        if t.raw_data:
            t.raw_data = t.raw_data[: len(t.raw_data) // 2]
        return True
    del t.dims[:]
    t.dims.extend(dims)
    return True


def _huge_shape_value(rng, m):
    """Shape-carrying constants (Range limits, Expand/ConstantOfShape/Tile/Reshape shapes) made
    huge, zero or negative."""
    ints = [t for t in m.graph.initializer
            if t.data_type == TensorProto.INT64 and math.prod(t.dims) <= 8]
    if not ints:
        return False
    t = rng.choice(ints)
    v = numpy_helper.to_array(t).copy()
    flat = v.reshape(-1) if v.size else np.zeros(1, np.int64)
    flat[rng.randrange(flat.size)] = rng.choice((0, -1, 40000, 65536, 2 ** 20, 2 ** 31, 2 ** 40, 2 ** 62))
    t.CopyFrom(numpy_helper.from_array(flat.reshape(v.shape) if v.size else flat, t.name))
    return True


def _input_dims(rng, m):
    if not m.graph.input:
        return False
    vi = rng.choice(m.graph.input)
    dims = vi.type.tensor_type.shape.dim
    if not dims:
        return False
    d = dims[rng.randrange(len(dims))]
    d.Clear()
    d.dim_value = rng.choice((0, -1, 2 ** 31, 2 ** 40, 2 ** 62))
    return True


def _remove_node(rng, m):
    if len(m.graph.node) < 2:
        return False
    del m.graph.node[rng.randrange(len(m.graph.node))]
    return True


def _swap_op(rng, m):
    n = _pick_node(rng, m)
    if n is None:
        return False
    n.op_type = rng.choice(("Conv", "Gemm", "MatMul", "Range", "Expand", "Tile", "ConstantOfShape", "Reshape",
                            "SequenceAt", "SplitToSequence", "ConcatFromSequence", "Loop", "Einsum", "Resize",
                            "TopK", "NonZero", "Unique", "Relu", "NoSuchOp"))
    return True


def _clear_inputs(rng, m):
    del m.graph.input[:]
    return True


def _range_blowup(rng, m):
    """Append ``Range(0, L, step)`` outer-summed with itself onto a graph output, feeding the
    broadcast a huge length or a zero step."""
    if not m.graph.output or not m.graph.node:
        return False
    out = m.graph.output[0].name
    big = rng.choice((30000, 65536, 2 ** 20, 2 ** 31, 2 ** 40))  # outer sums of 0.9e9 elements and up
    step = rng.choice((0, 1, 1, -1))
    for k, v in {"fz_s": 0, "fz_l": big, "fz_d": step, "fz_ax": 1}.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), k))
    m.graph.node.extend([
        helper.make_node("Range", ["fz_s", "fz_l", "fz_d"], ["fz_r"], name="fz_range"),
        helper.make_node("Unsqueeze", ["fz_r", "fz_ax"], ["fz_c"], name="fz_col"),
        helper.make_node("Add", ["fz_c", "fz_r"], ["fz_o"], name="fz_outer"),
        helper.make_node("Cast", ["fz_o"], ["fz_f"], name="fz_cast", to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["fz_f"], ["fz_m"], name="fz_max", keepdims=0),
        helper.make_node("Add", [out, "fz_m"], ["fz_y"], name="fz_add"),
    ])
    m.graph.output[0].name = "fz_y"
    return True


def _constant_blowup(rng, m):
    """Append a constant-only sub-graph whose *output* is huge though its inputs are small (an
    outer MatMul, Pad, OneHot, Resize, Expand), reduced and added onto a graph output."""
    if not m.graph.output or not m.graph.node:
        return False
    out = m.graph.output[0].name
    n = rng.choice((20000, 40000, 65536))
    kind = rng.choice(("matmul", "outer", "pad", "onehot", "resize", "expand"))
    f32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    inits: dict[str, np.ndarray] = {}
    nodes = []
    if kind in ("matmul", "outer"):  # vectors computed from scalars: a file of a few hundred bytes
        inits = {"fzb_s": np.asarray(0.0, np.float32), "fzb_l": np.asarray(float(n), np.float32),
                 "fzb_d": np.asarray(1.0, np.float32), "fzb_a1": np.asarray([1], np.int64),
                 "fzb_a0": np.asarray([0], np.int64)}
        nodes = [helper.make_node("Range", ["fzb_s", "fzb_l", "fzb_d"], ["fzb_r"], name="fzb_range"),
                 helper.make_node("Unsqueeze", ["fzb_r", "fzb_a1"], ["fzb_a"], name="fzb_col"),
                 helper.make_node("Unsqueeze", ["fzb_r", "fzb_a0"], ["fzb_b"], name="fzb_row"),
                 helper.make_node("MatMul" if kind == "matmul" else "Mul", ["fzb_a", "fzb_b"], ["fzb_o"],
                                  name="fzb_outer")]
    elif kind == "pad":
        inits = {"fzb_a": f32([1, 2, 3, 4]), "fzb_p": np.asarray([0, rng.choice((2 ** 31, n * n))], np.int64)}
        nodes = [helper.make_node("Pad", ["fzb_a", "fzb_p"], ["fzb_o"], name="fzb_pad")]
    elif kind == "onehot":
        inits = {"fzb_i": np.arange(64, dtype=np.int64), "fzb_d": np.asarray(n * n, np.int64),
                 "fzb_v": f32([0, 1])}
        nodes = [helper.make_node("OneHot", ["fzb_i", "fzb_d", "fzb_v"], ["fzb_o"], name="fzb_onehot")]
    elif kind == "resize":
        inits = {"fzb_a": np.ones((1, 1, 4, 4), np.float32), "fzb_s": f32([1, 1, n / 4, n / 4])}
        nodes = [helper.make_node("Resize", ["fzb_a", "", "fzb_s"], ["fzb_o"], name="fzb_resize")]
    else:
        inits = {"fzb_a": f32([1.0]), "fzb_s": np.asarray([n, n], np.int64)}
        nodes = [helper.make_node("Expand", ["fzb_a", "fzb_s"], ["fzb_o"], name="fzb_expand")]
    for k, v in inits.items():
        m.graph.initializer.append(numpy_helper.from_array(v, k))
    m.graph.node.extend(nodes + [
        helper.make_node("ReduceMax", ["fzb_o"], ["fzb_m"], name="fzb_max", keepdims=0),
        helper.make_node("Cast", ["fzb_m"], ["fzb_f"], name="fzb_cast", to=TensorProto.FLOAT),
        helper.make_node("Add", [out, "fzb_f"], ["fzb_y"], name="fzb_add")])
    m.graph.output[0].name = "fzb_y"
    return True


def _sequence_edit(rng, m):
    seq_ops = [n for n in m.graph.node if n.op_type.startswith("Sequence") or "Sequence" in n.op_type]
    if not seq_ops:
        return _swap_op(rng, m)
    n = rng.choice(seq_ops)
    if len(n.input) > 1:
        name = f"fz_pos{rng.randrange(1000)}"
        m.graph.initializer.append(numpy_helper.from_array(
            np.asarray(rng.choice((-100, 99, 2 ** 40, 0)), np.int64), name))
        n.input[1] = name
    else:
        n.op_type = rng.choice(("SequenceAt", "SequenceLength", "ConcatFromSequence", "SequenceEmpty"))
    return True


PROTO_MUTATIONS = {
    "absurd_attr": _absurd_attr, "add_absurd_attr": _add_absurd_attr, "wrong_dtype": _wrong_dtype,
    "dangling": _dangling, "cycle": _cycle, "duplicate_output": _duplicate_output,
    "unknown_domain": _unknown_domain, "opset": _opset, "bad_constant": _bad_constant,
    "huge_shape_value": _huge_shape_value, "input_dims": _input_dims, "remove_node": _remove_node,
    "swap_op": _swap_op, "clear_inputs": _clear_inputs, "range_blowup": _range_blowup,
    "sequence_edit": _sequence_edit, "constant_blowup": _constant_blowup,
}
BYTE_MUTATIONS = {"byte_flip": _byte_flip, "truncate": _truncate}


def generate(count: int = 1200, seed: int = 0, seeds: dict[str, bytes] | None = None,
             weight=None) -> list[tuple[str, bytes]]:
    """``count`` mutants ``(name, bytes)``, the same for the same ``seed`` and seed files.

    About one in six is a byte-level mutant (flip or truncation), the rest protobuf edits, one to
    three per file.  ``seeds`` (default :func:`seed_files`) and ``weight(name)`` (default: 4 for
    the built seeds, else 1) choose what is mutated.
    """
    rng = random.Random(seed)
    seeds = seed_files() if seeds is None else seeds
    names = sorted(seeds)
    parsed: dict[str, onnx.ModelProto] = {}
    out = []
    kinds = sorted(PROTO_MUTATIONS)
    # the built seeds target the unsafe paths: give them a larger share
    weights = [(weight or (lambda n: 4 if n.startswith("built/") else 1))(n) for n in names]
    k = 0
    while len(out) < count:
        name = rng.choices(names, weights)[0]
        data = seeds[name]
        if rng.random() < 1 / 6:
            how = rng.choice(sorted(BYTE_MUTATIONS))
            mutant = BYTE_MUTATIONS[how](rng, data)
        else:
            if name not in parsed:
                parsed[name] = onnx.ModelProto.FromString(data)
            m = onnx.ModelProto()
            m.CopyFrom(parsed[name])
            applied = [kind for kind in rng.sample(kinds, rng.randint(1, 3)) if PROTO_MUTATIONS[kind](rng, m)]
            if not applied:
                continue
            how = "+".join(applied)
            mutant = m.SerializeToString()
        out.append((f"{k:05d}-{how}-{name.replace('/', '_')}", mutant))
        k += 1
    return out


# -- the harness --------------------------------------------------------------------------------


class Harness:
    """A worker process that runs files one at a time, replaced when it dies or hangs."""

    def __init__(self, memory: int = MEMORY_LIMIT, time_limit: float = TIME_LIMIT):
        self.memory, self.time_limit = memory, time_limit
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        """Start ``self.proc``, a worker that answers one JSON line per request line
        (:class:`benchmarks.lib.fuzz_api.Harness` runs the entry points users call)."""
        raise NotImplementedError("a subclass starts its worker")

    def _readline(self, timeout: float) -> str | None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        return self.proc.stdout.readline() if ready else None

    def _stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def run(self, path: str | os.PathLike) -> dict:
        if self.proc is None:
            self._start()
        t0 = time.perf_counter()
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        line = self._readline(self.time_limit)
        if line is None:
            self._stop()
            return {"outcome": "hang", "seconds": round(time.perf_counter() - t0, 3)}
        if not line:
            code = self.proc.wait()
            self.proc = None
            return {"outcome": "abort", "detail": f"worker exit code {code}",
                    "seconds": round(time.perf_counter() - t0, 3)}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._stop()


FAILURES = ("uncaught", "abort", "hang", "memory", "absurd")

