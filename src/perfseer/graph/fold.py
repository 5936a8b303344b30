"""Evaluating the small constant sub-graphs that compute shapes, axes and indices.

These sub-graphs (``Shape -> Gather -> Concat -> Reshape`` and friends) do no device work; the
extractor folds them away, and needs their values wherever a later shape depends on them.  Each
common operator has a few lines of numpy here; anything else falls back to ONNX's own reference
implementation (:mod:`onnx.reference`), one node at a time.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

MAX_FOLD_ELEMENTS = 1 << 16  # values larger than this are not computed (only their shapes are kept)

# Elementwise ops whose output shape is the broadcast of their inputs' shapes.
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
                           "GreaterOrEqual", "And", "Or", "Xor", "Where", "Min", "Max", "Sum", "Mean",
                           "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "PRelu"})

# Ops whose output has no more elements than their first input.
_NO_LARGER = frozenset({"Identity", "Cast", "CastLike", "Unsqueeze", "Squeeze", "Slice", "Transpose", "Flatten",
                        "Reshape", "Neg", "Abs", "Not", "Sqrt", "Floor", "Ceil", "Reciprocal", "Sign", "Exp", "Log",
                        "Relu", "Sigmoid", "Tanh", "Erf", "Round", "ReduceProd", "ReduceSum", "ReduceMax",
                        "ReduceMin", "ReduceMean", "ReduceL1", "ReduceL2", "Shape", "Size", "ArgMax", "ArgMin",
                        "Softmax", "LogSoftmax", "IsNaN", "IsInf", "Trilu", "CumSum"})

Kernel = Callable[[list, dict], list]
_KERNELS: dict[str, Kernel] = {}


def _k(*ops: str):
    def deco(fn):
        for op in ops:
            _KERNELS[op] = fn
        return fn
    return deco


def _axes(x: list, attrs: dict, idx: int = 1):
    if len(x) > idx and x[idx] is not None:
        return [int(a) for a in np.asarray(x[idx]).ravel()]
    a = attrs.get("axes")
    return None if a is None else [int(v) for v in a]


@_k("Identity")
def _identity(x, a):
    return [x[0]]


@_k("Cast")
def _cast(x, a):
    return [x[0].astype(helper.tensor_dtype_to_np_dtype(a["to"]))]


@_k("CastLike")
def _castlike(x, a):
    return [x[0].astype(x[1].dtype)]


@_k("Unsqueeze")
def _unsqueeze(x, a):
    out = x[0]
    axes = sorted(ax % (out.ndim + len(_axes(x, a))) for ax in _axes(x, a))
    for ax in axes:
        out = np.expand_dims(out, ax)
    return [out]


@_k("Squeeze")
def _squeeze(x, a):
    axes = _axes(x, a)
    return [np.squeeze(x[0], axis=None if axes is None else tuple(axes))]


@_k("Concat")
def _concat(x, a):
    return [np.concatenate([v for v in x if v is not None and v.size >= 0], axis=a["axis"])]


@_k("Gather")
def _gather(x, a):
    return [np.take(x[0], x[1].astype(np.int64), axis=a.get("axis", 0))]


@_k("Slice")
def _slice(x, a):
    data, starts, ends = x[0], x[1], x[2]
    axes = x[3] if len(x) > 3 and x[3] is not None else np.arange(len(starts))
    steps = x[4] if len(x) > 4 and x[4] is not None else np.ones(len(starts), np.int64)
    sl = [slice(None)] * data.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        sl[int(ax)] = slice(int(s), int(e), int(st))
    return [data[tuple(sl)]]


def _binary(fn):
    def run(x, a):
        return [np.asarray(fn(x[0], x[1]))]
    return run


def _div(p, q):
    if np.issubdtype(p.dtype, np.integer):
        return np.trunc(p / q).astype(p.dtype)
    return p / q


for _op, _fn in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _div,
                 "Equal": np.equal, "Less": np.less, "Greater": np.greater,
                 "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
                 "And": np.logical_and, "Or": np.logical_or, "Pow": np.power}.items():
    _KERNELS[_op] = _binary(_fn)


@_k("Mod")
def _mod(x, a):
    return [np.fmod(x[0], x[1]) if a.get("fmod", 0) else np.mod(x[0], x[1])]


for _op, _fn in {"Neg": np.negative, "Abs": np.abs, "Not": np.logical_not, "Sqrt": np.sqrt,
                 "Floor": np.floor, "Ceil": np.ceil, "Reciprocal": np.reciprocal}.items():
    _KERNELS[_op] = (lambda f: lambda x, a: [f(x[0])])(_fn)


def _variadic_kernel(fn):
    def run(x, a):
        out = x[0]
        for v in x[1:]:
            out = fn(out, v)
        return [out]
    return run


_KERNELS["Min"], _KERNELS["Max"], _KERNELS["Sum"] = (
    _variadic_kernel(np.minimum), _variadic_kernel(np.maximum), _variadic_kernel(np.add))


@_k("Where")
def _where(x, a):
    return [np.where(x[0], x[1], x[2])]


@_k("Range")
def _range(x, a):
    return [np.arange(x[0], x[1], x[2]).astype(x[0].dtype)]


@_k("ConstantOfShape")
def _const_of_shape(x, a):
    value = a.get("value")
    fill = np.zeros(1, np.float32) if value is None else value.ravel()
    return [np.full(tuple(int(d) for d in x[0]), fill[0], dtype=fill.dtype)]


@_k("Reshape")
def _reshape(x, a):
    shape = [int(d) for d in x[1]]
    if not a.get("allowzero", 0):
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x[0].reshape(shape)]


@_k("Expand")
def _expand(x, a):
    target = x[1]
    if target.ndim == 1 and target.dtype.kind in "iu":
        target = tuple(target.tolist())  # the ints the loop below gives, in one call
    else:
        target = tuple(int(d) for d in target)
    out = np.empty(broadcast_pair(x[0].shape, target), x[0].dtype)
    out[...] = x[0]  # np.broadcast_to(...).copy(), without building the broadcast view
    return [out]


def broadcast_pair(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """``np.broadcast_shapes(a, b)`` for two shapes of non-negative sizes, without building numpy
    objects for it (this runs for every folded ``Expand``).

    Raises:
        ValueError: the shapes do not broadcast.
    """
    if len(a) > 32 or len(b) > 32:  # ranks numpy may refuse: its own answer
        return np.broadcast_shapes(a, b)
    if len(a) < len(b):
        a = (1,) * (len(b) - len(a)) + a
    elif len(b) < len(a):
        b = (1,) * (len(a) - len(b)) + b
    out = []
    for p, q in zip(a, b):
        if p == q or q == 1:
            out.append(p)
        elif p == 1:
            out.append(q)
        else:
            raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(out)


@_k("Transpose")
def _transpose(x, a):
    return [np.transpose(x[0], a.get("perm"))]


@_k("Tile")
def _tile(x, a):
    return [np.tile(x[0], [int(r) for r in x[1]])]


@_k("Flatten")
def _flatten(x, a):
    ax = a.get("axis", 1) % max(x[0].ndim, 1)
    return [x[0].reshape(int(np.prod(x[0].shape[:ax])), -1)]


def _reduce(fn):
    def run(x, a):
        axes = _axes(x, a)
        if axes is None and a.get("noop_with_empty_axes", 0):
            return [x[0]]
        return [fn(x[0], axis=None if axes is None else tuple(axes), keepdims=bool(a.get("keepdims", 1)))]
    return run


for _op, _fn in {"ReduceProd": np.prod, "ReduceSum": np.sum, "ReduceMax": np.max,
                 "ReduceMin": np.min, "ReduceMean": np.mean}.items():
    _KERNELS[_op] = _reduce(_fn)


# Element types whose stored bytes (``raw_data``) are numpy's own layout, one item per element.
_RAW_DTYPES = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32), onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16), onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.INT32: np.dtype(np.int32), onnx.TensorProto.INT16: np.dtype(np.int16),
    onnx.TensorProto.INT8: np.dtype(np.int8), onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.UINT16: np.dtype(np.uint16), onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT64: np.dtype(np.uint64), onnx.TensorProto.BOOL: np.dtype(np.bool_),
}


def to_array(t: onnx.TensorProto) -> np.ndarray:
    """``onnx.numpy_helper.to_array(t)``, the same array, with the common case read directly:
    a numpy element type stored as ``raw_data`` in the model, on a little-endian machine
    (``np.frombuffer(raw_data).reshape(dims)``, what ``to_array`` does then after its checks;
    a model's hundreds of small initializers made those checks a tenth of an extraction).
    Anything else is ``to_array``'s (tests/graph/test_fold_to_array.py compares the two)."""
    dtype = _RAW_DTYPES.get(t.data_type)
    if (dtype is None or sys.byteorder != "little" or not t.HasField("raw_data") or t.HasField("segment")
            or t.data_location == onnx.TensorProto.EXTERNAL):
        return numpy_helper.to_array(t)
    return np.frombuffer(t.raw_data, dtype=dtype).reshape(t.dims)


def tensor_value(t: onnx.TensorProto, limit: int = MAX_FOLD_ELEMENTS) -> np.ndarray | None:
    """The value of a small tensor; ``None`` when it is large, or its data disagree with its dims."""
    if any(d < 0 for d in t.dims) or math.prod(t.dims) > limit:
        return None
    try:
        return to_array(t)
    except Exception:  # corrupt data: the value is unknown, which costs only shape information
        return None


def constant_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a ``Constant`` node."""
    for attr in node.attribute:
        if attr.name == "value":
            return tensor_value(attr.t)
        if attr.name in ("value_float", "value_int", "value_floats", "value_ints"):
            return np.asarray(helper.get_attribute_value(attr),
                              dtype=np.float32 if "float" in attr.name else np.int64)
    return None


class FoldError(ValueError):
    """A static node whose inputs make it invalid (a ``Range`` with step 0, a negative shape)."""


def _shape_arg(v) -> tuple[int, ...]:
    flat = np.asarray(v).ravel()
    # integer arrays: tolist() gives the same ints as int() of each element, in one call
    dims = tuple(flat.tolist()) if flat.dtype.kind in "iu" else tuple(int(d) for d in flat)
    if any(d < 0 for d in dims):
        raise FoldError(f"the shape {list(dims)} has a negative dimension")
    return dims


def output_elements_bound(op: str, values: list) -> int | None:
    """How many elements a static op will write, known before running it (``None``: unknown).

    Elementwise ops broadcast: their output is the broadcast of their inputs' shapes, which can be
    far larger than any input (``[65536, 1] + [65536]`` is 2^32 elements).

    Raises:
        FoldError: the inputs make the op invalid whatever the runtime (step 0, negative shape).
    """
    present = [v for v in values if v is not None]
    try:
        if op == "ConstantOfShape":
            return math.prod(_shape_arg(values[0]))
        if op == "Expand":
            return math.prod(broadcast_pair(values[0].shape, _shape_arg(values[1])))
        if op == "Tile":
            reps = _shape_arg(values[1])
            return values[0].size * math.prod(reps)
        if op == "Range":
            start, limit, delta = (np.asarray(v).ravel()[0].item() for v in values[:3])
            if delta == 0:
                raise FoldError("its step (delta) is 0")
            n = math.ceil((limit - start) / delta)
            return max(n, 0) if math.isfinite(n) else None
        if op in _NO_LARGER:
            return values[0].size
        if op == "Concat":
            return sum(v.size for v in present)
        if op == "Gather":
            return values[1].size * max(values[0].size, 1)  # an upper bound, without the axis
        if op in _BROADCASTING:
            return math.prod(np.broadcast_shapes(*(v.shape for v in present)))
        return None  # unknown here: the caller may know the output shape from shape inference
    except FoldError:
        raise
    except (ValueError, TypeError, ZeroDivisionError, OverflowError, IndexError, AttributeError):
        return None


def evaluate(node: onnx.NodeProto, attrs: dict[str, Any], values: list, known_elements: int | None = None
             ) -> list | None:
    """Run one static node on numpy values; ``None`` when it cannot be (or should not be) done.

    ``known_elements``: the size of the node's first output where shape inference knows it; an
    op whose output size cannot be bounded before running it is not run.

    Raises:
        FoldError: the inputs make the node invalid (a ``Range`` with step 0, a negative shape).
    """
    bound = output_elements_bound(node.op_type, values)
    if bound is None:
        bound = known_elements
    if bound is None or bound > MAX_FOLD_ELEMENTS:
        return None
    kernel = _KERNELS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    try:
        with np.errstate(all="ignore"):
            if kernel is not None:
                return [np.asarray(v) for v in kernel(values, attrs)]
            from onnx.reference import ReferenceEvaluator  # deferred: heavy, loaded on first use

            feeds = {n: v for n, v in zip(node.input, values) if n}
            out = ReferenceEvaluator(node).run(None, feeds)
            # sequences (lists) and maps are not values a shape can read
            return [v if isinstance(v, np.ndarray) else None for v in out]
    except Exception:  # a value we cannot compute only costs shape information, never extraction
        return None
