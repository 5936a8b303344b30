"""Kernels as the spec model sees them, and their roofline / wave-quantisation features.

A *kernel table* is a :class:`pandas.DataFrame`, one row per GPU kernel, with the columns of
:data:`COLUMNS`:

- ``family``: ``gemm`` (matmul, batched matmul, linear: ``B`` independent ``M x K @ K x N``
  products), ``conv`` (a convolution as its implicit GEMM: ``M`` = output pixels x batch, ``N`` =
  output channels, ``K`` = input channels x kernel area, ``kernel`` the kernel side), ``vec``
  (element-wise and other memory-bound kernels), ``ln`` (layer normalisation over rows of
  ``cols``), ``softmax`` (softmax over rows of ``cols``) or ``attn`` (a fused attention,
  :func:`attention_rows`: ``B`` heads x batch, ``M`` queries, ``K`` keys, ``N`` the value and
  ``cols`` the query/key head size);
- ``flops`` and ``bytes`` (read + written, at ``dtype_bytes`` per element), which place the kernel
  on the device's roofline;
- the family's dimensions (``B``, ``M``, ``N``, ``K``, ``kernel``, ``rows``, ``cols``,
  ``elems``, ``inputs``; 0 where not used), and ``weights``, the parameter elements the kernel
  reads (their gradients are accumulated in a training step).

:func:`features` turns a kernel table and the device each row runs on into the inputs of the
learned model (:mod:`perfseer.specmodel.net`).  As in NeuSight (Lee et al., ASPLOS'25), the
model does not predict time directly: it predicts how far above the roofline bound
``max(flops / peak, bytes / bandwidth)`` a kernel runs, from features that describe the bound
(compute and memory time, arithmetic intensity against the ridge point), the tiling of the
work over the SMs (waves of 128x128 and 64x64 output tiles, the occupancy of the last wave) and
the device (SMs, bandwidth, peak, L2).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfseer.specmodel import rules

FAMILIES = ("gemm", "conv", "vec", "ln", "softmax", "attn")
COLUMNS = ("family", "flops", "bytes", "dtype_bytes", "B", "M", "N", "K", "kernel", "rows", "cols", "elems", "inputs",
           "weights")
DEVICE_COLUMNS = ("peak_tflops", "bw_gbs", "sms", "l2_mib", "clock_mhz", "w_per_tflop", "tdp_w")


def empty_table() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "family" else float) for c in COLUMNS})


def gemm_rows(B, M, N, K, dtype_bytes=4.0, bias=0.0, shared_b=0.0, frame: bool = True) -> pd.DataFrame:
    """GEMM kernels: ``B`` products of ``M x K`` by ``K x N``.  ``shared_b``: the right operand
    is one weight matrix read once for all ``B`` (a linear layer); ``bias``: a bias of ``N``
    added to the output (counted as ``B M N`` FLOPs).  ``frame=False``: the columns as a dict
    of arrays (what a DataFrame of them holds, without building one)."""
    B, M, N, K = (np.asarray(v, dtype=float) for v in (B, M, N, K))
    bias, shared_b = np.broadcast_to(np.asarray(bias, float), B.shape), np.broadcast_to(np.asarray(shared_b, float), B.shape)
    b_elems = np.where(shared_b > 0, K * N, B * K * N)
    elems = B * M * K + b_elems + B * M * N + bias * N
    return _table("gemm", frame, flops=2 * B * M * N * K + bias * B * M * N, bytes=elems * dtype_bytes,
                  dtype_bytes=dtype_bytes, B=B, M=M, N=N, K=K, elems=B * M * N, inputs=2.0,
                  weights=np.where(shared_b > 0, K * N + bias * N, 0.0))


def conv_rows(batch, cin, cout, kernel, h_in, w_in, stride, pad, groups=1.0, dtype_bytes=4.0) -> pd.DataFrame:
    """Convolutions (square kernels) as implicit GEMMs per group."""
    batch, cin, cout, kernel, h_in, w_in, stride, pad, groups = (
        np.asarray(v, dtype=float) for v in (batch, cin, cout, kernel, h_in, w_in, stride, pad, groups))
    ho = np.floor((h_in + 2 * pad - kernel) / stride) + 1
    wo = np.floor((w_in + 2 * pad - kernel) / stride) + 1
    M, N, K = batch * ho * wo, cout / groups, cin / groups * kernel * kernel
    elems = batch * cin * h_in * w_in + cout * K + batch * cout * ho * wo
    return _table("conv", flops=2 * groups * M * N * K, bytes=elems * dtype_bytes, dtype_bytes=dtype_bytes,
                  B=groups, M=M, N=N, K=K, kernel=kernel, elems=batch * cout * ho * wo, inputs=2.0, weights=cout * K)


def vec_rows(elems, inputs, flops_per_elem, dtype_bytes=4.0, read_bytes=None, write_bytes=None,
             frame: bool = True) -> pd.DataFrame:
    """Memory-bound kernels of ``elems`` output elements reading ``inputs`` tensors of that size
    (or ``read_bytes``/``write_bytes`` where they differ: gathers, reductions, copies); ``frame``
    as for :func:`gemm_rows`."""
    elems, inputs = np.asarray(elems, float), np.asarray(inputs, float)
    rb = elems * inputs * dtype_bytes if read_bytes is None else np.asarray(read_bytes, float)
    wb = elems * dtype_bytes if write_bytes is None else np.asarray(write_bytes, float)
    return _table("vec", frame, flops=elems * np.asarray(flops_per_elem, float), bytes=rb + wb, dtype_bytes=dtype_bytes,
                  elems=elems, inputs=inputs)


# FLOPs per element of a dropout (mask compare and scale), as NeuSight's traces are costed
DROPOUT_FLOPS = 2


def dropout_rows(elems, dtype_bytes=4.0, frame: bool = True) -> pd.DataFrame:
    """Training-mode dropout's forward kernel over ``elems`` elements: reads the tensor, draws the
    mask and writes the scaled tensor and the one-byte mask (PyTorch's ``native_dropout``).  Its
    backward (:func:`perfseer.specmodel.backward.backward_kernels` with ``fn="dropout"``) is one
    element-wise kernel."""
    elems = np.asarray(elems, float)
    return vec_rows(elems, 1, DROPOUT_FLOPS, dtype_bytes=dtype_bytes, write_bytes=elems * (dtype_bytes + 1),
                    frame=frame)


def rowwise_rows(family: str, rows, cols, dtype_bytes=4.0, affine=True, frame: bool = True) -> pd.DataFrame:
    """Layer norm (``ln``: 8 FLOPs per element, a weight and bias of ``cols``) or softmax (5 FLOPs
    per element) over ``rows`` rows of ``cols``; ``frame`` as for :func:`gemm_rows`."""
    rows, cols = np.asarray(rows, float), np.asarray(cols, float)
    n = rows * cols
    extra = 2 * cols if (family == "ln" and affine) else 0 * cols
    return _table(family, frame, flops=(8.0 if family == "ln" else 5.0) * n, bytes=(2 * n + extra) * dtype_bytes,
                  dtype_bytes=dtype_bytes, rows=rows, cols=cols, elems=n, inputs=1.0, weights=extra / 1.0)


# FLOPs per score of a fused attention besides its GEMMs: the scale and the softmax (as
# perfseer.features.ops.attention counts them), one more with an additive mask
ATTENTION_SCORE_FLOPS = 6.0


def attention_rows(B, L, S, E, Ev, dtype_bytes=2.0, mask_bytes=0.0, frame: bool = True) -> pd.DataFrame:
    """Fused attention kernels (FlashAttention / the memory-efficient kernel of PyTorch 2's
    ``scaled_dot_product_attention``): ``B`` (batch x heads) attentions of ``L`` queries over
    ``S`` keys, query/key head size ``E``, value head size ``Ev``.  FLOPs: both GEMMs
    (``2 B L S (E + Ev)``) and :data:`ATTENTION_SCORE_FLOPS` per score (+1 with a mask); bytes:
    Q, K, V and O at ``dtype_bytes`` plus ``mask_bytes`` (the scores stay on chip).  Columns:
    ``M`` = L, ``N`` = Ev, ``K`` = S (the loop over keys), ``cols`` = E, ``elems`` the output's
    elements; ``frame`` as for :func:`gemm_rows`."""
    B, L, S, E, Ev = (np.asarray(v, dtype=float) for v in (B, L, S, E, Ev))
    mask = np.broadcast_to(np.asarray(mask_bytes, float), B.shape)
    scores = B * L * S
    flops = 2 * scores * (E + Ev) + (ATTENTION_SCORE_FLOPS + (mask > 0)) * scores
    elems = B * (L * E + S * E + S * Ev + L * Ev)
    return _table("attn", frame, flops=flops, bytes=elems * dtype_bytes + mask, dtype_bytes=dtype_bytes, B=B, M=L,
                  N=Ev, K=S, cols=E, elems=B * L * Ev, inputs=3.0 + (mask > 0))


def attention_backward_rows(B, L, S, E, Ev, flops, bytes_, dtype_bytes=2.0, inputs=3.0,
                            frame: bool = True) -> pd.DataFrame:
    """A fused attention's backward kernels (:mod:`perfseer.specmodel.backward` gives their
    ``flops`` and ``bytes_``), with :func:`attention_rows`' columns (``elems``: the Q, K and V
    elements, the gradients it writes)."""
    B, L, S, E, Ev = (np.asarray(v, dtype=float) for v in (B, L, S, E, Ev))
    return _table("attn", frame, flops=flops, bytes=bytes_, dtype_bytes=dtype_bytes, B=B, M=L, N=Ev, K=S, cols=E,
                  elems=B * (L * E + S * E + S * Ev), inputs=inputs)


def _table(family: str, frame: bool = True, **cols) -> pd.DataFrame | dict:
    n = max(np.size(v) for v in cols.values())
    out = {"family": np.full(n, family, dtype=object)}
    for c in COLUMNS[1:]:
        v = cols.get(c, 0.0)
        out[c] = np.broadcast_to(np.asarray(v, dtype=float), (n,)).copy()
    return pd.DataFrame(out) if frame else out


def _waves(tiles: np.ndarray, sms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``log10(tiles / SMs)`` and the occupancy of the work over whole waves (1 = no idle SM)."""
    tiles = np.maximum(tiles, 1.0)
    waves = np.ceil(tiles / sms)
    return np.log10(tiles / sms), tiles / (waves * sms)


