"""Model-zoo files of old opsets (1-6): their legacy attributes, rewritten to opset-7 semantics.

ONNX's version converter needs every shape before it converts legacy broadcasting, and old
schemas (BatchNormalization-1, the ops with ``consumed_inputs``) have no shape inference, so it
fails on exactly these files.  The rewrite here is local instead:

* ``consumed_inputs`` (opsets 1-5), ``is_test`` (BatchNormalization, Dropout) and ``spatial``
  (BatchNormalization; 1, per channel, is what opset 7+ computes) are dropped; training-mode
  extra outputs of BatchNormalization are dropped (inference cost only reads the first);
* Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Greater/Less with ``broadcast=1`` lose the attribute;
  where ``axis`` aligns B at an axis other than A's last ones, B gets the trailing unit
  dimensions that numpy broadcasting (opset 7+) needs: ``[C]`` at axis 1 of an NCHW tensor
  becomes ``[C, 1, 1]`` (an initializer's dims are changed, any other B gets an ``Unsqueeze``);
* Gemm's ``broadcast`` is dropped (Gemm-7 always broadcasts C);
* Reshape's ``shape`` attribute (opsets 1-4) becomes its second input; Concat without ``axis``
  (opsets 1-3) gets ``axis=1``, its old default; Pad's ``paddings`` (opset 1) become ``pads``;
* the default-domain opset is raised to 7.

The rank of A is needed for ``axis``; it comes from ONNX's shape inference of the rewritten
model, repeated while it resolves more nodes.  MACs are unchanged by the rewrite (tests build
files of opsets 3, 5, 6, 7, 8 and 9 and check them against a count by hand).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfseer.graph import safe_infer
from perfseer.graph.node_fields import NodeFields, read_nodes

LEGACY_BELOW = 7
_LEGACY_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"})
_DROP_ALWAYS = ("consumed_inputs", "is_test")


def _has_legacy(nodes: list[NodeFields]) -> bool:
    for n in nodes:
        for name, _ in n.signature:
            if name in _DROP_ALWAYS or (name == "broadcast" and n.op_type in _LEGACY_BROADCAST | {"Gemm"}) or (
                    name == "spatial" and n.op_type == "BatchNormalization") or (
                    name == "shape" and n.op_type == "Reshape") or (name == "paddings" and n.op_type == "Pad"):
                return True
        if n.op_type == "Concat" and not any(name == "axis" for name, _ in n.signature):
            return True
    return False


def upgrade_legacy(model: onnx.ModelProto, opset: int, nodes: list[NodeFields] | None = None) -> int:
    """Rewrite ``model`` in place (see the module docstring); returns the new default opset.

    ``nodes``: the fields of the graph's nodes (:func:`~perfseer.graph.node_fields.read_nodes`),
    read here when not given; after a rewrite, the list is re-read in place.
    """
    g = model.graph
    if opset >= LEGACY_BELOW and not _has_legacy(read_nodes(g) if nodes is None else nodes):
        return opset
    axis_nodes: list[tuple[onnx.NodeProto, int]] = []
    for n in g.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: a for a in n.attribute}
        drop = set(_DROP_ALWAYS)
        if n.op_type == "BatchNormalization":
            drop.add("spatial")
            del n.output[1:]
        if n.op_type in _LEGACY_BROADCAST or n.op_type == "Gemm":
            drop.add("broadcast")
            if n.op_type != "Gemm" and "axis" in attrs:
                drop.add("axis")
                if attrs.get("broadcast") is not None and attrs["broadcast"].i:
                    axis_nodes.append((n, attrs["axis"].i))
        if n.op_type == "Reshape" and "shape" in attrs:
            name = f"{n.output[0]}__shape"
            g.initializer.append(numpy_helper.from_array(np.asarray(list(attrs["shape"].ints), np.int64), name))
            del n.input[1:]
            n.input.append(name)
            drop.add("shape")
        if n.op_type == "Concat" and "axis" not in attrs:
            n.attribute.append(helper.make_attribute("axis", 1))
        if n.op_type == "Pad" and "paddings" in attrs:
            n.attribute.append(helper.make_attribute("pads", list(attrs["paddings"].ints)))
            drop.add("paddings")
        keep = [a for a in n.attribute if a.name not in drop]
        if len(keep) != len(n.attribute):
            del n.attribute[:]
            n.attribute.extend(keep)
    new_opset = max(opset, LEGACY_BELOW)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = new_opset
    if axis_nodes:
        _align_axis_broadcasts(model, axis_nodes, new_opset)
    if nodes is not None:
        nodes[:] = read_nodes(g)
    return new_opset


def _align_axis_broadcasts(model: onnx.ModelProto, pending: list[tuple[onnx.NodeProto, int]], opset: int) -> None:
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    declared = {vi.name: vi for vi in g.input}
    for _ in range(len(pending) + 1):
        if not pending:
            return
        try:
            inferred = safe_infer.infer_shapes(model, "the model", check_type=False, strict_mode=False)
        except safe_infer.InferenceFailed:  # the extractor's own inference reports it
            return
        ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in (*inferred.graph.input,
                                                                        *inferred.graph.value_info)
                 if vi.type.tensor_type.HasField("shape")}
        ranks.update({t.name: len(t.dims) for t in g.initializer})
        left = []
        for n, axis in pending:
            a, b = n.input[0], n.input[1]
            if a not in ranks or b not in ranks:
                left.append((n, axis))
                continue
            ra, rb = ranks[a], ranks[b]
            trailing = ra - (axis % ra if ra else 0) - rb
            if trailing <= 0:
                continue
            if b in inits and sum(1 for m in g.node for i in m.input if i == b) == 1:
                inits[b].dims.extend([1] * trailing)
                if b in declared:  # old files list their weights among the inputs too
                    for _ in range(trailing):
                        declared[b].type.tensor_type.shape.dim.add().dim_value = 1
            else:
                name = f"{n.output[0]}__aligned"
                idx = list(g.node).index(n)
                axes = list(range(rb, rb + trailing))
                if opset >= 13:
                    g.initializer.append(numpy_helper.from_array(np.asarray(axes, np.int64), f"{name}_axes"))
                    node = helper.make_node("Unsqueeze", [b, f"{name}_axes"], [name], name=name)
                else:
                    node = helper.make_node("Unsqueeze", [b], [name], name=name, axes=axes)
                g.node.insert(idx, node)
                n.input[1] = name
        if len(left) == len(pending):
            return
        pending = left
