"""Data movement: reshapes, copies, gathers and scatters.  0 FLOPs; the cost is memory traffic.

``Gather`` (and ``GatherElements``, ``GatherND``) reads only what it gathers: the output's worth of
the data tensor plus the indices; an embedding lookup does not read its whole table.
``NonZero`` compares every input element: 1 FLOP each.
``axis_size`` is the length of the axis an operator works along (the output's for ``Concat``), with
ONNX's default axis where the attribute is omitted.
"""

from __future__ import annotations

from perfseer.features.ops.registry import NodeView, OpCost, register

MOVEMENT = ("Reshape", "Transpose", "Concat", "Split", "Slice", "Pad", "Tile", "Expand", "Identity", "Flatten",
            "Squeeze", "Unsqueeze", "DepthToSpace", "SpaceToDepth", "ScatterND", "ScatterElements", "Scatter",
            "Trilu", "OneHot", "Shape", "Size", "ConstantOfShape", "Range", "EyeLike", "Compress",
            "ReverseSequence", "CenterCropPad", "Col2Im", "Constant", "Optional", "SequenceConstruct")


# ONNX's default ``axis`` of the operators that have one (an omitted attribute means this axis).
_DEFAULT_AXIS = {"Gather": 0, "GatherElements": 0, "Split": 0, "Flatten": 1, "Scatter": 0, "ScatterElements": 0}


def _axis_size(view: NodeView) -> float:
    axis = view.attr("axis", _DEFAULT_AXIS.get(view.node.op_type))
    t = view.out(0) if view.node.op_type == "Concat" else view.inp(0)
    if axis is None or t is None or not t.rank:
        return 0.0
    return float(t.shape[axis % t.rank])


@register(*MOVEMENT)
def movement(view: NodeView) -> OpCost:
    return OpCost(hp={"axis_size": _axis_size(view)})


@register("Gather", "GatherElements", "GatherND")
def gather(view: NodeView) -> OpCost:
    data, idx = view.inp(0), view.inp(1)
    gathered = sum(t.nbytes for t in view.outputs if t is not None)
    idx_bytes = idx.nbytes if idx is not None else 0.0
    if data.kind.is_static:
        return OpCost(hp={"axis_size": _axis_size(view)}, weight_read_bytes=gathered,
                      read_bytes=idx_bytes)
    # Static indices are counted here, so not again as weights read.
    return OpCost(hp={"axis_size": _axis_size(view)}, read_bytes=gathered + idx_bytes, weight_read_bytes=0.0)


@register("NonZero")
def nonzero(view: NodeView) -> OpCost:
    return OpCost(flops=float(view.in_numel))
