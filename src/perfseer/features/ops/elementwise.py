"""Element-wise operators with several (broadcast) inputs.

FLOPs = (number of inputs - 1) per output element for arithmetic, comparison and logic ops
(``Add``, ``Mul``, ``Max``, ``Sum`` over n inputs...; a one-input ``Sum`` / ``Max`` / ``Min`` is a
copy: 0).  ``Mean`` adds a division: n per element.
``Where`` selects: 1 per element.  ``Pow``: 1 per element (a transcendental).
"""

from __future__ import annotations

from perfseer.features.ops.registry import NodeView, OpCost, register

BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Equal", "Less", "Greater", "LessOrEqual",
          "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
          "Max", "Min", "Sum")


def _n_inputs(view: NodeView) -> int:
    return sum(1 for t in view.inputs if t is not None)


@register(*BINARY)
def binary(view: NodeView) -> OpCost:
    return OpCost(flops=float(max(_n_inputs(view) - 1, 0)) * view.out(0).numel)


@register("Mean")
def mean(view: NodeView) -> OpCost:
    return OpCost(flops=float(_n_inputs(view)) * view.out(0).numel)


@register("Where")
def where(view: NodeView) -> OpCost:
    return OpCost(flops=float(view.out(0).numel))
