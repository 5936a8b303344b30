"""Which operators a constant-folding, dead-code-eliminating runtime would keep.

A network's output may not depend on its input at all: a NAS-Bench-201 cell whose output has no
path of non-``none`` edges from its input computes ``cell_input * 0`` and everything after it is
work on a constant.  Runtimes that fold constants and drop dead code (TFLite-style converters:
HELP's Raspberry Pi 4 and Pixel 3 timings) run such a network almost for free, while eager GPU
runtimes run every operator.  How much of the graph's work survives folding is a property of the
graph:

- a tensor *depends on the input* when an operator that reads an input-dependent tensor produced
  it, unless that operator zeroes it (``Mul`` by a constant zero) or reads only its shape
  (``Shape``, ``Size``, ...);
- an operator is *live* when it reads an input-dependent tensor and one of its outputs reaches,
  through input-dependent tensors, a graph output that depends on the input.

:func:`liveness` returns the live share of operators and of FLOPs and the outputs that do not
depend on the input.  The ONNX graph is all it reads; the shares feed the calibration's
correction and K-centre selection (:mod:`perfseer.fit.calibrate`), and a graph with an
input-independent output gets a flag in predictions of a calibrated card.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfseer.graph.ir import Graph, TensorKind

# Operators whose output depends on the input's shape only (folded when shapes are static).
SHAPE_ONLY = frozenset({"Shape", "Size", "ConstantOfShape", "EyeLike"})
# The smallest share reported (a log of it is a feature; a graph with no live work is not -inf).
FLOOR = 1e-3


@dataclass(frozen=True)
class Liveness:
    """What of a graph a constant-folding runtime keeps.

    Attributes:
        live: per operator (the graph's order), whether it is live.
        node_fraction: share of operators that are live.
        flops_fraction: share of FLOPs in live operators (``node_fraction`` when ``flops`` was not
            given or sums to 0).
        dead_outputs: the graph outputs whose value does not depend on any graph input.
        primary: the first graph output (the network's result, by the exporters' convention).
    """

    live: tuple[bool, ...]
    node_fraction: float
    flops_fraction: float
    dead_outputs: tuple[str, ...]
    primary: str = ""

    @property
    def output_independent(self) -> bool:
        """True when the network's result (the first output) does not depend on the input: a
        constant-folding runtime may skip the whole network."""
        return bool(self.primary) and self.primary in self.dead_outputs


def _zeroes(graph: Graph, node) -> bool:
    """``Mul`` by a constant whose every element is 0: the product no longer depends on the input."""
    if node.op_type != "Mul":
        return False
    for name in node.inputs:
        t = graph.tensor(name)
        if t is not None and t.kind.is_static and t.value is not None and np.size(t.value) \
                and not np.any(np.asarray(t.value)):
            return True
    return False


def liveness(graph: Graph, flops: np.ndarray | None = None) -> Liveness:
    """The live operators of ``graph`` (see the module docstring); ``flops`` per operator weighs
    :attr:`Liveness.flops_fraction`."""
    dep = {name for name in graph.inputs if (t := graph.tensor(name)) is None or t.kind is TensorKind.INPUT}
    fed = []
    for node in graph.nodes:
        reads = any(i in dep for i in node.inputs if i)
        fed.append(reads)
        if reads and node.op_type not in SHAPE_ONLY and not _zeroes(graph, node):
            dep.update(o for o in node.outputs if o)
    dead = tuple(o for o in graph.outputs if o not in dep)
    # backwards from the input-dependent outputs, through input-dependent tensors
    need = {o for o in graph.outputs if o in dep}
    live = [False] * len(graph.nodes)
    for i in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[i]
        if fed[i] and any(o in need for o in node.outputs if o):
            live[i] = True
            need.update(x for x in node.inputs if x in dep)
    n = max(len(live), 1)
    node_fraction = sum(live) / n
    flops_fraction = node_fraction
    if flops is not None:
        f = np.asarray(flops, dtype=np.float64).reshape(-1)
        if len(f) != len(live):
            raise ValueError(f"{len(f)} FLOP counts for {len(live)} operators")
        if f.sum() > 0:
            flops_fraction = float(f[np.asarray(live, dtype=bool)].sum() / f.sum())
    return Liveness(tuple(live), float(node_fraction), float(flops_fraction), dead,
                    graph.outputs[0] if graph.outputs else "")


def live_fractions(pg) -> tuple[float, float]:
    """``(flops_fraction, node_fraction)`` of a :class:`~perfseer.features.perfgraph.PerfGraph`."""
    lv = liveness(pg.graph, pg._col("flops"))
    return lv.flops_fraction, lv.node_fraction
