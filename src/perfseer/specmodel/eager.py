"""What eager PyTorch runs where the exported graph says otherwise: activations it runs as one
kernel where the graph has two, and slices and broadcasts it runs as no kernel at all.

``nn.SiLU`` (Swish, ``x * sigmoid(x)``: EfficientNets, the ``*ts`` ResNets of timm, RegNetY's
and NFNet's variants...) is one element-wise kernel in PyTorch since 1.7 (``silu``: reads ``x``,
writes ``y``) and its gradient one more (``silu_backward``: reads ``dy`` and ``x``, writes
``dx``).  ONNX has no SiLU operator: the exporter writes it as ``Sigmoid`` and a ``Mul`` of its
input by its output, which :func:`perfseer.specmodel.compose.node_kernels` composes as two
kernels moving five times the tensor (the ``Sigmoid`` reads ``x`` and writes ``s``, the ``Mul``
reads ``x`` and ``s`` and writes ``y``), and a training step's gradients as two more moving nine
times it.  :func:`fuse_silu` keeps each such pair's ``Sigmoid`` kernel, whose traffic is exactly
the fused kernel's (one read, one write; its gradient: two reads, one write), and drops the
``Mul``, adding its FLOPs to the ``Sigmoid``'s.

A pair is recognised in the kernel table itself (no graph needed): a ``Sigmoid`` kernel followed
in the same pass by a ``Mul`` over both inputs of the ``Sigmoid``'s size (its ``elems``, the
elements it reads, twice the ``Sigmoid``'s).  A squeeze-and-excitation gate (``Sigmoid`` of a
pooled ``B x C`` tensor, then a ``Mul`` by the ``B x C x H x W`` map) does not match and stays
two kernels, as eager PyTorch runs it.  A gated unit written out as ``a * sigmoid(b)`` with ``a``
and ``b`` of one size matches too, though eager PyTorch runs it as two kernels: such layers are
rare in the models perfseer is used on (GLU is its own ``F.glu`` kernel).

Slicing (``x[:, 0]``, ``unbind``, ``narrow``) and ``expand`` return views in PyTorch: no kernel
runs, the consumer reads the strided or broadcast tensor.  The exporter writes them as ``Slice``
and ``Expand`` nodes, which :func:`perfseer.specmodel.compose.node_kernels` composes as copies (a
ViT's ``qkv.unbind(0)`` three copies of its Q, K, V per block, an ECA gate's ``expand_as`` a copy
of the whole feature map); :func:`drop_views` removes their forward kernels (their gradients,
PyTorch's ``slice_backward`` into zeros and ``expand``'s sum, are kernels and stay).  A consumer
that needs contiguous memory copies the view, which the table, without its consumers, cannot
see; so the slices go only where the software fuses attention: PyTorch 2's
``scaled_dot_product_attention`` reads a ViT's strided Q, K and V in place, while the unfused
attention's ``torch.matmul`` reshapes them into copies (the copies the ``Slice`` kernels stand
for).  ``torch.split``/``chunk`` (``Split``: the channel splits of Res2Net and ShuffleNet, each
into a convolution, which copies it) stays a copy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

REL_TOL = 1e-3  # relative tolerance of "the Mul reads twice the Sigmoid's elements"
VIEW_OPS = ("Slice", "Expand")  # views in eager PyTorch: no forward kernel


def silu_pairs(table: pd.DataFrame) -> np.ndarray:
    """A boolean mask of the ``Mul`` kernels of ``table`` that finish a SiLU (the row right after
    a ``Sigmoid`` of the same pass, reading twice its elements); all false without an ``op``
    column."""
    n = len(table)
    if "op" not in table or n < 2:
        return np.zeros(n, dtype=bool)
    op = table["op"].astype(str).to_numpy()
    el = table["elems"].to_numpy(dtype=float)
    passes = table["pass"].astype(str).to_numpy() if "pass" in table else np.full(n, "fw")
    fam = table["family"].astype(str).to_numpy()
    prev_sig = np.zeros(n, dtype=bool)
    prev_sig[1:] = (op[:-1] == "Sigmoid") & (fam[:-1] == "vec") & (el[:-1] > 0)
    prev_el = np.zeros(n)
    prev_el[1:] = el[:-1]
    same_pass = np.zeros(n, dtype=bool)
    same_pass[1:] = passes[1:] == passes[:-1]
    return (op == "Mul") & (fam == "vec") & prev_sig & same_pass & (np.abs(el - 2.0 * prev_el) <= REL_TOL * el)


def fuse_silu(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each SiLU's two kernels (forward, and in a training step its gradient's)
    as the one kernel eager PyTorch runs: the ``Sigmoid`` kept with the ``Mul``'s FLOPs added,
    the ``Mul`` dropped.  A table without a pair is returned as is."""
    mul = silu_pairs(table)
    if not mul.any():
        return table
    out = table.copy()
    flops = out["flops"].to_numpy(dtype=float).copy()
    at = np.flatnonzero(mul)
    flops[at - 1] += flops[at]
    out["flops"] = flops
    return out.loc[~mul].reset_index(drop=True)


def drop_views(table: pd.DataFrame, slices: bool = True) -> pd.DataFrame:
    """``table`` without the forward kernels of :data:`VIEW_OPS` (views in eager PyTorch; the
    ``Slice`` ones only where ``slices``: the software fuses attention); a table without an ``op``
    column or without such kernels is returned as is."""
    if "op" not in table or not len(table):
        return table
    view = table["op"].isin(VIEW_OPS if slices else ("Expand",)).to_numpy().copy()
    if "pass" in table:
        view &= (table["pass"] == "fw").to_numpy()
    if not view.any():
        return table
    return table.loc[~view].reset_index(drop=True)
