"""One PerfGraph per network, whichever exporter wrote the ONNX: exporter-specific patterns, folded.

perfseer's own PyTorch frontend (``torch.onnx.export(dynamo=True)``) writes the canonical form,
the form every bundled predictor was trained on; graphs that other exporters wrote (the legacy
TorchScript exporter, ``tf2onnx``...) are rewritten to it where the two spell the same computation
differently:

* ``Flatten`` -> ``Reshape`` (with its shape vector, as the dynamo exporter writes it);
* ``GlobalAveragePool`` -> ``ReduceMean`` over the spatial axes, ``keepdims=1``;
* the erf form of GELU, ``0.5 * x * (1 + erf(x / sqrt(2)))`` (``Div``/``Mul``, ``Erf``, ``Add``,
  ``Mul``, ``Mul``: five operators in opsets < 20) -> one ``Gelu``;
* a batch-statistics BatchNorm, which the dynamo exporter spells as its statistics
  (``ReduceMean`` for the mean; ``ReduceMean``, ``Sub``, ``Mul``, ``ReduceMean`` for the variance)
  feeding an inference-mode ``BatchNormalization`` -> one ``BatchNormalization`` with
  ``training_mode=1``, the one kernel PyTorch runs.  In an eval-mode graph this is weight
  standardisation (timm's ``StdConv2d`` / ``ScaledStdConv2d``: NFNets, BiT), recomputed from the
  weights at every forward (:mod:`perfseer.graph.extract`).

What cannot be undone is not guessed: the legacy exporter's constant folding (on by default) fuses
each eval-mode BatchNorm into the convolution before it, so a graph exported that way has no
``BatchNormalization`` left to count; ``benchmarks/exporter_canonical.py`` at tag research-2026-11 measures the difference
that remains, with and without that folding.  Nor are spellings that the dynamo exporter itself
uses rewritten (its ``Split`` for ``torch.split``, where the legacy exporter's ``unbind`` also
writes ``Split`` and the dynamo exporter ``Slice`` nodes): that would change canonical graphs.  Graphs already in the canonical form are returned
unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from perfseer.graph.ir import Graph, Node, Tensor, TensorKind

# Benchmarks switch this off to measure what canonicalisation changes; users have no reason to.
ENABLED = True


def canonicalize(graph: Graph) -> Graph:
    """``graph`` with the exporter-specific patterns of the module docstring rewritten."""
    if not ENABLED:
        return graph
    nodes = list(graph.nodes)
    tensors = dict(graph.tensors)
    changed = _fuse_erf_gelu(nodes, tensors, graph.outputs)
    changed |= _fuse_batch_stat_bn(nodes, graph.outputs)
    for i, node in enumerate(nodes):
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Flatten":
            y = tensors.get(node.outputs[0])
            if y is None:
                continue
            shape = _constant(tensors, f"{node.name}/shape", np.asarray(y.shape, np.int64))
            nodes[i] = dataclasses.replace(node, op_type="Reshape", inputs=(node.inputs[0], shape), attrs={})
            changed = True
        elif node.op_type == "GlobalAveragePool":
            x = tensors.get(node.inputs[0])
            if x is None or x.rank < 3:
                continue
            axes = _constant(tensors, f"{node.name}/axes", np.arange(2, x.rank, dtype=np.int64))
            nodes[i] = dataclasses.replace(node, op_type="ReduceMean", inputs=(node.inputs[0], axes),
                                           attrs={"keepdims": 1})
            changed = True
    if not changed:
        return graph
    used = {n for node in nodes for n in (*node.inputs, *node.outputs) if n} | set(graph.inputs) | set(graph.outputs)
    # Only the tensors of rewritten operators go; the weights that folded operators read stay.
    was_used = {n for node in graph.nodes for n in (*node.inputs, *node.outputs) if n}
    return dataclasses.replace(graph, nodes=tuple(nodes),
                               tensors={k: v for k, v in tensors.items() if k in used or k not in was_used})


def _constant(tensors: dict, name: str, value: np.ndarray) -> str:
    # only its size matters to the features (the bytes a Reshape/ReduceMean reads)
    tensors[name] = Tensor(name, "int64", tuple(value.shape), (0,) * value.ndim, TensorKind.CONSTANT, value)
    return name


def _scalar(tensors: dict, name: str) -> float | None:
    t = tensors.get(name)
    if t is None or t.value is None or not t.kind.is_static or t.value.size != 1:
        return None
    return float(np.asarray(t.value).ravel()[0])


def _readers(nodes: list[Node]) -> dict[str, list[int]]:
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.inputs:
            if name:
                readers.setdefault(name, []).append(i)
    return readers


def _fuse_batch_stat_bn(nodes: list[Node], outputs) -> bool:
    """Replace each BatchNorm fed with its input's own statistics by one training-mode
    ``BatchNormalization`` (in place); whether any was found."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    readers = _readers(nodes)
    outputs = set(outputs)

    def made_by(name: str, op: str, reader: int) -> int | None:
        """The node of type ``op`` writing ``name`` if ``reader`` is its output's only reader."""
        i = producer.get(name)
        if i is None or nodes[i].op_type != op or nodes[i].domain not in ("", "ai.onnx"):
            return None
        return i if readers.get(name) == [reader] and name not in outputs else None

    drop: set[int] = set()
    for b, bn in enumerate(nodes):
        if (bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or len(bn.inputs) < 5
                or bn.attrs.get("training_mode", 0)):
            continue
        x = bn.inputs[0]
        mean = made_by(bn.inputs[3], "ReduceMean", b)
        var = made_by(bn.inputs[4], "ReduceMean", b)
        if mean is None or var is None or nodes[mean].inputs[0] != x:
            continue
        sq = made_by(nodes[var].inputs[0], "Mul", var)
        if sq is None or nodes[sq].inputs[0] != nodes[sq].inputs[1]:
            continue
        sub = producer.get(nodes[sq].inputs[0])
        if (sub is None or nodes[sub].op_type != "Sub" or nodes[sub].inputs[0] != x
                or readers.get(nodes[sub].outputs[0]) != [sq, sq]):
            continue
        centre = made_by(nodes[sub].inputs[1], "ReduceMean", sub)
        if centre is None or nodes[centre].inputs[0] != x:
            continue
        nodes[b] = dataclasses.replace(bn, inputs=bn.inputs[:3], attrs={**bn.attrs, "training_mode": 1})
        drop.update((mean, var, sq, sub, centre))
    if drop:
        nodes[:] = [n for i, n in enumerate(nodes) if i not in drop]
    return bool(drop)


