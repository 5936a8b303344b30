"""Tensor sequences with static membership, rewritten as the tensors they hold.

A tensor sequence has no shape, so the IR cannot hold one; but when every position is a constant,
which tensor each ``SequenceAt`` reads is known before run time.  ``SequenceEmpty``,
``SequenceConstruct``, ``SequenceInsert`` and ``SequenceErase`` are pointer operations (no device
work): they are followed here and removed; ``SequenceAt`` becomes ``Identity`` of the element
(a copy, as runtimes do), ``SequenceLength`` a constant, and ``ConcatFromSequence`` a ``Concat``
(after an ``Unsqueeze`` per element where ``new_axis`` is set).  ``SplitToSequence`` read by
``SequenceAt`` is rewritten later, once its input's shape is known (``extract.py``).  Whatever
remains (positions computed at run time, sequences as graph inputs or outputs) is reported by the
extractor, naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfseer.errors import ShapeError, UnsupportedModelError

SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase", "SequenceAt",
                          "SequenceLength", "ConcatFromSequence", "SplitToSequence", "SequenceMap"})
_STANDARD = ("", "ai.onnx")


def _position(name: str, values: dict[str, np.ndarray]) -> int | None:
    v = values.get(name)
    if v is None or v.size != 1 or not np.issubdtype(v.dtype, np.integer):
        return None
    return int(v.ravel()[0])


def _where(node: onnx.NodeProto, source: str) -> str:
    return f"{node.op_type} node '{node.name or node.output[0]}' of {source}"


def expand_sequences(graph: onnx.GraphProto, values: dict[str, np.ndarray], opset: int, source: str,
                     output_names: list[str]) -> tuple[bool, list[str]]:
    """Rewrite the sequences of ``graph`` whose membership is static, in place.

    Args:
        values: known constant values (initializers, ``Constant`` outputs) for positions.
        output_names: the graph's output names, updated where an output was a removed tensor.

    Returns:
        (whether anything changed, the new initializer names added).

    Raises:
        ShapeError: a position outside its sequence.
        UnsupportedModelError: a sequence that is a graph output.
    """
    if not any(n.op_type in SEQUENCE_OPS and n.domain in _STANDARD for n in graph.node):
        return False, []
    values = dict(values)
    for n in graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name in ("value", "value_int") and a.type in (onnx.AttributeProto.TENSOR, onnx.AttributeProto.INT):
                    v = numpy_helper.to_array(a.t) if a.type == onnx.AttributeProto.TENSOR else np.asarray(a.i)
                    if v.size == 1:
                        values[n.output[0]] = v
    seqs: dict[str, list[str]] = {}
    out: list[onnx.NodeProto] = []
    added: list[str] = []
    changed = False

    new_inits: list[onnx.TensorProto] = []

    def constant(name: str, value: np.ndarray) -> None:
        new_inits.append(numpy_helper.from_array(value, name))
        added.append(name)

    for node in graph.node:
        op = node.op_type
        if node.domain not in _STANDARD or op not in SEQUENCE_OPS or op == "SplitToSequence":
            out.append(node)
            continue
        seq_in = node.input[0] if node.input else ""
        known = op in ("SequenceEmpty", "SequenceConstruct") or seq_in in seqs
        if not known:
            out.append(node)  # a sequence from SplitToSequence, a graph input or a loop: left as is
            continue
        items = list(seqs.get(seq_in, []))
        pos = None
        if op == "SequenceInsert":
            name = node.input[2] if len(node.input) > 2 and node.input[2] else None
            pos = len(items) if name is None else _position(name, values)
        elif op == "SequenceErase":
            name = node.input[1] if len(node.input) > 1 and node.input[1] else None
            pos = len(items) - 1 if name is None else _position(name, values)
        elif op == "SequenceAt":
            pos = _position(node.input[1], values) if len(node.input) > 1 else None
        if pos is None and op in ("SequenceInsert", "SequenceErase", "SequenceAt") or op == "SequenceMap":
            return False, []  # a run-time position: the extractor names this node
        changed = True
        if op == "SequenceEmpty":
            seqs[node.output[0]] = []
        elif op == "SequenceConstruct":
            seqs[node.output[0]] = list(node.input)
        elif op == "SequenceInsert":
            limit = len(items)
            if not -limit <= pos <= limit:
                raise ShapeError(f"{_where(node, source)} inserts at position {pos} into a sequence of {limit}",
                                 f"use a position from {-limit} to {limit}")
            items.insert(pos if pos >= 0 else pos + limit, node.input[1])
            seqs[node.output[0]] = items
        elif op in ("SequenceErase", "SequenceAt"):
            limit = len(items)
            if not -limit <= pos < limit:
                raise ShapeError(f"{_where(node, source)} reads position {pos} of a sequence of {limit} tensors",
                                 f"use a position from {-limit} to {limit - 1}")
            if op == "SequenceErase":
                del items[pos]
                seqs[node.output[0]] = items
            else:
                out.append(helper.make_node("Identity", [items[pos]], [node.output[0]], name=node.name or node.output[0]))
        elif op == "SequenceLength":
            constant(node.output[0], np.asarray(len(items), np.int64))
        elif op == "ConcatFromSequence":
            attrs = {a.name: a.i for a in node.attribute}
            axis, new_axis = attrs.get("axis", 0), attrs.get("new_axis", 0)
            if not items:
                raise ShapeError(f"{_where(node, source)} concatenates an empty sequence",
                                 "fix the model: the sequence must hold at least one tensor")
            parts = list(items)
            if new_axis:
                axes = f"{node.output[0]}__axes"
                parts = [f"{node.output[0]}__item{k}" for k in range(len(items))]
                if opset >= 13:
                    constant(axes, np.asarray([axis], np.int64))
                for item, part in zip(items, parts):
                    out.append(helper.make_node("Unsqueeze", [item, axes] if opset >= 13 else [item], [part],
                                                name=part, **({} if opset >= 13 else {"axes": [axis]})))
            out.append(helper.make_node("Concat", parts, [node.output[0]], name=node.name or node.output[0],
                                        axis=axis))
    if not changed:
        return False, []
    for name in output_names:
        if name in seqs:
            raise UnsupportedModelError(f"graph output '{name}' of {source} is a tensor sequence, which has no shape",
                                        "export the model with tensor outputs (concatenate or stack the sequence)")
    del graph.node[:]
    graph.node.extend(out)
    graph.initializer.extend(new_inits)
    return True, added


def unsupported_sequence(node: onnx.NodeProto, source: str) -> UnsupportedModelError:
    """The error for a sequence op that could not be rewritten."""
    return UnsupportedModelError(
        f"{_where(node, source)} works on a tensor sequence whose positions or length are known only at run "
        "time (or that is a graph input), which perfseer cannot represent",
        "export with constant positions, or with tensors in place of the sequence (torch.split/stack)")
