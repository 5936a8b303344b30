"""Quantized operators: ONNX's (QOperator and integer forms) and onnxruntime's ``com.microsoft`` ones.

MACs are counted as for the float operator they quantize and are integer MACs (their element type
is the quantized input's: ``PerfGraph.summary()['macs_by_dtype']``).  Re-quantising an output
costs 4 FLOPs per element (scale, round, add the zero point, saturate); de-quantising 2 (subtract
the zero point, scale).

``QuantizeLinear``: 4 per element.  ``DequantizeLinear``: 2 per element.
``DynamicQuantizeLinear``: min and max over X (2 per element), then quantize (4): 6 per element.
``QLinearConv``: Conv's MACs; FLOPs = 2 MACs + 4 |Y| (+ |Y| with the int32 bias).
``ConvInteger``: Conv's MACs, int32 output: FLOPs = 2 MACs.
``QLinearMatMul``: MatMul's MACs; FLOPs = 2 MACs + 4 |Y|.  ``MatMulInteger``: 2 MACs.
``com.microsoft::MatMulIntegerToFloat``: 2 MACs + 2 |Y| (scale, and the bias when given: + |Y|).
``com.microsoft::DynamicQuantizeMatMul``: quantize A (6 |A|), 2 MACs, 2 |Y| (+ |Y| with bias).
``com.microsoft::QGemm``: Gemm's MACs; 2 MACs + 4 |Y| (+ |Y| with C).
``com.microsoft::QLinearAdd`` / ``QLinearMul``: de-quantise both inputs (2 each), the operation
(1), re-quantise (4) per output element: 9 |Y|.
``com.microsoft::QLinearGlobalAveragePool``: 1 per input element + 6 per output (de/re-quantise).
``com.microsoft::DynamicQuantizeLSTM``: the LSTM's count (:mod:`~perfseer.features.ops.recurrent`),
with its weights stored transposed, (D, I, 4H) and (D, H, 4H), plus quantizing the input and the
hidden state of every step (6 per element).
"""

from __future__ import annotations

import math

from perfseer.features.ops.conv import _window_hp
from perfseer.features.ops.linear import matmul as _matmul
from perfseer.features.ops.recurrent import _CELL
from perfseer.features.ops.registry import NodeView, OpCost, register

REQUANT = 4
DEQUANT = 2
DYNAMIC_QUANT = 6


@register("QuantizeLinear")
def quantize_linear(view: NodeView) -> OpCost:
    return OpCost(flops=float(REQUANT * view.in_numel))


@register("DequantizeLinear")
def dequantize_linear(view: NodeView) -> OpCost:
    return OpCost(flops=float(DEQUANT * view.in_numel))


@register("DynamicQuantizeLinear")
def dynamic_quantize_linear(view: NodeView) -> OpCost:
    return OpCost(flops=float(DYNAMIC_QUANT * view.in_numel))


def _conv_macs(x, w, y) -> tuple[float, dict]:
    kernel = list(w.shape[2:])
    macs = float(y.numel) * w.shape[1] * math.prod(kernel)
    return macs, {"in_features": x.shape[1], "out_features": y.shape[1]}


def _conv(view: NodeView, x_at: int, w_at: int, bias_at: int | None, requant: bool) -> OpCost:
    x, w, y = view.inp(x_at), view.inp(w_at), view.out(0)
    macs, hp = _conv_macs(x, w, y)
    hp.update(_window_hp(view, list(w.shape[2:]), list(x.shape[2:]), list(y.shape[2:])))
    bias = bias_at is not None and view.inp(bias_at) is not None
    hp.update(groups=view.attr("group", 1), has_bias=float(bias))
    flops = 2 * macs + (REQUANT * y.numel if requant else 0) + (y.numel if bias else 0)
    return OpCost(flops=flops, macs=macs, hp=hp)


@register("QLinearConv")
def qlinear_conv(view: NodeView) -> OpCost:
    # x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
    return _conv(view, 0, 3, 8, requant=True)


@register("ConvInteger")
def conv_integer(view: NodeView) -> OpCost:
    # x, w, x_zero_point, w_zero_point: int32 output, no re-quantisation
    return _conv(view, 0, 1, None, requant=False)