def columns(table) -> dict[str, np.ndarray]:
    """``{column: array}`` of a DataFrame (or a dict of columns, as is): what :func:`features` and
    :func:`roofline_us` read, and rows of it are taken by ``{k: v[idx]}`` with numpy, without a
    DataFrame per slice."""
    if isinstance(table, pd.DataFrame):
        return {c: table[c].to_numpy() for c in table.columns}
    return {c: np.asarray(v) for c, v in table.items()}


def _col(table, name: str, dtype=None) -> np.ndarray:
    """One column of a DataFrame or of a dict of columns, as an array."""
    return np.asarray(table[name], dtype=dtype)


def roofline_us(table: pd.DataFrame, dev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Compute time and memory time of each kernel at the device's peaks, microseconds (``table``
    and ``dev``: DataFrames or dicts of columns)."""
    t_flop = _col(table, "flops") / (_col(dev, "peak_tflops") * 1e6)
    t_mem = _col(table, "bytes") / (_col(dev, "bw_gbs") * 1e3)
    return t_flop, t_mem


FEATURE_SETS = ("full", "relative", "relative-gemm")


def features(family: str, table: pd.DataFrame, dev: pd.DataFrame,
             device_features: bool = False, feature_set: str = "full") -> tuple[np.ndarray, np.ndarray]:
    """Model inputs ``[n, F]`` of the kernels of one family, and their roofline time (µs).

    Args:
        family: one of :data:`FAMILIES`; every row of ``table`` must be of it.
        table: kernel rows (:data:`COLUMNS`), a DataFrame or a dict of column arrays.
        dev: (a DataFrame or a dict of column arrays) per row, the device's ``peak_tflops`` (at the kernel's precision), ``bw_gbs``,
            ``sms``, ``l2_mib``, ``clock_mhz``.
        device_features: also the device's own specs (log SMs, bandwidth, peak, L2, clock).
            Off by default: with five training GPUs they let the model recognise a GPU instead
            of learning from the roofline, and it then extrapolates worse to a new one.
        feature_set: ``full`` (the kernel's own dimensions too: log B, M, N, K for GEMMs, log
            elements for ``vec``, log rows and columns for ``ln``/``softmax``) or ``relative``
            (without them: only the kernel's times at the device's peaks, its waves and the K
            loop).  With its dimensions *and* its time at peak a kernel tells the network the
            device's peak, so ``full`` can learn per-GPU efficiencies; ``relative`` cannot.
            ``relative-gemm``: ``relative`` for GEMMs, ``full`` for the others.  Without its
            dimensions a GEMM on a much faster device (tensor cores) looks like a small,
            launch-bound kernel: measured in docs/concepts/spec-model.md, where ``full`` is the bundled choice.
    """
    if feature_set not in FEATURE_SETS:
        raise ValueError(f"feature_set must be one of {FEATURE_SETS}, got {feature_set!r}")
    full = feature_set == "full" or (feature_set == "relative-gemm" and family != "gemm")
    t_flop, t_mem = roofline_us(table, dev)
    t_roof = np.maximum(np.maximum(t_flop, t_mem), 1e-6)
    sms = _col(dev, "sms", float)
    lg = lambda v: np.log10(np.maximum(np.asarray(v, dtype=float), 1e-9))
    # No L2 term: the training GPUs' L2 spans 2-40 MiB with one GPU (A100) at the top, and the
    # bytes / L2 feature made held-out predictions worse (A100 held out, seeds 0 / 1: vec kernels
    # 38.3 / 51.3 % with it, 17.3 / 16.0 % without; GEMMs 52.7 / 60.7 % against 23.2 / 23.5 %;
    # benchmarks/spec_kernel_ablation.py at tag research-2026-11).
    common = [lg(t_flop), lg(t_mem), lg(t_roof), lg(t_flop) - lg(t_mem), _col(table, "dtype_bytes") / 4.0]
    if device_features in (True, "all"):
        common += [lg(sms), lg(dev["bw_gbs"]), lg(dev["peak_tflops"]), lg(dev["l2_mib"]), lg(dev["clock_mhz"])]
    if device_features in ("power", "all"):
        common += [lg(dev["w_per_tflop"])]
    if device_features == "tdp":  # the board's power limit alone (70-75 W cards cannot hold their boost clock)
        common += [lg(dev["tdp_w"])]
    if family in ("gemm", "conv"):
        B, M, N, K = (_col(table, c) for c in "BMNK")
        extra = [lg(B), lg(M), lg(N), lg(K)] if full else []
        for tile in (128.0, 64.0):
            w, occ = _waves(B * np.ceil(M / tile) * np.ceil(N / tile), sms)
            extra += [w, occ]
        # the K loop: FLOPs per output element against the SM's compute/bandwidth balance
        extra += [lg(K / 128.0)]
        if family == "conv":
            extra += [_col(table, "kernel")]
    elif family == "vec":
        e = _col(table, "elems")
        w, occ = _waves(np.ceil(e / 512.0), sms)  # 128 threads x 4 elements per block
        extra = ([lg(e)] if full else []) + [_col(table, "inputs"), lg(_col(table, "flops") / np.maximum(e, 1)), w, occ]
    else:
        rows, cols = _col(table, "rows"), _col(table, "cols")
        w, occ = _waves(rows, sms)
        extra = ([lg(rows), lg(cols)] if full else [lg(cols)]) + [w, occ]
    return np.stack(common + extra, axis=1).astype(np.float32), t_roof


def device_frame(specs, precisions, families, matrix_fp32: bool = False, library_rules: bool = False,
                 frame: bool = True) -> pd.DataFrame | dict:
    """Per-row device columns (:data:`DEVICE_COLUMNS`) from :class:`~perfseer.devices.DeviceSpec`
    objects and precisions (``fp32``, ``fp16``, ``bf16``, ``tf32``).  GEMM and convolution rows
    use the precision's (tensor-core) peak; the others the FP32 vector peak at FP32 and twice it
    (packed half-precision arithmetic) at 16 bits.  A 16-bit GEMM or convolution on a GPU without
    tensor cores for it runs at :func:`perfseer.specmodel.rules.matrix_peak` (Pascal: FP16 storage,
    FP32 arithmetic, not the 1/64 native FP16 rate).

    ``library_rules``: every peak by :func:`perfseer.specmodel.rules.peak` (also FP32
    convolutions as TF32 on Ampere and later, PyTorch's default).  Off for the bundled kernel
    model, which learned its FP32 kernels against the FP32 peak.

    ``matrix_fp32``: FP32 GEMM and convolution rows use the sheet's ``fp32_matrix`` peak where it
    has one (AMD CDNA: rocBLAS runs FP32 GEMMs on the matrix cores, at twice the vector rate), the
    vector peak elsewhere.  Off by default: the bundled model was trained and evaluated without it
    (no training GPU has an FP32 matrix peak); docs/concepts/spec-model.md measures both on MI100 / MI210.

    ``frame=False``: the columns as a dict of arrays (what the DataFrame holds, without building one)."""
    cache: dict = {}
    rows = []
    for s, p, fam in zip(specs, precisions, families):
        key = (id(s), p, fam if library_rules else fam in ("gemm", "conv"))
        if key not in cache:
            if library_rules:
                peak = rules.peak(s, p, fam)
            elif fam in ("gemm", "conv"):
                peak = s.peak(p) if p == "fp32" or rules.has_tensor(s, p) else rules.matrix_peak(s, p, fam)
            else:
                peak = s.peak("fp32") * (2.0 if p in ("fp16", "bf16") else 1.0)
            if matrix_fp32 and key[2] and p == "fp32":
                peak = float(s.peak_tflops.get("fp32_matrix") or peak)
            cache[key] = (peak, s.mem_bandwidth_gbs, s.sms, s.l2_mib or 1.0, s.clock_mhz or 1500.0,
                          (s.tdp_w or 250.0) / s.peak("fp32"), s.tdp_w or 250.0)
        rows.append(cache[key])
    if not frame:
        return {c: np.array([r[i] for r in rows]) for i, c in enumerate(DEVICE_COLUMNS)}
    return pd.DataFrame(rows, columns=list(DEVICE_COLUMNS))
