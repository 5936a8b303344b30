"""Matrix products.

``Gemm``: Y = alpha * A' B' + beta * C with A' (M, K), B' (K, N): MACs = M N K; FLOPs = 2 M N K,
plus M N for adding C and M N for an alpha other than 1.
``MatMul``: numpy semantics, batch dims broadcast: MACs = batch * M * N * K; FLOPs = 2 * MACs.
With ``PERFSEER_GEMM_FOLD=1`` (:func:`gemm_fold_enabled`), a product of an N-D activation and a 2-D
weight (:func:`~perfseer.features.ops.registry.is_weight`; ``nn.Linear`` on a ``[B, N, C]`` or
``[B, H, W, C]`` tensor) is described as the one GEMM PyTorch runs: ``mm_m`` = the product of the activation's leading dimensions, ``mm_batch``
= 1 (the FLOPs are the same).  Off by default: the bundled predictors learned the layout-dependent
description (``mm_batch`` = the leading dimensions but the last two); ``scripts/gemm_fold_dataset.py``
rewrites a stored dataset the same way.
``Einsum``: for two or more operands, MACs = the product of the sizes of every index letter
(each output element sums over the contracted letters); FLOPs = 2 * MACs.  One operand
(a transpose or a sum) costs one FLOP per input element and no MACs.
"""

from __future__ import annotations

import math

from perfseer.features.ops.registry import NodeView, OpCost, is_weight, register
from perfseer.switches import env_flag

GEMM_FOLD_ENV = "PERFSEER_GEMM_FOLD"


def gemm_fold_enabled() -> bool:
    """Whether a ``MatMul`` with a 2-D weight is described as one folded GEMM (module
    docstring); ``PERFSEER_GEMM_FOLD=1``, read at every extraction."""
    return env_flag(GEMM_FOLD_ENV)


@register("Gemm")
def gemm(view: NodeView) -> OpCost:
    a, b, y = view.inp(0), view.inp(1), view.out(0)
    m, k = (a.shape[1], a.shape[0]) if view.attr("transA", 0) else (a.shape[0], a.shape[1])
    n = b.shape[0] if view.attr("transB", 0) else b.shape[1]
    macs = float(m) * n * k
    bias = view.inp(2) is not None
    flops = 2 * macs + (m * n if bias else 0) + (m * n if view.attr("alpha", 1.0) != 1.0 else 0)
    return OpCost(flops=flops, macs=macs,
                  hp={"in_features": k, "out_features": n, "mm_m": m, "mm_batch": 1, "has_bias": float(bias)})


@register("MatMul")
def matmul(view: NodeView) -> OpCost:
    a, b = view.inp(0).shape, view.inp(1).shape
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    m, k, n = a2[-2], a2[-1], b2[-1]
    batch_a, batch_b = a2[:-2], b2[:-2]
    rank = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (rank - len(batch_a)) + tuple(batch_a)
    batch_b = (1,) * (rank - len(batch_b)) + tuple(batch_b)
    batch = math.prod(max(p, q) for p, q in zip(batch_a, batch_b))
    macs = float(batch) * m * n * k
    if len(b) == 2 and is_weight(view.inp(1)) and not is_weight(view.inp(0)) and gemm_fold_enabled():
        m, batch = m * batch, 1  # at::matmul folds the activation's leading dimensions into M
    return OpCost(flops=2 * macs, macs=macs,
                  hp={"in_features": k, "out_features": n, "mm_m": m, "mm_batch": batch})


@register("Einsum")
def einsum(view: NodeView) -> OpCost:
    eq = view.attr("equation", "").replace(" ", "")
    lhs = eq.split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for term, t in zip(lhs, view.inputs):
        if t is None:
            continue
        letters = term.replace("...", "")
        ell = t.rank - len(letters)  # dims covered by an ellipsis
        dims = list(t.shape)
        if "..." in term:
            pos = term.index("...")
            for j, d in enumerate(reversed(dims[pos:pos + ell])):  # broadcast: aligned from the right
                sizes[f"...{j}"] = max(sizes.get(f"...{j}", 1), d)
            dims = dims[:pos] + dims[pos + ell:]
        for ch, d in zip(letters, dims):
            sizes[ch] = max(sizes.get(ch, 1), d)
    operands = sum(1 for t in view.inputs if t is not None)
    out = view.out(0)
    if operands < 2:
        return OpCost(flops=float(view.in_numel))
    macs = float(math.prod(sizes.values()))
    contracted = macs / max(out.numel, 1)
    return OpCost(flops=2 * macs, macs=macs,
                  hp={"in_features": contracted, "out_features": out.shape[-1] if out.rank else 1,
                      "mm_batch": operands})
