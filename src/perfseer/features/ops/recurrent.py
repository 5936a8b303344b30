"""Recurrent layers (ONNX ``LSTM``, ``GRU``, ``RNN``).

X is (T, B, I) (``layout`` 0) or (B, T, I) (``layout`` 1); H = ``hidden_size``; D = 1 or 2
directions; G = gates: LSTM 4, GRU 3, RNN 1.  Every step multiplies the input and the previous
hidden state by the gate weights: MACs = D T B G H (I + H); FLOPs = 2 * MACs, plus 2 G H per
step with biases (input and recurrent), plus the cell's element-wise work per step and hidden
unit: LSTM 3 sigmoids (4 each) + 2 tanh + 4 products/sums = 18; GRU 2 sigmoids + tanh + 4 = 13;
RNN tanh = 1 (the activations are ONNX's defaults).
"""

from __future__ import annotations

from perfseer.features.ops.registry import NodeView, OpCost, register

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_CELL = {"LSTM": 18, "GRU": 13, "RNN": 1}
_MODE = {"LSTM": 0.0, "GRU": 1.0, "RNN": 2.0}


@register("LSTM", "GRU", "RNN")
def recurrent(view: NodeView) -> OpCost:
    op = view.node.op_type
    x, w = view.inp(0), view.inp(1)
    t_len, batch = (x.shape[1], x.shape[0]) if view.attr("layout", 0) else (x.shape[0], x.shape[1])
    feat = x.shape[2]
    directions = w.shape[0]
    gates = _GATES[op]
    hidden = view.attr("hidden_size", w.shape[1] // gates)
    steps = float(directions) * t_len * batch
    macs = steps * gates * hidden * (feat + hidden)
    bias = view.inp(3) is not None
    flops = 2 * macs + steps * hidden * (_CELL[op] + (2 * gates if bias else 0))
    return OpCost(flops=flops, macs=macs,
                  hp={"in_features": feat, "out_features": hidden, "axis_size": t_len, "mm_batch": directions,
                      "has_bias": float(bias), "mode": _MODE[op]})
