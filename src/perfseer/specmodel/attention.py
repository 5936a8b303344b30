"""Fused scaled-dot-product attention: which kernels of a step are one attention, and that
attention as the single kernel PyTorch 2 runs.

``F.scaled_dot_product_attention`` (what timm's ViTs and HuggingFace's ``sdpa`` models call) is
one kernel in PyTorch 2.x: FlashAttention (FP16/BF16 on sm80 and later) or the memory-efficient
kernel (the other GPUs and FP32).  It keeps the ``L x S`` scores on chip: its memory traffic is
Q, K, V, the output O (and an additive mask where there is one), its FLOPs both batched GEMMs
plus the softmax.  PyTorch 1.x (no SDPA) and the math fallback run it as two batched GEMMs and a
softmax with the score matrix in memory, which is how :func:`perfseer.specmodel.compose.node_kernels`
composes it; this module turns those kernels into the fused one where the software has it.

A graph shows an attention in one of two forms:

- an ONNX ``Attention`` node (opset 23, ``hf:...@fused``), one attention by itself;
- the exporter's decomposition of ``scaled_dot_product_attention`` (the form of every timm and
  ``hf:`` graph): ``Mul(q, sqrt(scale))`` and ``Mul(Transpose(k), sqrt(scale))`` into a ``MatMul``
  without weights, an optional ``Add`` of the mask, ``Softmax`` and a ``MatMul`` by V.  Both
  operands of the score ``MatMul`` scaled by a scalar is that decomposition's signature: a model
  that writes its attention out (``q * scale @ k.transpose(-2, -1)``, timm's ``fused_attn=False``
  modules such as XCiT, VOLO or SwinV2-CR, HF's ``eager``) scales one operand or the scores, and
  runs unfused under any PyTorch.

:func:`attention_groups` numbers each attention's nodes (the kernel table's ``attn`` column);
:func:`fuse_attention` replaces each numbered group's kernels by one fused kernel
(:func:`perfseer.specmodel.kernels.attention_rows`) and, in a training step, their gradients by one
fused backward kernel (:mod:`perfseer.specmodel.backward`).  The causal mask of an ``is_causal``
attention, which the exporter builds out of the group, stays as it was composed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfseer.features import schema
from perfseer.specmodel import kernels as kt

_I = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
# operators that launch nothing between the parts of an attention (eval-mode dropout, reshapes)
_PASS = {"Identity", "Dropout", "Reshape", "Squeeze", "Unsqueeze"}
SCALAR_BYTES = 8.0  # a scaling constant's weight bytes (one FP32 or FP64 scalar)


def attention_groups(x: np.ndarray, op_types, edge_index: np.ndarray | None) -> np.ndarray:
    """The attention each node belongs to: ``1, 2, ...`` per attention, ``0`` for other nodes.

    Args:
        x: node features ``[num_nodes, len(schema.NODE_FEATURES)]``.
        op_types: each node's ONNX op type.
        edge_index: the ``[2, num_edges]`` data-flow edges (without them only ``Attention`` nodes
            are found).

    An ``Attention`` node with MACs is a group of its own; a decomposed one is the ``Softmax``
    with its two ``MatMul`` (no weights, the second over as many keys as the first's output has
    columns, the same number of queries), the two scalar ``Mul`` feeding the first, the
    ``Transpose`` of K above the second ``Mul``, the ``Add`` of a mask and the ``IsNaN``/``Where``
    guard after the ``Softmax``, each feeding only the next part.
    """
    ops = np.asarray(list(op_types), dtype=object)
    n = len(ops)
    group = np.zeros(n, dtype=np.int64)
    if not np.isin(ops, ["Softmax", "Attention"]).any():  # a CNN: no attention to look for
        return group
    col = lambda name: x[:, _I[name]].astype(float)  # noqa: E731
    macs, wb = col("macs"), col("weight_bytes")
    mm_m, kin, nout = col("mm_m"), col("in_features"), col("out_features")
    next_id = 1
    e = np.asarray(edge_index if edge_index is not None else np.zeros((2, 0)), dtype=np.int64).reshape(2, -1)
    preds: dict[int, list[int]] = {}
    succs: dict[int, list[int]] = {}
    for s, d in e.T:
        preds.setdefault(int(d), []).append(int(s))
        succs.setdefault(int(s), []).append(int(d))
    for i in range(n):
        if ops[i] == "Attention" and macs[i] > 0:
            group[i] = next_id
            next_id += 1
            continue
        if ops[i] != "Softmax" or not e.size:
            continue
        found = _decomposed(i, ops, preds, succs, macs, wb, mm_m, kin, nout)
        if found and not group[found].any():
            group[found] = next_id
            next_id += 1
    return group


def _decomposed(s, ops, preds, succs, macs, wb, mm_m, kin, nout) -> list[int] | None:
    """The nodes of the decomposed attention around the ``Softmax`` node ``s``, or ``None``."""
    def only(nodes):
        return nodes[0] if len(nodes) == 1 else None

    def single_use(i):
        return len(succs.get(i, [])) == 1

    def weightless_matmul(i):
        return i is not None and ops[i] == "MatMul" and macs[i] > 0 and wb[i] == 0

    nodes = [s]
    p = only(preds.get(s, []))
    if p is not None and ops[p] == "Add" and single_use(p):
        nodes.append(p)
        mm = [q for q in preds.get(p, []) if weightless_matmul(q)]
        p = mm[0] if len(mm) == 1 else None
    if not weightless_matmul(p) or not single_use(p):
        return None
    scores = p
    muls = preds.get(scores, [])
    if len(muls) != 2 or any(ops[m] != "Mul" or not single_use(m) or wb[m] > SCALAR_BYTES for m in muls):
        return None
    nodes += [scores, *muls]
    for m in muls:  # the K side: Transpose (through reshapes) above its Mul
        q = only(preds.get(m, []))
        while q is not None and ops[q] in _PASS and single_use(q):
            q = only(preds.get(q, []))
        if q is not None and ops[q] == "Transpose" and single_use(q):
            nodes.append(q)
    after = succs.get(s, [])
    if len(after) == 2 and {ops[i] for i in after} == {"IsNaN", "Where"}:
        # the masked form's guard of fully masked rows, Where(IsNaN(p), 0, p): in the fused kernel too
        nan = after[0] if ops[after[0]] == "IsNaN" else after[1]
        where = after[1] if nan == after[0] else after[0]
        if succs.get(nan, []) != [where]:
            return None
        nodes += [nan, where]
        after = succs.get(where, [])
    q = only(after)
    while q is not None and ops[q] in _PASS and ops[q] != "Reshape" and single_use(q):
        q = only(succs.get(q, []))
    if not weightless_matmul(q) or mm_m[q] != mm_m[scores] or kin[q] != nout[scores]:
        return None
    return nodes + [q]


def fuse_attention(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (a step's kernels with an ``attn`` column, :func:`perfseer.specmodel.compose.step_kernels`)
    with each attention's kernels replaced by one fused kernel, and in a training step their
    gradient kernels by one fused backward kernel; other columns of the fused rows (``node``,
    ``op``, ``scale``) are those of the group's first GEMM.  A table without attentions is
    returned as is.

    Per attention: the first GEMM (the scores, ``B x L x S`` over ``E``) and the second (``B x L x
    Ev`` over ``S``) give the sizes; the mask's bytes are what the group's ``Add`` (its ``op``)
    moves besides reading and writing the scores (none where the table has no ``op`` column)."""
    if "attn" not in table:
        return table
    g = table["attn"].to_numpy()
    if not (g > 0).any():
        return table
    passes = table["pass"].to_numpy() if "pass" in table else np.full(len(table), "fw", dtype=object)
    fam = table["family"].to_numpy()
    fw = (passes == "fw") & (g > 0)
    gemm = np.flatnonzero(fw & (fam == "gemm"))
    gemm = gemm[np.argsort(g[gemm], kind="stable")]  # each group's GEMMs in the table's order
    ids, first, counts = np.unique(g[gemm], return_index=True, return_counts=True)
    ok = counts == 2
    ids, a, b = ids[ok], gemm[first[ok]], gemm[first[ok] + 1]
    if not len(ids):
        return table
    num = lambda c, idx: table[c].to_numpy(dtype=float)[idx]  # noqa: E731
    db = num("dtype_bytes", a)
    mask = np.zeros(len(ids))
    if "op" in table:  # the mask: what the Add reads besides the scores (it writes the scores)
        add = np.flatnonzero(fw & (fam == "vec") & (table["op"].to_numpy() == "Add"))
        at = np.searchsorted(ids, g[add])
        ok_add = (at < len(ids)) & (ids[np.minimum(at, len(ids) - 1)] == g[add])
        add, at = add[ok_add], at[ok_add]
        scores = num("B", a) * num("M", a) * num("N", a)
        np.add.at(mask, at, np.maximum(num("bytes", add) - 2.0 * scores[at] * db[at], 0.0))
    f = kt.attention_rows(num("B", a), num("M", a), num("N", a), num("K", a), num("N", b), dtype_bytes=db,
                          mask_bytes=mask, frame=False)
    rows = [_with_rest(f, table, a, "fw")]
    first_fw = pd.Series(np.flatnonzero(fw)).groupby(g[fw]).min().reindex(ids).to_numpy()
    pos = [first_fw]
    if (passes == "bw").any():
        from perfseer.specmodel.backward import backward_table

        bw = backward_table(f, np.full(len(ids), "attention", dtype=object), frame=False)
        src = bw.pop("src")
        rows.append(_with_rest(bw, table, a[src], "bw"))
        # where each group's first gradient kernel was (its forward GEMM's place if it had none)
        in_bw = np.flatnonzero((passes == "bw") & np.isin(g, ids))
        first_bw = pd.Series(in_bw).groupby(g[in_bw]).min().reindex(ids).to_numpy()
        pos.append(np.where(np.isnan(first_bw), a, first_bw)[src])
    drop = np.isin(g, ids)
    keep = table[~drop]
    fused = pd.DataFrame({k: np.concatenate([np.asarray(r[k]) for r in rows]) for k in rows[0]})
    # each fused kernel where its group's first kernel of the same pass was
    pos = np.concatenate(pos).astype(float)
    order = np.concatenate([np.flatnonzero(~drop).astype(float), pos - 0.5])
    out = pd.concat([keep, fused[list(table.columns)]], ignore_index=True)
    return out.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)


def _with_rest(cols: dict, table: pd.DataFrame, at: np.ndarray, p: str) -> dict:
    """Kernel columns ``cols`` plus the table's other columns taken from rows ``at`` (``pass`` set
    to ``p``)."""
    out = dict(cols)
    for c in table.columns:
        if c not in out:
            out[c] = table[c].to_numpy()[at]
    if "pass" in table:
        out["pass"] = np.full(len(at), p, dtype=object)
    return out
