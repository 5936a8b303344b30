"""Inference memory of an ONNX graph by liveness analysis (no PyTorch model needed).

The graph's nodes run in their stored (topological) order.  Weights (parameters, buffers and
constants that a remaining node reads) and the inputs are allocated first and stay; each node
allocates its outputs, then frees every activation whose last reader it was (an output nothing
reads is freed at once; graph outputs stay).  The result is a :class:`~perfseer.memory.trace.Trace`
replayed through the same allocator model as a simulation.

Shape-only operators (:data:`VIEW_OPS`: Reshape, Flatten, Squeeze, Unsqueeze, Identity, and
Dropout, which is the identity at inference) alias their data input, as PyTorch views and ONNX
Runtime's buffer reuse do: their output takes no memory and keeps the input's buffer alive
until the last reader of either.

What it cannot see, and so overestimates: operators a framework runs in place (ReLU after a
convolution in PyTorch) or fuses (Conv+BN+ReLU in ONNX Runtime).  Shapes come from the PerfGraph extraction (ONNX shape inference at
the bound batch size).
"""

from __future__ import annotations

import math

from perfseer.memory.trace import Allocation, Trace

VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


def liveness_trace(model, batch: int, input_shape=None) -> Trace:
    """Trace of the inference of ``model`` (path, ``example:NAME``, ``onnx.ModelProto``) at ``batch``."""
    from perfseer.graph.extract import extract_graph  # deferred: onnx, which a simulated step never needs
    from perfseer.sources.load import load_skeleton

    skel = load_skeleton(model, input_shape=input_shape)
    graph = extract_graph(skel, batch=batch, input_shape=None if skel.input_shape_applied else input_shape)
    return graph_trace(graph)


def graph_trace(graph) -> Trace:
    """Liveness trace of a :class:`perfseer.graph.ir.Graph` (see the module docstring)."""
    trace = Trace()
    ids: dict[str, int] = {}

    def alloc(name, phase, category, op):
        t = graph.tensors.get(name)
        if t is None or name in ids:
            return
        aid = len(trace.allocations)
        trace.allocations.append(Allocation(aid, int(math.ceil(t.nbytes)), phase, op, category))
        trace.events.append((1, aid))
        ids[name] = aid

    # alias[name]: the tensor whose buffer ``name`` shares (itself if it owns one)
    alias: dict[str, str] = {}
    for node in graph.nodes:
        if node.op_type in VIEW_OPS and node.inputs and node.inputs[0] and node.outputs:
            src = node.inputs[0]
            alias[node.outputs[0]] = alias.get(src, src)

    def root(name: str) -> str:
        return alias.get(name, name)

    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for name in node.inputs:
            if name:
                last_use[root(name)] = i
    outputs = {root(n) for n in graph.outputs}
    for name, t in graph.tensors.items():
        if t.kind.is_static and name in last_use:
            alloc(name, "setup", "weights", "<initializer>")
    for name in graph.inputs:
        alloc(name, "setup", "input", "<input>")
    static = {n for n, t in graph.tensors.items() if t.kind.is_static} | set(graph.inputs)
    trace.marks["step0.forward"] = len(trace.events)
    for i, node in enumerate(graph.nodes):
        for name in node.outputs:
            if name and root(name) == name:
                alloc(name, "forward", None, node.op_type)
        for name in {root(n) for n in (*node.inputs, *node.outputs) if n}:
            if name in ids and name not in static and name not in outputs and last_use.get(name, -1) <= i:
                trace.events.append((-1, ids[name]))
                static.add(name)  # freed once
    return trace
