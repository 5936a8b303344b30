"""Reductions, softmax and scans (perfseer.features.ops.reduce).  E = input elements.

Reduce* / ArgMax / ArgMin / CumSum: 1 FLOP per input element (L2, SumSquare, LogSum: 2;
LogSumExp: 3); axis_size = elements reduced into each output element.  Softmax / LogSoftmax: 5 E.
TopK: E * ceil(log2(k + 1)).
"""

import numpy as np
import pytest

from helpers import one_node
from op_testing import F32, I64, check

X = (2, 3, 4)
E = 2 * 3 * 4

REDUCE = {"ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1, "ReduceProd": 1, "ReduceL1": 1,
          "ReduceL2": 2, "ReduceSumSquare": 2, "ReduceLogSum": 2, "ReduceLogSumExp": 3}
OPS = [*REDUCE, "ArgMax", "ArgMin", "CumSum", "Softmax", "LogSoftmax", "TopK"]


@pytest.mark.parametrize("op", list(REDUCE))
def test_reduce_last_axis(op):
    # X (2, 3, 4) over axes [2] (an int64 input at opset 20), keepdims 0 -> Y (2, 3)
    pg = one_node(op, {"x": X}, {"axes": np.array([2], np.int64)}, keepdims=0)
    check(pg, op, flops=REDUCE[op] * E, macs=0, axis_size=4,
          memory_access_bytes=E * F32 + 1 * I64 + 2 * 3 * F32)


def test_reduce_two_axes_and_all_axes():
    # axes [1, 2]: 3 * 4 = 12 elements per output, Y (2, 1, 1)
    pg = one_node("ReduceMean", {"x": X}, {"axes": np.array([1, 2], np.int64)})
    check(pg, "ReduceMean", flops=E, axis_size=3 * 4, output_bytes=2 * F32)
    # no axes: everything into one element
    pg = one_node("ReduceSum", {"x": X}, keepdims=0)
    check(pg, "ReduceSum", flops=E, axis_size=E, memory_access_bytes=E * F32 + 1 * F32)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce(op):
    # X (2, 3, 4) over axis 1, keepdims -> int64 Y (2, 1, 4)
    pg = one_node(op, {"x": X}, axis=1)
    check(pg, op, flops=E, axis_size=3, memory_access_bytes=E * F32 + 2 * 1 * 4 * I64)


def test_cumsum():
    # a scan reduces nothing: axis_size 1; Y has X's shape
    pg = one_node("CumSum", {"x": X}, {"axis": np.array(1, np.int64)})
    check(pg, "CumSum", flops=E, macs=0, axis_size=1, memory_access_bytes=E * F32 + I64 + E * F32)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax(op):
    # max, subtract, exp, sum, divide (or log): 5 per element; axis 1 has length 3
    pg = one_node(op, {"x": X}, axis=1)
    check(pg, op, flops=5 * E, macs=0, axis_size=3, memory_access_bytes=2 * E * F32)
    pg = one_node(op, {"x": X})  # default axis -1 (opset 13+)
    check(pg, op, flops=5 * E, axis_size=4)


def test_topk_k_input():
    # X (2, 10), k = 3 -> values (2, 3) float32 and indices (2, 3) int64; ceil(log2(3 + 1)) = 2
    pg = one_node("TopK", {"x": (2, 10)}, {"k": np.array([3], np.int64)}, n_outputs=2)
    check(pg, "TopK", flops=(2 * 10) * 2, macs=0, axis_size=10, out_features=3,
          memory_access_bytes=2 * 10 * F32 + I64 + 2 * 3 * F32 + 2 * 3 * I64)


def test_topk_opset1_attribute_k_on_inner_axis():
    # opset 1: k = 4 is an attribute; X (2, 10, 3) along axis 1 -> (2, 4, 3); ceil(log2(4 + 1)) = 3
    pg = one_node("TopK", {"x": (2, 10, 3)}, n_outputs=2, opset=1, k=4, axis=1)
    check(pg, "TopK", flops=(2 * 10 * 3) * 3, axis_size=10, out_features=4)
