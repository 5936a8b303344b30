"""Convolutions.

``Conv``: MACs = |Y| * (C_in / groups) * prod(kernel); FLOPs = 2 * MACs, plus |Y| for the bias.
``ConvTranspose``: every input element scatters into (C_out / groups) * prod(kernel) outputs:
MACs = |X| * (C_out / groups) * prod(kernel); FLOPs = 2 * MACs + |Y| with a bias.
"""

from __future__ import annotations

import math

from perfseer.features.ops.registry import NodeView, OpCost, register


def _window_hp(view: NodeView, kernel: list[int], in_spatial: list[int], out_spatial: list[int]) -> dict:
    """Kernel/stride/padding/dilation slots of a sliding-window op (last two spatial axes)."""
    n = len(kernel)
    strides = list(view.attr("strides", [1] * n))
    dil = list(view.attr("dilations", [1] * n))
    pads = list(view.attr("pads", [0] * (2 * n)))
    auto = view.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [max((o - 1) * s + (k - 1) * d + 1 - i, 0)
                 for o, s, k, d, i in zip(out_spatial, strides, kernel, dil, in_spatial)]
    else:
        total = [pads[i] + pads[i + n] for i in range(n)] if len(pads) == 2 * n else [0] * n

    def hw(values: list, fill: float) -> tuple[float, float]:
        if not values:
            return fill, fill
        if len(values) == 1:
            return fill, values[0]
        return values[-2], values[-1]

    kh, kw = hw(kernel, 1)
    sh, sw = hw(strides, 1)
    ph, pw = hw(total, 0)
    dh, dw = hw(dil, 1)
    return {"kernel_h": kh, "kernel_w": kw, "stride_h": sh, "stride_w": sw, "pad_h": ph, "pad_w": pw,
            "dilation_h": dh, "dilation_w": dw, "ceil_mode": float(view.attr("ceil_mode", 0))}


def _conv_cost(view: NodeView, transposed: bool) -> OpCost:
    x, w, y = view.inp(0), view.inp(1), view.out(0)
    kernel = list(w.shape[2:])
    # Conv: each output element sums C_in/groups * kernel inputs (W is (C_out, C_in/g, *k)).
    # ConvTranspose: each input element scatters into C_out/groups * kernel outputs (W is (C_in, C_out/g, *k)).
    macs = float(x.numel if transposed else y.numel) * w.shape[1] * math.prod(kernel)
    bias = view.inp(2) is not None
    # ConvTranspose slides its window over the output: padding and strides refer to the output grid.
    spatial_in, spatial_out = (y.shape[2:], x.shape[2:]) if transposed else (x.shape[2:], y.shape[2:])
    hp = _window_hp(view, kernel, list(spatial_in), list(spatial_out))
    hp.update(groups=view.attr("group", 1), has_bias=float(bias), in_features=x.shape[1], out_features=y.shape[1])
    return OpCost(flops=2 * macs + (y.numel if bias else 0), macs=macs, hp=hp)


@register("Conv")
def conv(view: NodeView) -> OpCost:
    return _conv_cost(view, transposed=False)


@register("ConvTranspose")
def conv_transpose(view: NodeView) -> OpCost:
    return _conv_cost(view, transposed=True)
