"""The backward pass as kernels: each forward kernel's gradient kernels, by family.

The rules (what PyTorch's autograd launches, simplified to one kernel per gradient tensor):

- ``gemm`` ``C[B, M, N] = A[B, M, K] @ W[K, N]``: ``dA = dC @ W^T`` (a ``B x M x K`` GEMM over
  ``N``) and ``dW = A^T @ dC`` (``K x N`` over ``B M`` for a shared weight, else ``B`` GEMMs
  ``K x N`` over ``M``); a bias adds a column-sum of ``dC`` (a memory-bound kernel reading it).
- ``conv``: data gradient and weight gradient, each an implicit GEMM of the forward's FLOPs
  (``dX``: ``M x K`` over ``N``; ``dW``: ``N x K`` over ``M``).
- reductions (a bias gradient, layer norm's weight gradients) are costed as a memory-bound pass
  over the elements they read.
- ``vec``: one kernel reading the output gradient and the saved inputs, writing each input's
  gradient (an addition's gradient is the output gradient itself: no kernel).
- ``ln``: the input gradient (reads ``x``, ``dy``; writes ``dx``: twice the forward's traffic)
  plus the weight/bias gradient column sums (a memory-bound read of ``x`` and ``dy``).
- ``softmax``: reads ``y`` and ``dy``, writes ``dx`` (1.5x the forward's traffic).
- parameters: no accumulation kernel (``zero_grad(set_to_none=True)``, PyTorch's default since
  2.0: the first gradient is stored, not added).

The optimizer step is not part of the backward pass; :mod:`perfseer.specmodel.compose` adds it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfseer.specmodel import kernels as kt

PASS_THROUGH = {"add", "sub", "iadd", "Identity", "contiguous", "full", "ones", "zeros", "arange", "fill", "fill_",
                "cumsum", "lt", "gt", "eq", "ne", "where_mask"}


def backward_kernels(fw: pd.DataFrame, fn: str = "") -> pd.DataFrame:
    """The gradient kernels of the forward kernels ``fw`` (one operation's)."""
    parts = []
    for _, r in fw.iterrows():
        db, fam = r["dtype_bytes"], r["family"]
        if fam == "gemm":
            B, M, N, K = r["B"], r["M"], r["N"], r["K"]
            shared = r["weights"] > 0  # a layer's weight, read once for all B
            parts.append(kt.gemm_rows(B, M, K, N, dtype_bytes=db, shared_b=float(shared)))
            if shared:
                parts.append(kt.gemm_rows(1, K, N, B * M, dtype_bytes=db))
            else:
                parts.append(kt.gemm_rows(B, K, N, M, dtype_bytes=db))
            if r["flops"] > 2 * B * M * N * K * 1.0000001:  # had a bias
                # a column sum: costed as a memory-bound pass over what it reads
                parts.append(kt.vec_rows(B * M * N, 1, 1, dtype_bytes=db, read_bytes=B * M * N * db, write_bytes=N * db))
        elif fam == "conv":
            for m, n, k in ((r["M"], r["K"], r["N"]), (r["N"], r["K"], r["M"])):
                g = kt.gemm_rows(r["B"], m, n, k, dtype_bytes=db)
                g["family"], g["kernel"], g["weights"] = "conv", r["kernel"], 0.0
                parts.append(g)
        elif fam == "vec":
            if fn in PASS_THROUGH or r["inputs"] == 0:
                continue
            n = r["elems"]
            ins = max(r["inputs"], 1.0)
            parts.append(kt.vec_rows(n, ins + 1, max(r["flops"] / max(n, 1), 1.0), dtype_bytes=db,
                                     read_bytes=(ins + 1) * n * db, write_bytes=ins * n * db))
        elif fam == "ln":
            t = kt.rowwise_rows("ln", r["rows"], r["cols"], dtype_bytes=db)
            t["bytes"] *= 2.0
            t["flops"] *= 2.0
            parts.append(t)
            parts.append(kt.vec_rows(r["rows"] * r["cols"], 2, 2, dtype_bytes=db,
                                     read_bytes=2 * r["rows"] * r["cols"] * db, write_bytes=2 * r["cols"] * db))
        elif fam == "softmax":
            t = kt.rowwise_rows("softmax", r["rows"], r["cols"], dtype_bytes=db)
            t["bytes"] *= 1.5
            parts.append(t)
    if not parts:
        return kt.empty_table()
    out = pd.concat(parts, ignore_index=True)
    return out[np.isfinite(out["flops"])].reset_index(drop=True)