def _fuse_erf_gelu(nodes: list[Node], tensors: dict, outputs) -> bool:
    """Replace each erf-form GELU chain by one ``Gelu`` node (in place); whether any was found."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.outputs if o}
    readers = _readers(nodes)
    outputs = set(outputs)

    def only_reader(name: str) -> int | None:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 and name not in outputs else None

    def other(node: Node, name: str) -> str:
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]

    drop: set[int] = set()
    found = False
    for e, erf in enumerate(nodes):
        if erf.op_type != "Erf" or erf.domain not in ("", "ai.onnx") or e in drop:
            continue
        d = producer.get(erf.inputs[0])
        if d is None or nodes[d].op_type not in ("Div", "Mul") or only_reader(nodes[d].outputs[0]) != e:
            continue
        scaled = nodes[d]
        x = scaled.inputs[0]
        c = _scalar(tensors, scaled.inputs[1])
        if c is None or abs((c if scaled.op_type == "Div" else 1 / c) - 2 ** 0.5) > 1e-3:
            continue
        a = only_reader(erf.outputs[0])
        if a is None or nodes[a].op_type != "Add" or _scalar(tensors, other(nodes[a], erf.outputs[0])) != 1.0:
            continue
        m1 = only_reader(nodes[a].outputs[0])
        if m1 is None or nodes[m1].op_type != "Mul":
            continue
        partner = other(nodes[m1], nodes[a].outputs[0])
        half_first = producer.get(partner)
        if partner == x:  # x * (1 + erf) then * 0.5
            m2 = only_reader(nodes[m1].outputs[0])
            if m2 is None or nodes[m2].op_type != "Mul" or _scalar(tensors, other(nodes[m2], nodes[m1].outputs[0])) != 0.5:
                continue
            chain, last = [d, e, a, m1, m2], nodes[m2]
        elif (half_first is not None and nodes[half_first].op_type == "Mul" and x in nodes[half_first].inputs
              and _scalar(tensors, other(nodes[half_first], x)) == 0.5 and only_reader(partner) == m1):
            chain, last = [half_first, d, e, a, m1], nodes[m1]  # (0.5 * x) * (1 + erf)
        else:
            continue
        nodes[chain[-1]] = Node(last.name, "Gelu", "", (x,), last.outputs, {})
        drop.update(chain[:-1])
        found = True
    if drop:
        nodes[:] = [n for i, n in enumerate(nodes) if i not in drop]
    return found
