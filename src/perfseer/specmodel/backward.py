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
- ``attn`` (a fused attention, PyTorch 2): one fused kernel (FlashAttention's / the
  memory-efficient kernel's backward) that recomputes the scores and runs the four gradient
  GEMMs: ``2 B L S (3 E + 2 Ev)`` FLOPs (2.5x the forward's GEMMs when ``E = Ev``) plus
  :data:`ATTENTION_BACKWARD_SCORE_FLOPS` per score; it reads Q, K, V, O, dO (and the mask) and
  writes dQ, dK, dV.
- parameters: no accumulation kernel (``zero_grad(set_to_none=True)``, PyTorch's default since
  2.0: the first gradient is stored, not added).

The optimizer step is not part of the backward pass; :mod:`perfseer.specmodel.compose` adds it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfseer.specmodel import kernels as kt

# FLOPs per score of a fused attention's backward besides its GEMMs: the recomputed scale and
# exponential, and the softmax gradient dS = P (dP - D)
ATTENTION_BACKWARD_SCORE_FLOPS = 8.0
PASS_THROUGH = {"add", "sub", "iadd", "Identity", "contiguous", "full", "ones", "zeros", "arange", "fill", "fill_",
                "cumsum", "lt", "gt", "eq", "ne", "where_mask"}


def backward_kernels(fw: pd.DataFrame, fn: str = "") -> pd.DataFrame:
    """The gradient kernels of the forward kernels ``fw`` (one operation's, named ``fn``)."""
    return backward_table(fw, np.full(len(fw), fn, dtype=object)).drop(columns="src")


def backward_table(fw: pd.DataFrame | dict, fns, frame: bool = True) -> pd.DataFrame | dict:
    """The gradient kernels of the forward kernels ``fw`` (a kernel table, or its columns as a
    dict of arrays), each row of which belongs to the operation named in ``fns`` (one name per
    row): for each forward kernel in order, its gradient kernels in the order the rules above
    list them, and a ``src`` column (the position of the forward kernel in ``fw``).  Computed
    column-wise over the whole table; ``frame=False``: the columns as a dict of arrays."""
    fam = np.asarray(fw["family"], dtype=object)
    n = len(fam)
    fns = np.asarray(list(fns), dtype=object).reshape(-1)
    if n == 0:
        return _empty(frame)
    c = {k: np.asarray(fw[k], dtype=float) for k in kt.COLUMNS[1:]}
    db = c["dtype_bytes"]
    pos = np.arange(n)
    parts = []  # (kernel table, forward position, slot)

    def add(t: dict, sel: np.ndarray, slot: int):  # the columns of a kernel table (frame=False: no DataFrame)
        parts.append((t, sel, np.full(len(sel), slot)))

    sel = np.flatnonzero(fam == "gemm")
    if len(sel):
        B, M, N, K = (c[k][sel] for k in ("B", "M", "N", "K"))
        d = db[sel]
        shared = c["weights"][sel] > 0  # a layer's weight, read once for all B
        add(kt.gemm_rows(B, M, K, N, dtype_bytes=d, shared_b=shared.astype(float), frame=False), sel, 0)
        add(kt.gemm_rows(np.where(shared, 1.0, B), K, N, np.where(shared, B * M, M), dtype_bytes=d, frame=False),
            sel, 1)
        bias = c["flops"][sel] > 2 * B * M * N * K * 1.0000001  # had a bias
        if bias.any():
            # a column sum: costed as a memory-bound pass over what it reads
            b, m, nn, dd = B[bias], M[bias], N[bias], d[bias]
            add(kt.vec_rows(b * m * nn, 1, 1, dtype_bytes=dd, read_bytes=b * m * nn * dd, write_bytes=nn * dd,
                            frame=False), sel[bias], 2)
    sel = np.flatnonzero(fam == "conv")
    if len(sel):
        M, N, K, d = c["M"][sel], c["N"][sel], c["K"][sel], db[sel]
        for slot, (m, nn, k) in enumerate(((M, K, N), (N, K, M))):
            g = kt.gemm_rows(c["B"][sel], m, nn, k, dtype_bytes=d, frame=False)
            g["family"], g["kernel"] = np.full(len(sel), "conv", dtype=object), c["kernel"][sel].copy()
            g["weights"] = np.zeros(len(sel))
            add(g, sel, slot)
    skip = np.isin(fns, list(PASS_THROUGH)) | (c["inputs"] == 0)
    sel = np.flatnonzero((fam == "vec") & ~skip)
    if len(sel):
        e, d = c["elems"][sel], db[sel]
        ins = np.maximum(c["inputs"][sel], 1.0)
        add(kt.vec_rows(e, ins + 1, np.maximum(c["flops"][sel] / np.maximum(e, 1), 1.0), dtype_bytes=d,
                        read_bytes=(ins + 1) * e * d, write_bytes=ins * e * d, frame=False), sel, 0)
    sel = np.flatnonzero(fam == "ln")
    if len(sel):
        rows, cols, d = c["rows"][sel], c["cols"][sel], db[sel]
        t = kt.rowwise_rows("ln", rows, cols, dtype_bytes=d, frame=False)
        t["bytes"] *= 2.0
        t["flops"] *= 2.0
        add(t, sel, 0)
        add(kt.vec_rows(rows * cols, 2, 2, dtype_bytes=d, read_bytes=2 * rows * cols * d, write_bytes=2 * cols * d,
                        frame=False), sel, 1)
    sel = np.flatnonzero(fam == "softmax")
    if len(sel):
        t = kt.rowwise_rows("softmax", c["rows"][sel], c["cols"][sel], dtype_bytes=db[sel], frame=False)
        t["bytes"] *= 1.5
        add(t, sel, 0)
    sel = np.flatnonzero(fam == "attn")
    if len(sel):
        B, L, Ev, S, E, d = c["B"][sel], c["M"][sel], c["N"][sel], c["K"][sel], c["cols"][sel], db[sel]
        scores = B * L * S
        qkv, o = B * (L * E + S * E + S * Ev), B * L * Ev
        mask = np.maximum(c["bytes"][sel] - (qkv + o) * d, 0.0)
        add(kt.attention_backward_rows(B, L, S, E, Ev, 2 * scores * (3 * E + 2 * Ev) + ATTENTION_BACKWARD_SCORE_FLOPS
                                       * scores, (2 * qkv + 2 * o) * d + mask, dtype_bytes=d,
                                       inputs=c["inputs"][sel] + 2, frame=False), sel, 0)
    if not parts:
        return _empty(frame)
    src = np.concatenate([p[1] for p in parts])
    slot = np.concatenate([p[2] for p in parts])
    cols_out = {}
    for k in kt.COLUMNS:
        cols_out[k] = np.concatenate([np.asarray(p[0][k], dtype=object if k == "family" else float) for p in parts])
    order = np.lexsort((slot, src))
    keep = order[np.isfinite(cols_out["flops"][order])]
    out = {k: v[keep] for k, v in cols_out.items()}
    out["src"] = pos[src[keep]]
    return pd.DataFrame(out) if frame else out


def _empty(frame: bool):
    if frame:
        out = kt.empty_table()
        out["src"] = pd.Series(dtype=np.int64)
        return out
    return {**{k: np.zeros(0, dtype=object if k == "family" else float) for k in kt.COLUMNS},
            "src": np.zeros(0, dtype=np.int64)}
