"""Normalisations.  E is the number of input elements.

Normalising costs 5 FLOPs per element (mean: 1, subtract: 1, square: 1, variance sum: 1, scale by
1/std: 1), plus 1 per element for each affine parameter (scale, bias) that is present.
``BatchNormalization`` in inference uses stored statistics: subtract, scale, gamma, beta = 4 E;
in training mode it also computes the statistics: 7 E.  ``RMSNormalization``: square, sum,
scale = 3 E, plus 1 E for its scale.  ``LpNormalization``: 3 E.  ``LRN``: size + 3 per element.
"""

from __future__ import annotations

import math

from perfseer.features.ops.registry import NodeView, OpCost, register


def _affine(view: NodeView, first: int) -> int:
    return sum(1 for i in (first, first + 1) if view.inp(i) is not None)


@register("BatchNormalization")
def batch_norm(view: NodeView) -> OpCost:
    x = view.inp(0)
    e = float(x.numel)
    training = bool(view.attr("training_mode", 0))
    return OpCost(flops=(7 if training else 4) * e,
                  hp={"in_features": x.shape[1] if x.rank > 1 else 1, "mode": float(training)})


@register("LayerNormalization")
def layer_norm(view: NodeView) -> OpCost:
    x = view.inp(0)
    axis = view.attr("axis", -1) % max(x.rank, 1)
    e = float(x.numel)
    return OpCost(flops=(5 + _affine(view, 1)) * e,
                  hp={"in_features": math.prod(x.shape[axis:]), "axis_size": math.prod(x.shape[axis:])})


@register("GroupNormalization")
def group_norm(view: NodeView) -> OpCost:
    x = view.inp(0)
    return OpCost(flops=(5 + _affine(view, 1)) * float(x.numel),
                  hp={"groups": view.attr("num_groups", 1), "in_features": x.shape[1] if x.rank > 1 else 1})


@register("InstanceNormalization")
def instance_norm(view: NodeView) -> OpCost:
    x = view.inp(0)
    return OpCost(flops=(5 + _affine(view, 1)) * float(x.numel),
                  hp={"groups": x.shape[1] if x.rank > 1 else 1, "in_features": x.shape[1] if x.rank > 1 else 1})


@register("RMSNormalization", "SimplifiedLayerNormalization")
def rms_norm(view: NodeView) -> OpCost:
    x = view.inp(0)
    axis = view.attr("axis", -1) % max(x.rank, 1)
    return OpCost(flops=(3 + (view.inp(1) is not None)) * float(x.numel),
                  hp={"in_features": math.prod(x.shape[axis:]), "axis_size": math.prod(x.shape[axis:])})


@register("LpNormalization")
def lp_norm(view: NodeView) -> OpCost:
    x = view.inp(0)
    axis = view.attr("axis", -1) % max(x.rank, 1)
    return OpCost(flops=3 * float(x.numel), hp={"axis_size": x.shape[axis] if x.rank else 1})


@register("LRN")
def lrn(view: NodeView) -> OpCost:
    size = view.attr("size", 1)
    return OpCost(flops=(size + 3) * float(view.in_numel), hp={"kernel_w": size})
