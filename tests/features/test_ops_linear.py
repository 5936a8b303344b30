"""Matrix products (perfseer.features.ops.linear), against hand-computed costs.

Gemm: MACs = M N K; FLOPs = 2 M N K (+ M N with C, + M N with alpha != 1).
MatMul: MACs = batch M N K with broadcast batch dims.  Einsum (2+ operands): MACs = the product
of every index letter's size; one operand: 1 FLOP per input element, no MACs.
"""

import numpy as np

from helpers import one_node
from op_testing import F32, check, ir_one_node, tensor
from perfseer.graph.ir import TensorKind

OPS = ["Gemm", "MatMul", "Einsum"]


def w(*shape):
    return np.zeros(shape, np.float32)


# -- Gemm ----------------------------------------------------------------------------------------
def test_gemm_with_bias():
    # A (2, 8) x B (8, 16) + C (16,): M = 2, K = 8, N = 16
    pg = one_node("Gemm", {"a": (2, 8)}, {"b": w(8, 16), "c": w(16)})
    macs = 2 * 16 * 8
    check(pg, "Gemm", macs=macs, flops=2 * macs + 2 * 16,
          in_features=8, out_features=16, mm_m=2, mm_batch=1, has_bias=1,
          input_bytes=2 * 8 * F32, weight_bytes=(8 * 16 + 16) * F32, output_bytes=2 * 16 * F32,
          memory_access_bytes=(2 * 8 + 8 * 16 + 16 + 2 * 16) * F32, params=8 * 16 + 16)


def test_gemm_trans_b_alpha_no_bias():
    # A (2, 8) x B^T with B (16, 8), alpha 0.5: the scaling costs M N more
    pg = one_node("Gemm", {"a": (2, 8)}, {"b": w(16, 8)}, transB=1, alpha=0.5)
    macs = 2 * 16 * 8
    check(pg, "Gemm", macs=macs, flops=2 * macs + 2 * 16, in_features=8, out_features=16, mm_m=2, has_bias=0,
          memory_access_bytes=(2 * 8 + 16 * 8 + 2 * 16) * F32)


def test_gemm_trans_a():
    # A (6, 2) transposed: M = 2, K = 6; B (6, 5): N = 5
    pg = one_node("Gemm", {"a": (6, 2)}, {"b": w(6, 5)}, transA=1)
    macs = 2 * 5 * 6
    check(pg, "Gemm", macs=macs, flops=2 * macs, in_features=6, out_features=5, mm_m=2)


# -- MatMul --------------------------------------------------------------------------------------
def test_matmul_batched_activation_times_weight():
    # A (2, 5, 8) x W (8, 16): batch 2, M 5, K 8, N 16
    pg = one_node("MatMul", {"a": (2, 5, 8)}, {"b": w(8, 16)})
    macs = 2 * 5 * 16 * 8
    check(pg, "MatMul", macs=macs, flops=2 * macs, in_features=8, out_features=16, mm_m=5, mm_batch=2,
          memory_access_bytes=(2 * 5 * 8 + 8 * 16 + 2 * 5 * 16) * F32, params=8 * 16)


def test_matmul_broadcast_batch_dims():
    # A (2, 3, 4, 8) x B (3, 8, 6): batch dims (2, 3) and (3,) broadcast to 2 * 3
    pg = one_node("MatMul", {"a": (2, 3, 4, 8)}, {"b": w(3, 8, 6)})
    macs = (2 * 3) * 4 * 6 * 8
    check(pg, "MatMul", macs=macs, flops=2 * macs, mm_batch=2 * 3, mm_m=4, in_features=8, out_features=6,
          memory_access_bytes=(2 * 3 * 4 * 8 + 3 * 8 * 6 + 2 * 3 * 4 * 6) * F32)


def test_matmul_two_activations():
    # Q K^T-like: (2, 4, 5, 8) x (2, 4, 8, 7): batch 2 * 4; no weights
    pg = one_node("MatMul", {"a": (2, 4, 5, 8), "b": (2, 4, 8, 7)})
    macs = 2 * 4 * 5 * 7 * 8
    check(pg, "MatMul", macs=macs, flops=2 * macs, mm_batch=8, mm_m=5, weight_bytes=0, params=0,
          memory_access_bytes=(2 * 4 * 5 * 8 + 2 * 4 * 8 * 7 + 2 * 4 * 5 * 7) * F32)


