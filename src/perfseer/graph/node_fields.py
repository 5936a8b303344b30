"""A model's nodes as plain Python values, each NodeProto read once.

Extraction walks the node list many times: validation, the legacy-attribute check, every folding
pass, the IR.  Reading a protobuf field builds a new Python object each time, far dearer than
reading an attribute of a Python object, so each node's fields are read once into a
:class:`NodeFields` that these steps share.  The fields are named as the proto's (``op_type``,
``input``, ``output``...), so code written for a NodeProto reads either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from perfseer.graph import fold
from perfseer.graph.onnx_io import SMALL_VALUE_ELEMENTS

# The values of the common attribute types as :func:`attribute_values` gives them (strings
# decoded), read directly: ``onnx.helper.get_attribute_value`` tests the type against each kind
# in turn, and every test reads a protobuf field.
_ATTR_READERS = {
    onnx.AttributeProto.INT: lambda a: a.i,
    onnx.AttributeProto.FLOAT: lambda a: a.f,
    onnx.AttributeProto.STRING: lambda a: a.s.decode(),
    onnx.AttributeProto.INTS: lambda a: a.ints[:],
    onnx.AttributeProto.FLOATS: lambda a: a.floats[:],
    onnx.AttributeProto.STRINGS: lambda a: [x.decode() for x in a.strings],
}


def _attr_value(a: onnx.AttributeProto, kind: int) -> Any:
    """The value of attribute ``a`` of type ``kind``: strings decoded, small tensors as arrays
    (larger ones ``None``), sub-graphs ``None``."""
    reader = _ATTR_READERS.get(kind)
    if reader is not None and not a.ref_attr_name:  # get_attribute_value refuses references
        return reader(a)
    if kind == onnx.AttributeProto.TENSOR:
        return fold.tensor_value(a.t, SMALL_VALUE_ELEMENTS)
    if kind in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return None
    v = helper.get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else (
        [x.decode() if isinstance(x, bytes) else x for x in v] if isinstance(v, list) else v)


def attribute_values(node: onnx.NodeProto) -> dict[str, Any]:
    """``{name: value}`` of a node's attributes (see :func:`_attr_value`)."""
    return {a.name: _attr_value(a, a.type) for a in node.attribute}


class NodeFields:
    """One node's fields, read from its NodeProto once.

    Attributes:
        proto: the NodeProto (for what reads its attributes: :mod:`perfseer.graph.fold`, errors).
        op_type, domain, name: as in the proto.
        input, output: the proto's names, as tuples.
        signature: ``(name, type)`` of each attribute, in order.
    """

    __slots__ = ("proto", "op_type", "domain", "name", "input", "output", "signature", "_attrs", "_constant")
    _UNREAD = object()

    def __init__(self, proto: onnx.NodeProto):
        self.proto = proto
        self.op_type, self.domain, self.name = proto.op_type, proto.domain, proto.name
        # (a slice reads a repeated field in one call; iterating it reads element by element)
        self.input, self.output = tuple(proto.input[:]), tuple(proto.output[:])
        attributes = proto.attribute
        self.signature = tuple([(a.name, a.type) for a in attributes]) if attributes else ()
        self._attrs: dict[str, Any] | None = None
        self._constant = NodeFields._UNREAD

    @property
    def attrs(self) -> dict[str, Any]:
        """The node's attribute values (:func:`attribute_values`), decoded on first use."""
        if self._attrs is None:
            self._attrs = attribute_values(self.proto)
        return self._attrs

    @property
    def constant(self) -> np.ndarray | None:
        """The value of a ``Constant`` node (:func:`perfseer.graph.fold.constant_value`), read on
        first use (every folding pass folds the graph's constants again)."""
        if self._constant is NodeFields._UNREAD:
            self._constant = fold.constant_value(self.proto)
        return self._constant


def read_nodes(graph: onnx.GraphProto) -> list[NodeFields]:
    """The :class:`NodeFields` of every node of ``graph``, in order."""
    return [NodeFields(n) for n in graph.node]
