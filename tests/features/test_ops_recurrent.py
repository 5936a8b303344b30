"""Recurrent layers (perfseer.features.ops.recurrent), against hand-computed costs.

MACs = D T B G H (I + H); FLOPs = 2 MACs + D T B H (cell + 2 G with biases); cell work per
hidden unit and step: LSTM 18, GRU 13, RNN 1.
"""

import numpy as np
import pytest

from helpers import one_node
from op_testing import check

OPS = ["LSTM", "GRU", "RNN"]
T, B, I, H = 5, 2, 3, 4


@pytest.mark.parametrize("op,gates,cell", [("LSTM", 4, 18), ("GRU", 3, 13), ("RNN", 1, 1)])
@pytest.mark.parametrize("directions", [1, 2])
def test_recurrent(op, gates, cell, directions):
    d = "bidirectional" if directions == 2 else "forward"
    w = np.zeros((directions, gates * H, I), np.float32)
    r = np.zeros((directions, gates * H, H), np.float32)
    b = np.zeros((directions, 2 * gates * H), np.float32)
    pg = one_node(op, {"x": (T, B, I)}, {"w": w, "r": r, "b": b}, n_outputs=1, hidden_size=H, direction=d)
    macs = directions * T * B * gates * H * (I + H)
    flops = 2 * macs + directions * T * B * H * (cell + 2 * gates)
    check(pg, op, flops=flops, macs=macs, in_features=I, out_features=H, axis_size=T, mm_batch=directions,
          has_bias=1.0)


def test_lstm_without_bias_batch_first():
    w = np.zeros((1, 4 * H, I), np.float32)
    r = np.zeros((1, 4 * H, H), np.float32)
    pg = one_node("LSTM", {"x": (B, T, I)}, {"w": w, "r": r}, hidden_size=H, layout=1)
    macs = T * B * 4 * H * (I + H)
    check(pg, "LSTM", flops=2 * macs + T * B * H * 18, macs=macs, axis_size=T, has_bias=0.0)
