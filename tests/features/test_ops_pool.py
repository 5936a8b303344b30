"""Pooling (perfseer.features.ops.pool), against hand-computed costs.

MaxPool / AveragePool: FLOPs = |Y| * prod(kernel); LpPool: 2 per window element.
Global pools: 1 FLOP per input element (2 for GlobalLpPool).  mode: 0 average, 1 max, 2 Lp.
"""

import pytest

from helpers import one_node
from op_testing import F32, I64, check

OPS = ["MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"]


@pytest.fixture(autouse=True)
def as_written(monkeypatch):
    """Cost functions of Flatten/GlobalAveragePool as written: canonicalisation would rename them
    (tests/graph/test_canonical.py tests that)."""
    monkeypatch.setattr("perfseer.graph.canonical.ENABLED", False)


def test_maxpool_strided_padded():
    # X (2, 3, 8, 8), kernel 3, stride 2, pad 1 -> Y (2, 3, 4, 4): (8 + 2 - 3) // 2 + 1 = 4
    pg = one_node("MaxPool", {"x": (2, 3, 8, 8)}, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = 2 * 3 * 4 * 4
    check(pg, "MaxPool", flops=y * 3 * 3, macs=0,
          kernel_h=3, kernel_w=3, stride_h=2, stride_w=2, pad_h=2, pad_w=2, dilation_h=1, dilation_w=1,
          ceil_mode=0, in_features=3, out_features=3, mode=1,
          memory_access_bytes=(2 * 3 * 8 * 8 + y) * F32)


def test_maxpool_ceil_mode_and_indices():
    # X (1, 2, 7, 7), kernel 2, stride 2, ceil -> Y (1, 2, 4, 4): ceil((7 - 2) / 2) + 1 = 4;
    # the int64 Indices output is written too
    pg = one_node("MaxPool", {"x": (1, 2, 7, 7)}, n_outputs=2, kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    y = 1 * 2 * 4 * 4
    check(pg, "MaxPool", flops=y * 2 * 2, ceil_mode=1, kernel_h=2, stride_w=2,
          output_bytes=y * F32 + y * I64, memory_access_bytes=1 * 2 * 7 * 7 * F32 + y * F32 + y * I64)


def test_maxpool_1d():
    # X (2, 4, 10), kernel 3 -> Y (2, 4, 8); the _h slots hold 1
    pg = one_node("MaxPool", {"x": (2, 4, 10)}, kernel_shape=[3])
    check(pg, "MaxPool", flops=2 * 4 * 8 * 3, kernel_h=1, kernel_w=3, stride_h=1, stride_w=1)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_padded(count_include_pad):
    # X (1, 2, 5, 5), kernel 3, pad 1, stride 1 -> Y (1, 2, 5, 5); has_bias holds count_include_pad
    pg = one_node("AveragePool", {"x": (1, 2, 5, 5)}, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                  count_include_pad=count_include_pad)
    y = 1 * 2 * 5 * 5
    check(pg, "AveragePool", flops=y * 3 * 3, mode=0, has_bias=count_include_pad, pad_h=2, pad_w=2,
          memory_access_bytes=2 * y * F32)


def test_average_pool_same_upper():
    # X (1, 2, 5, 5), kernel 2, stride 1, SAME_UPPER -> Y (1, 2, 5, 5); total pad (5-1) + 2 - 5 = 1
    pg = one_node("AveragePool", {"x": (1, 2, 5, 5)}, kernel_shape=[2, 2], auto_pad="SAME_UPPER")
    check(pg, "AveragePool", flops=(1 * 2 * 5 * 5) * 2 * 2, pad_h=1, pad_w=1)


def test_lp_pool():
    # X (2, 3, 4, 4), p 2, kernel 2, stride 2 -> Y (2, 3, 2, 2): power and add per window element
    pg = one_node("LpPool", {"x": (2, 3, 4, 4)}, kernel_shape=[2, 2], strides=[2, 2], p=2)
    y = 2 * 3 * 2 * 2
    check(pg, "LpPool", flops=2 * (2 * 2) * y, mode=2, kernel_h=2, stride_h=2, in_features=3,
          memory_access_bytes=(2 * 3 * 4 * 4 + y) * F32)


@pytest.mark.parametrize("op, per, mode", [
    ("GlobalAveragePool", 1, 0), ("GlobalMaxPool", 1, 1), ("GlobalLpPool", 2, 2)])
def test_global_pool(op, per, mode):
    # X (2, 3, 5, 7) -> Y (2, 3, 1, 1); the "kernel" is the whole 5 x 7 plane
    pg = one_node(op, {"x": (2, 3, 5, 7)})
    e = 2 * 3 * 5 * 7
    check(pg, op, flops=per * e, macs=0, kernel_h=5, kernel_w=7, in_features=3, out_features=3, mode=mode,
          memory_access_bytes=(e + 2 * 3) * F32)
