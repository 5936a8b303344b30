"""Pooling.

``MaxPool`` / ``AveragePool``: each output element reads its window: FLOPs = |Y| * prod(kernel)
(compares, or adds with the division folded in).  ``LpPool``: 2 per window element (power, add).
``GlobalAveragePool`` / ``GlobalMaxPool``: one FLOP per input element.
"""

from __future__ import annotations

import math

from perfseer.features.ops.conv import _window_hp
from perfseer.features.ops.registry import NodeView, OpCost, register

_MODE = {"MaxPool": 1.0, "AveragePool": 0.0, "LpPool": 2.0, "GlobalMaxPool": 1.0, "GlobalAveragePool": 0.0,
         "GlobalLpPool": 2.0}


@register("MaxPool", "AveragePool", "LpPool")
def pool(view: NodeView) -> OpCost:
    x, y = view.inp(0), view.out(0)
    kernel = list(view.attr("kernel_shape", [1]))
    window = math.prod(kernel)
    per = 2 if view.node.op_type == "LpPool" else 1
    hp = _window_hp(view, kernel, list(x.shape[2:]), list(y.shape[2:]))
    hp.update(in_features=x.shape[1] if x.rank > 1 else 1, out_features=y.shape[1] if y.rank > 1 else 1,
              mode=_MODE[view.node.op_type])
    if view.node.op_type == "AveragePool":
        hp["has_bias"] = float(view.attr("count_include_pad", 0))  # slot reused: pad counted or not
    return OpCost(flops=float(per * window) * y.numel, hp=hp)


@register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(view: NodeView) -> OpCost:
    x = view.inp(0)
    spatial = list(x.shape[2:])
    kh = spatial[-2] if len(spatial) >= 2 else 1
    kw = spatial[-1] if spatial else 1
    per = 2 if view.node.op_type == "GlobalLpPool" else 1
    return OpCost(flops=float(per) * x.numel,
                  hp={"kernel_h": kh, "kernel_w": kw, "in_features": x.shape[1] if x.rank > 1 else 1,
                      "out_features": x.shape[1] if x.rank > 1 else 1, "mode": _MODE[view.node.op_type]})