class _Pair:
    """A view of a quantized matmul as MatMul(A, B), for :func:`perfseer.features.ops.linear.matmul`."""

    def __init__(self, a, b):
        self._ins = (a, b)

    def inp(self, i: int = 0):
        return self._ins[i]


def _mm(view: NodeView, a_at: int, b_at: int, extra_per_out: int, bias_at: int | None = None) -> OpCost:
    cost = _matmul(_Pair(view.inp(a_at), view.inp(b_at)))
    y = view.out(0)
    bias = bias_at is not None and view.inp(bias_at) is not None
    cost.flops += (extra_per_out + (1 if bias else 0)) * y.numel
    cost.hp["has_bias"] = float(bias)
    return cost


@register("QLinearMatMul")
def qlinear_matmul(view: NodeView) -> OpCost:
    # a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
    return _mm(view, 0, 3, REQUANT)


@register("MatMulInteger")
def matmul_integer(view: NodeView) -> OpCost:
    return _mm(view, 0, 1, 0)


@register("com.microsoft::MatMulIntegerToFloat")
def matmul_integer_to_float(view: NodeView) -> OpCost:
    # A, B, a_scale, b_scale, a_zero_point, b_zero_point, bias
    return _mm(view, 0, 1, DEQUANT, bias_at=6)


@register("com.microsoft::DynamicQuantizeMatMul")
def dynamic_quantize_matmul(view: NodeView) -> OpCost:
    # A (float), B (int8), b_scale, b_zero_point, bias
    cost = _mm(view, 0, 1, DEQUANT, bias_at=4)
    cost.flops += DYNAMIC_QUANT * view.inp(0).numel
    return cost


@register("com.microsoft::QGemm")
def qgemm(view: NodeView) -> OpCost:
    # A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point
    a, b, y = view.inp(0), view.inp(3), view.out(0)
    m, k = (a.shape[1], a.shape[0]) if view.attr("transA", 0) else (a.shape[0], a.shape[1])
    n = b.shape[0] if view.attr("transB", 0) else b.shape[1]
    macs = float(m) * n * k
    bias = view.inp(6) is not None
    requant = view.inp(7) is not None  # without y_scale the output is float
    flops = 2 * macs + (REQUANT if requant else DEQUANT) * y.numel + (y.numel if bias else 0)
    return OpCost(flops=flops, macs=macs,
                  hp={"in_features": k, "out_features": n, "mm_m": m, "mm_batch": 1, "has_bias": float(bias)})


@register("com.microsoft::QLinearAdd", "com.microsoft::QLinearMul")
def qlinear_binary(view: NodeView) -> OpCost:
    return OpCost(flops=float((2 * DEQUANT + 1 + REQUANT) * view.out_numel))


@register("com.microsoft::QLinearGlobalAveragePool")
def qlinear_global_average_pool(view: NodeView) -> OpCost:
    x, y = view.inp(0), view.out(0)
    channels_last = int(view.attr("channels_last", 0))
    return OpCost(flops=float(x.numel + (DEQUANT + REQUANT) * y.numel),
                  hp={"axis_size": x.numel / max(y.numel, 1), "in_features": x.shape[-1 if channels_last else 1]})


@register("com.microsoft::DynamicQuantizeLSTM")
def dynamic_quantize_lstm(view: NodeView) -> OpCost:
    # X, W (D, I, 4H) int8, R (D, H, 4H) int8, B, sequence_lens, initial_h, initial_c, P, scales/zero points
    x, w = view.inp(0), view.inp(1)
    t_len, batch = (x.shape[1], x.shape[0]) if view.attr("layout", 0) else (x.shape[0], x.shape[1])
    feat = x.shape[2]
    directions = w.shape[0]
    hidden = view.attr("hidden_size", w.shape[2] // 4)
    steps = float(directions) * t_len * batch
    macs = steps * 4 * hidden * (feat + hidden)
    bias = view.inp(3) is not None
    flops = 2 * macs + steps * hidden * (_CELL["LSTM"] + (8 if bias else 0))
    flops += DYNAMIC_QUANT * steps * (feat + hidden)  # the step's input and hidden state, quantized
    return OpCost(flops=flops, macs=macs,
                  hp={"in_features": feat, "out_features": hidden, "axis_size": t_len, "mm_batch": directions,
                      "has_bias": float(bias), "mode": 0.0})
