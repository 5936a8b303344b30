"""Model-local functions inlined under a budget, and the size budgets checked before any expansion.

An ONNX file may define functions (``ModelProto.functions``) that call one another; inlining them
is what makes the graph's nodes visible to perfseer.  ``onnx.inliner`` trusts the file: a function
that calls itself, a call with more inputs than the function declares, or a chain of calls that
doubles at every level (a 1.5 KB file fans out to 2^24 nodes) end in a crash or in gigabytes of
memory.  :func:`inline_functions` first counts, without building anything, how many nodes the
inlined graph would have, following every call (recursion and arity checked on the way), and
inlines only under :data:`MAX_NODES`.

:func:`check_constant_sizes` refuses a ``ConstantOfShape``, ``Expand`` or ``Tile`` whose
constant shape asks for more than :data:`MAX_TENSOR_ELEMENTS` elements, before shape inference
would try to represent it (a 101-byte file asking for 2^40 zeros).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from perfseer.errors import UnsupportedModelError

MAX_NODES = 1 << 20  # nodes of a graph once its functions are inlined (the largest real graphs: ~10^5)
MAX_FUNCTION_DEPTH = 32  # functions calling functions (and subgraphs inside subgraphs), deepest chain
MAX_TENSOR_ELEMENTS = 1 << 32  # elements of one tensor built from a constant shape (2^32 floats: 16 GB)


def _key(domain: str, name: str, overload: str = "") -> tuple[str, str, str]:
    return (domain or "", name, overload or "")


def _subgraphs(node: onnx.NodeProto):
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


class _Counter:
    def __init__(self, model: onnx.ModelProto, source: str, budget: int):
        self.source, self.budget = source, budget
        self.functions = {_key(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
        self.memo: dict[tuple, int] = {}
        self.active: list[tuple] = []  # the chain of calls being counted

    def refuse(self, problem: str, fix: str) -> UnsupportedModelError:
        return UnsupportedModelError(f"{self.source}: {problem}", fix)

    def nodes(self, nodes, depth: int) -> int:
        if depth > MAX_FUNCTION_DEPTH:
            raise self.refuse(f"its functions and subgraphs nest more than {MAX_FUNCTION_DEPTH} levels deep",
                              "export the model with its functions inlined (a flat graph)")
        total = 0
        for node in nodes:
            key = _key(node.domain, node.op_type, getattr(node, "overload", ""))
            f = self.functions.get(key)
            if f is None:
                total += 1
            else:
                if len(node.input) > len(f.input) or len(node.output) > len(f.output):
                    raise self.refuse(
                        f"node '{node.name or node.op_type}' calls function {f.name} with {len(node.input)} inputs "
                        f"and {len(node.output)} outputs; it declares {len(f.input)} and {len(f.output)}",
                        "fix the model: a call must match the function's signature")
                total += self.function(key, f, depth)
            for g in _subgraphs(node):
                total += self.nodes(g.node, depth + 1)
            if total > self.budget:
                raise self.refuse(f"inlining its functions gives more than {self.budget:,} nodes",
                                  "perfseer reads graphs of at most that size; export a smaller model")
        return total

    def function(self, key: tuple, f: onnx.FunctionProto, depth: int) -> int:
        if key in self.memo:
            return self.memo[key]
        if key in self.active:
            chain = " -> ".join(k[1] for k in self.active[self.active.index(key):]) + f" -> {key[1]}"
            raise self.refuse(f"function {key[1]} calls itself ({chain})",
                              "fix the model: ONNX functions cannot be recursive")
        self.active.append(key)
        try:
            n = self.nodes(f.node, depth + 1)
        finally:
            self.active.pop()
        self.memo[key] = n
        return n


def count_inlined(model: onnx.ModelProto, source: str, budget: int = MAX_NODES) -> int:
    """The number of nodes ``model``'s graph has once its local functions are inlined (subgraph
    nodes included), computed without inlining.

    Raises:
        UnsupportedModelError: a recursive function, a call whose arity does not match, nesting
            deeper than :data:`MAX_FUNCTION_DEPTH`, or more than ``budget`` nodes.
    """
    return _Counter(model, source, budget).nodes(model.graph.node, 0)


def inline_functions(model: onnx.ModelProto, source: str, budget: int = MAX_NODES) -> onnx.ModelProto:
    """``model`` with its local functions inlined, when the inlined graph stays within ``budget``
    nodes (:func:`count_inlined`); ``model`` itself when it has none.

    Raises:
        UnsupportedModelError: what :func:`count_inlined` refuses, or a file ``onnx.inliner``
            cannot inline (its error named).
    """
    count_inlined(model, source, budget)
    if not model.functions:
        return model
    from onnx import inliner  # deferred: loads onnx's C++ inliner

    try:
        return inliner.inline_local_functions(model)
    except MemoryError:
        raise
    except Exception as e:  # onnx raises several types on a malformed function
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise UnsupportedModelError(f"{source}: its local functions cannot be inlined: {first}",
                                    "fix the functions in the model, or export it with them inlined") from e


_SHAPE_ARG = {"ConstantOfShape": 0, "Expand": 1}  # the input holding the output's shape


def check_constant_sizes(model: onnx.ModelProto, source: str, limit: int = MAX_TENSOR_ELEMENTS) -> None:
    """Refuse a ``ConstantOfShape`` or ``Expand`` whose shape is a constant of more than ``limit``
    elements (checked on the file, before shape inference).

    Raises:
        UnsupportedModelError: naming the node and the size.
    """
    g = model.graph
    wanted = {n.input[_SHAPE_ARG[n.op_type]] for n in g.node if n.domain in ("", "ai.onnx")
              and n.op_type in _SHAPE_ARG and len(n.input) > _SHAPE_ARG[n.op_type]}
    if not wanted:
        return
    values = {}
    for t in g.initializer:
        if t.name in wanted:
            values[t.name] = t
    for n in g.node:
        if n.op_type == "Constant" and n.output and n.output[0] in wanted:
            for a in n.attribute:
                if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
                    values[n.output[0]] = a.t
    for n in g.node:
        arg = _SHAPE_ARG.get(n.op_type)
        if arg is None or n.domain not in ("", "ai.onnx") or len(n.input) <= arg or n.input[arg] not in values:
            continue
        t = values[n.input[arg]]
        if t.data_location == onnx.TensorProto.EXTERNAL:
            continue  # external data is never read
        if math.prod(t.dims) > 64 or t.data_type != onnx.TensorProto.INT64:
            continue  # a shape is a short int64 vector; anything else is checked by shape inference
        try:
            shape = [int(v) for v in np.asarray(numpy_helper.to_array(t)).reshape(-1)]
        except (ValueError, TypeError, OverflowError):  # unreadable: shape inference names it
            continue
        size = math.prod(max(v, 1) for v in shape)
        if size > limit:
            raise UnsupportedModelError(
                f"{n.op_type} node '{n.name or n.output[0]}' of {source} builds a tensor of shape "
                f"{'x'.join(map(str, shape))} ({size:.3g} elements, at most {limit:.3g})",
                "fix the model: the constant shape is corrupt or absurd")
