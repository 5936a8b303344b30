"""Resizing.  Only axes whose size changes are interpolated.

``Resize`` / ``Upsample``: nearest: 0 FLOPs (a gather); linear: 3 FLOPs per output element per
interpolated axis (two weighted terms and their sum), so bilinear = 6; cubic: 8 per axis
(four weighted terms and their sum).
"""

from __future__ import annotations

from perfseer.features.ops.registry import NodeView, OpCost, register

_PER_AXIS = {"nearest": 0.0, "linear": 3.0, "bilinear": 3.0, "cubic": 8.0}
_MODE_CODE = {"nearest": 0.0, "linear": 1.0, "bilinear": 1.0, "cubic": 2.0}


@register("Resize", "Upsample")
def resize(view: NodeView) -> OpCost:
    x, y = view.inp(0), view.out(0)
    mode = str(view.attr("mode", "nearest")).lower()
    axes = sum(1 for a, b in zip(x.shape, y.shape) if a != b)
    scales = [b / a for a, b in zip(x.shape, y.shape) if a]
    hp = {"scale_h": scales[-2] if len(scales) >= 2 else 1.0, "scale_w": scales[-1] if scales else 1.0,
          "mode": _MODE_CODE.get(mode, 0.0), "in_features": x.shape[1] if x.rank > 1 else 1}
    return OpCost(flops=_PER_AXIS.get(mode, 3.0) * axes * y.numel, hp=hp)