def test_matmul_vector_operands():
    # v (8,) x B (2, 8, 4): v is a 1 x 8 row, batch 2 -> Y (2, 4)
    pg = one_node("MatMul", {"b": (2, 8, 4)}, {"v": w(8)}, input_order=["v", "b"])
    macs = 2 * 1 * 4 * 8
    check(pg, "MatMul", macs=macs, flops=2 * macs, mm_m=1, mm_batch=2, in_features=8, out_features=4)
    # A (2, 8) x v (8,): v is an 8 x 1 column -> Y (2,)
    pg = one_node("MatMul", {"a": (2, 8)}, {"v": w(8)})
    check(pg, "MatMul", macs=2 * 1 * 8, flops=2 * 2 * 8, mm_m=2, mm_batch=1, in_features=8, out_features=1)


# -- Einsum --------------------------------------------------------------------------------------
def test_einsum_two_operands():
    # bij,jk->bik: b 2, i 3, j 4, k 5
    pg = one_node("Einsum", {"a": (2, 3, 4)}, {"b": w(4, 5)}, equation="bij,jk->bik")
    macs = 2 * 3 * 4 * 5
    check(pg, "Einsum", macs=macs, flops=2 * macs, in_features=4, out_features=5, mm_batch=2,
          memory_access_bytes=(2 * 3 * 4 + 4 * 5 + 2 * 3 * 5) * F32)


def test_einsum_attention_scores():
    # bhqd,bhkd->bhqk: b 2, h 2, q 3, k 5, d 4 (contracted)
    pg = one_node("Einsum", {"q": (2, 2, 3, 4), "k": (2, 2, 5, 4)}, equation="bhqd,bhkd->bhqk")
    macs = 2 * 2 * 3 * 5 * 4
    check(pg, "Einsum", macs=macs, flops=2 * macs, in_features=4, out_features=5)


def test_einsum_three_operands():
    # bi,ij,jk->bk: every letter b 2, i 3, j 4, k 5; i and j are contracted: 3 * 4 per output
    pg = one_node("Einsum", {"a": (2, 3)}, {"b": w(3, 4), "c": w(4, 5)}, equation="bi,ij,jk->bk")
    macs = 2 * 3 * 4 * 5
    check(pg, "Einsum", macs=macs, flops=2 * macs, in_features=3 * 4, out_features=5, mm_batch=3)


def test_einsum_one_operand_is_a_transpose():
    pg = one_node("Einsum", {"a": (2, 3, 4)}, equation="bij->bji")
    check(pg, "Einsum", macs=0, flops=2 * 3 * 4, memory_access_bytes=2 * (2 * 3 * 4) * F32)


def test_einsum_ellipsis_same_rank():
    # ...ij,...jk->...ik with ... = (2, 3) on both sides: i 2, j 4, k 6
    pg = one_node("Einsum", {"a": (2, 3, 2, 4), "b": (2, 3, 4, 6)}, equation="...ij,...jk->...ik")
    macs = 2 * 3 * 2 * 4 * 6
    check(pg, "Einsum", macs=macs, flops=2 * macs, in_features=4, out_features=6)


def test_einsum_ellipsis_broadcast_aligns_from_the_right():
    # ONNX shape inference cannot shape an Einsum whose ellipses differ in rank, so the node is
    # built as IR.  A (2, 1, 2, 4) "...ij": ... = (2, 1); B (3, 4, 6) "...jk": ... = (3,), which
    # broadcasts against A's *last* ellipsis axis: ... = (2, 3) -> Y (2, 3, 2, 6).
    a, b = tensor("a", (2, 1, 2, 4)), tensor("b", (3, 4, 6), kind=TensorKind.PARAMETER)
    y = tensor("y", (2, 3, 2, 6))
    pg = ir_one_node("Einsum", [a, b], [y], equation="...ij,...jk->...ik")
    macs = (2 * 3) * 2 * 4 * 6
    check(pg, "Einsum", macs=macs, flops=2 * macs, in_features=4, out_features=6,
          memory_access_bytes=(2 * 1 * 2 * 4 + 3 * 4 * 6 + 2 * 3 * 2 * 6) * F32)
