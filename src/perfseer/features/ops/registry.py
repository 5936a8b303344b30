"""The operator registry: one cost function per ONNX operator type.

A cost function receives a :class:`NodeView` (the node with its input and output tensors at the
graph's batch size) and returns an :class:`OpCost`: FLOPs, multiply-accumulates and the
operator's hyper-parameters.  Memory traffic is derived from the tensors by
:func:`memory_of` unless the cost function knows better (a ``Gather`` reads only the rows it
gathers).  Operators without a cost function get :func:`generic_cost` and are listed as
uncovered; they never stop extraction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfseer.graph.ir import FLOAT_DTYPES, Graph, Node, Tensor, TensorKind


@dataclass(slots=True)
class OpCost:
    """What one operator costs.

    Attributes:
        flops: floating-point operations (a multiply-accumulate counts 2).
        macs: multiply-accumulates of convolution/matmul-type operators (0 for the others).
        hp: hyper-parameters, by slot name of :data:`perfseer.features.schema.HYPERPARAMETERS`.
        read_bytes: activation bytes read, when not all of every input is read.
        weight_read_bytes: static bytes read, when not all of every static input is read.
    """

    flops: float = 0.0
    macs: float = 0.0
    hp: dict[str, float] = field(default_factory=dict)
    read_bytes: float | None = None
    weight_read_bytes: float | None = None


class NodeView:
    """A node with its tensors resolved; what cost functions read."""

    __slots__ = ("node", "inputs", "outputs", "attrs")

    def __init__(self, node: Node, graph: Graph):
        self.node = node
        tensors = graph.tensors
        self.inputs: list[Tensor | None] = [tensors.get(i) if i else None for i in node.inputs]
        self.outputs: list[Tensor | None] = [tensors.get(o) if o else None for o in node.outputs]
        self.attrs = node.attrs

    def inp(self, i: int = 0) -> Tensor | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def out(self, i: int = 0) -> Tensor | None:
        return self.outputs[i] if i < len(self.outputs) else None

    def attr(self, name: str, default=None):
        v = self.attrs.get(name)
        return default if v is None else v

    @property
    def out_numel(self) -> int:
        return sum(t.numel for t in self.outputs if t is not None)

    @property
    def in_numel(self) -> int:
        t = self.inp(0)
        return t.numel if t is not None else 0


CostFn = Callable[[NodeView], OpCost]
REGISTRY: dict[str, CostFn] = {}


def register(*op_types: str):
    """Register a cost function for ONNX op types (``"Conv"``, or ``"com.microsoft::FusedConv"``)."""

    def deco(fn: CostFn) -> CostFn:
        for op in op_types:
            if op in REGISTRY:
                raise ValueError(f"cost function for {op} registered twice")
            REGISTRY[op] = fn
        return fn

    return deco


def registry_key(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def generic_cost(view: NodeView) -> OpCost:
    """The estimate for an operator without a cost function: one FLOP per output element."""
    return OpCost(flops=float(view.out_numel))


def is_weight(t: Tensor) -> bool:
    """What ``weight_bytes`` counts: a trainable parameter, or any other static floating-point
    tensor (buffer, constant)."""
    return t.kind is TensorKind.PARAMETER or (t.kind not in (TensorKind.ACTIVATION, TensorKind.INPUT)
                                              and t.dtype in FLOAT_DTYPES)


def memory_of(view: NodeView, cost: OpCost) -> tuple[float, float, float, float, int]:
    """``(input_bytes, weight_bytes, output_bytes, weights_read_bytes, params)`` of a node.

    Memory access cost (MAC, PerfSeer §3.1) is input + weights read + output bytes.  Weights are
    the floating-point static inputs (parameters, buffers, constants); integer static inputs
    (shape vectors, index tables) count as inputs.
    """
    act = weights = other_static = 0.0
    params = 0
    seen: set[str] = set()
    for t in view.inputs:
        if t is None or t.name in seen:
            continue
        seen.add(t.name)
        kind = t.kind
        if kind is TensorKind.ACTIVATION or kind is TensorKind.INPUT:
            act += t.nbytes
        elif kind is TensorKind.PARAMETER or t.dtype in FLOAT_DTYPES:  # is_weight(t), the kinds tested above
            weights += t.nbytes
            params += t.numel if kind is TensorKind.PARAMETER else 0
        else:
            other_static += t.nbytes
    out = sum(t.nbytes for t in view.outputs if t is not None)
    read = act + other_static if cost.read_bytes is None else cost.read_bytes
    wread = weights if cost.weight_read_bytes is None else cost.weight_read_bytes
    return read, weights, out, wread, params
