"""Reductions, softmax and other per-axis scans.  E is the number of input elements.

``ReduceSum/Mean/Max/Min/Prod/L1``, ``ArgMax/ArgMin``, ``CumSum``: 1 FLOP per input element.
``ReduceL2``, ``ReduceSumSquare``, ``ReduceLogSum``: 2 per element; ``ReduceLogSumExp``: 3.
``Softmax`` / ``LogSoftmax``: max, subtract, exp, sum, divide (or log) = 5 per element.
``TopK``: E * ceil(log2(k + 1)) compares (a heap of size k).
"""

from __future__ import annotations

import math

import numpy as np

from perfseer.features.ops.registry import NodeView, OpCost, register

_PER = {"ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1, "ReduceProd": 1, "ReduceL1": 1,
        "ReduceL2": 2, "ReduceSumSquare": 2, "ReduceLogSum": 2, "ReduceLogSumExp": 3,
        "ArgMax": 1, "ArgMin": 1, "CumSum": 1}


def _reduced_size(view: NodeView) -> float:
    x, y = view.inp(0), view.out(0)
    return x.numel / max(y.numel, 1) if y is not None else float(x.numel)


@register(*_PER)
def reduce(view: NodeView) -> OpCost:
    x = view.inp(0)
    hp = {"axis_size": _reduced_size(view) if view.node.op_type != "CumSum" else 1.0}
    return OpCost(flops=float(_PER[view.node.op_type]) * x.numel, hp=hp)


@register("Softmax", "LogSoftmax")
def softmax(view: NodeView) -> OpCost:
    x = view.inp(0)
    axis = view.attr("axis", -1) % max(x.rank, 1)
    return OpCost(flops=5.0 * x.numel, hp={"axis_size": x.shape[axis] if x.rank else 1})


@register("TopK")
def topk(view: NodeView) -> OpCost:
    x, k = view.inp(0), view.inp(1)
    axis = view.attr("axis", -1) % max(x.rank, 1)
    # k: the input's value (opset 10+), else the length of the output along the axis (= k).
    kval = int(np.asarray(k.value).ravel()[0]) if k is not None and k.value is not None else view.out(0).shape[axis]
    return OpCost(flops=float(x.numel) * math.ceil(math.log2(kval + 1)),
                  hp={"axis_size": x.shape[axis] if x.rank else 1, "out_features": kval})
