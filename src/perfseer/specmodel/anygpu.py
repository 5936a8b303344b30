"""The any-GPU operator model: each kernel's time from its work and the GPU's spec sheet, with a
handful of constants shared by every GPU, learned from whole-step measurements of many GPUs.

A step's kernels (:func:`perfseer.specmodel.compose.step_kernels`: forward, the backward pass as
its own weight- and input-gradient kernels, the optimizer; each attention one fused kernel, its
backward one more, where the step's software fuses ``scaled_dot_product_attention``, PyTorch 2:
:func:`perfseer.specmodel.attention.fuse_attention`, else two batched GEMMs and a softmax with the
scores in memory; each SiLU one kernel, as eager PyTorch runs it, not the graph's ``Sigmoid`` and
``Mul``: :func:`perfseer.specmodel.eager.fuse_silu`) each take

.. math::

    t = \\big(t_c^p + t_m^p\\big)^{1/p} + \\ell, \\quad
    t_c = \\frac{\\text{FLOPs}}{\\text{peak}_{u}} \\, e^{c_{f,u}} \\, \\text{occ}^{-w} \\, (e^{c_b + c_{bt}[u = \\text{tensor}]})^{[\\text{backward}]}
    \\Big(1 + \\frac{n_0}{\\min(M, N)}\\Big)\\Big(1 + \\frac{k_0}{K}\\Big) \\max\\big(1, x_0 / x\\big)^{1/3},
    \\quad t_m = \\frac{\\text{bytes}}{\\text{bandwidth}} \\, e^{m_f + \\lambda / (1 + \\text{bytes} / \\text{L2})}

where ``peak_u`` is the peak of the unit the kernel runs on (tensor or CUDA cores, by the
per-generation rules of :mod:`perfseer.specmodel.rules`: TF32 convolutions on Ampere+, Pascal's
FP16 at the FP32 rate...), ``occ`` the occupancy of the last wave of 128x128 output tiles over
the SMs (implicit GEMM of a convolution, groups included), ``n_0`` and ``k_0`` the GEMM sizes at
which a thin output (few channels per group) or a short reduction (a stem convolution's 3 x k x k
inputs) halves the rate (not for a fused attention, whose tiles are 128 queries of one head),
``c_b`` what a backward (input- or weight-gradient) matrix kernel loses, ``c_{bt}`` what it loses
more on the tensor cores (16-bit backward convolutions in NCHW),
``c_{f,u}`` a compute inefficiency per family (GEMM, convolution, fused attention: FlashAttention
reaches well under a GEMM's rate; on CUDA cores it takes the GEMM's) and unit, ``m_f`` a memory
inefficiency per family (matrix, element-wise, row-wise, fused attention), ``\\lambda`` what a kernel whose bytes fit in the L2 cache gains (its input left there by the
previous kernel), ``x`` the board power per FP32 TFLOP/s and process nm
(:func:`perfseer.specmodel.rules.power_per_flop`: 70-75 W and Max-Q boards sit well below the
full-power ones) and ``x_0`` the knee under which the power limit holds the SMs below their
boost clock (the clock goes as the cube root of the power: dynamic power ~ f V^2, V ~ f; the
memory's clock is not lowered), ``p`` the sharpness of the compute/memory overlap and ``\\ell`` the per-kernel floor; two
slopes scale ``t_c`` by ``(peak / 100 TFLOP/s)^a`` and ``t_m`` by ``(bandwidth / 1 TB/s)^b`` (a
bigger GPU is harder to fill from eager PyTorch).  No GEMM or tensor-core convolution runs faster
than its unit's peak (the compute factor ``e^{c_{f,u}} (peak / 100)^a`` is at least 1 for them;
a CUDA-core convolution may beat its direct FLOPs: cuDNN's Winograd and FFT algorithms do fewer
multiplications).
Eager PyTorch launches one kernel at a time: a kernel shorter than the host's launch cost ``h``
leaves the GPU waiting for the next launch, so each kernel takes the smooth maximum of its GPU
time and ``h``, and the step is their sum plus a per-step constant:

.. math::  T = \\textstyle\\sum_i \\big(t_i^3 + (h + h_t^{[\\text{bw, opt}]})^3\\big)^{1/3} + s + s_t^{[\\text{train}]}

(batch-12 CNNs on a fast GPU are mostly launch-bound; a whole-step maximum of the GPU's and the
host's sums would let the long kernels hide the short ones' launches).  A training step's
backward and optimizer kernels cost the host ``h_t`` more each (autograd's engine and the extra
launches a library's backward makes per gradient: ``h`` alone is the forward's), and the step
``s_t`` more (the loss, starting the backward pass, the optimizer's and the gradient scaler's host
work where present); both are shared by
every setting, so a GPU whose setting has no training step (the default one) answers a training
step with them.  Under autocast (AMP) the step has autocast's casts
(:func:`perfseer.specmodel.compose.with_autocast`: a cast of each weight, its gradient's cast
back, layer norms in FP32 between two casts).

Every GPU constant is shared by all GPUs (no per-GPU term), so the model answers for a GPU from
its sheet alone; the host cost per kernel ``h`` and the step constant ``s`` belong to the software
setting (framework version, timing protocol: one pair per data source; the card also says which
settings fuse attention), and an answer uses the card's default setting.  :func:`fit` learns them from measured steps of other GPUs (robust least
squares on log time, each (GPU, source, phase, precision) cell weighted equally).  Its card (JSON, no
pickle) holds the constants, the data they were fitted on and the leave-one-GPU-out scores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfseer.errors import PerfseerError
from perfseer.specmodel import rules

PARAMS = ("c_gemm_tensor", "c_gemm_cuda", "c_conv_tensor", "c_conv_cuda", "m_matrix", "m_vec", "m_row", "wave",
          "overlap", "kernel_floor", "c_backward", "h2d", "peak_slope", "bw_slope", "small_n", "small_k", "l2",
          "host_train", "step_train", "c_attn_tensor", "m_attn", "c_backward_tensor", "power_knee")
ATTENTION_PARAMS = ("c_attn_tensor", "m_attn")  # a card fitted without fused attention lacks them
# a card fitted before the power term lacks its knee: answered as if no GPU were power-limited
OPTIONAL = {"power_knee": -10.0}
POWER_EXP = 1.0 / 3.0  # sustained clock ~ power^(1/3): dynamic power ~ f V^2 with the voltage ~ f
OVERHEAD = ("host_per_kernel", "step")  # per software setting (source): framework, not GPU
# starting point: 60 % of peak compute, 75 % of bandwidth, a 3 us kernel floor, 8 us of host time
# per kernel, 20 us per step, 6 GB/s host-to-device
INIT = {"c_gemm_tensor": 0.5, "c_gemm_cuda": 0.3, "c_conv_tensor": 0.7, "c_conv_cuda": 0.4, "m_matrix": 0.3,
        "m_vec": 0.3, "m_row": 0.5, "wave": 0.5, "overlap": 0.0, "kernel_floor": np.log(3.0), "c_backward": 0.2,
        "h2d": np.log(6.0), "peak_slope": 0.0, "bw_slope": 0.0, "small_n": np.log(8.0), "small_k": np.log(8.0),
        "l2": 0.0, "host_train": np.log(5.0), "step_train": np.log(200.0), "c_attn_tensor": 0.7,
        "m_attn": 0.3, "c_backward_tensor": 0.0, "power_knee": 0.0}
INIT_OVERHEAD = {"host_per_kernel": np.log(8.0), "step": np.log(20.0)}
BOUNDS = {"peak_slope": (-0.5, 0.5), "bw_slope": (-0.5, 0.5), "wave": (0.0, 1.0), "overlap": (-3.0, 3.0),
          "l2": (-3.0, 1.0), "small_n": (-3.0, 7.0), "small_k": (-3.0, 7.0),
          "kernel_floor": (-3.0, 4.0), "host_per_kernel": (-3.0, 7.0),
          "step": (-3.0, 10.0), "host_train": (-3.0, 6.0), "step_train": (-3.0, 10.0), "c_backward_tensor": (-1.0, 2.0),
          "power_knee": (-2.0, 2.0)}
CARD_FORMAT = "perfseer.anygpu"
LAUNCH_P = 3.0  # sharpness of the smooth maximum of a kernel's GPU time and its launch cost


class AnyGpuError(PerfseerError):
    """An any-GPU card that cannot be used."""


@dataclass
class Design:
    """Per-kernel inputs of many steps, concatenated; ``step`` maps each kernel to its step."""

    t_c0: np.ndarray  # FLOPs / unit peak, us
    t_m0: np.ndarray  # bytes / bandwidth, us
    occ: np.ndarray  # last-wave occupancy (1 for non-matrix kernels)
    code: np.ndarray  # 0 gemm-tensor, 1 gemm-cuda, 2 conv-tensor, 3 conv-cuda, 4 vec, 5 row-wise, 6 attn-tensor,
    # 7 attn-cuda (a fused attention on CUDA cores: the GEMM's CUDA-core constant)
    backward: np.ndarray  # a backward-pass matrix kernel
    scale: np.ndarray  # times the kernel runs
    log_peak: np.ndarray  # log(unit peak / 100 TFLOP/s)
    log_bw: np.ndarray  # log(bandwidth / 1000 GB/s)
    step: np.ndarray  # step index of each kernel
    n_steps: int
    dim_n: np.ndarray = field(default_factory=lambda: np.zeros(0))  # min(M, N) of a matrix kernel (per group)
    dim_k: np.ndarray = field(default_factory=lambda: np.zeros(0))  # its reduction length K
    h2d_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per step
    setting: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # per step: software setting
    l2_fit: np.ndarray = field(default_factory=lambda: np.zeros(0))  # 1 / (1 + bytes / L2 size)
    pass_code: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # 0 forward, 1 backward, 2 optimizer
    log_power: np.ndarray = field(default_factory=lambda: np.zeros(0))  # log of the GPU's power per FLOP (rules.power_per_flop)


def kernel_inputs(table: pd.DataFrame, spec, precision: str) -> dict:
    """The device-dependent inputs of one kernel table on ``spec`` at ``precision`` (``fp32``,
    ``tf32``, ``fp16``, ``bf16``; autocast is composed as ``fp16``/``bf16`` kernels)."""
    if spec.kind != "gpu" or not spec.mem_bandwidth_gbs:
        raise AnyGpuError(f"{spec.name} is not a GPU with a memory bandwidth", "pass a GPU of the registry")
    fam = table["family"].to_numpy()
    n = len(fam)
    peak = np.empty(n)
    code = np.empty(n, dtype=np.int64)
    for f in np.unique(fam):
        sel = fam == f
        as_f = "gemm" if f == "attn" else f  # a fused attention's GEMMs run where a GEMM would
        peak[sel] = rules.peak(spec, precision, as_f)
        if f in ("gemm", "conv", "attn"):
            u = rules.unit(spec, precision, as_f)
            code[sel] = {"gemm": 0, "conv": 2, "attn": 6}[f] + (0 if u == "tensor" else 1)
        else:
            code[sel] = 4 if f == "vec" else 5
    t_c0 = table["flops"].to_numpy(dtype=float) / (peak * 1e6)
    t_m0 = table["bytes"].to_numpy(dtype=float) / (spec.mem_bandwidth_gbs * 1e3)
    B, M, N = (table[c].to_numpy(dtype=float) for c in ("B", "M", "N"))
    tiles = np.maximum(np.maximum(B, 1) * np.ceil(np.maximum(M, 1) / 128) * np.ceil(np.maximum(N, 1) / 128), 1.0)
    sms = float(spec.sms)
    mat = _matrix(code)
    occ = np.where(mat, tiles / (np.ceil(tiles / sms) * sms), 1.0)
    passes = table["pass"].to_numpy() if "pass" in table else np.full(n, "fw")
    scale = table["scale"].to_numpy(dtype=float) if "scale" in table else np.ones(n)
    K = table["K"].to_numpy(dtype=float)
    gemm_like = mat & (code < 6)  # the thin-output and short-reduction terms are a GEMM's, not an attention's
    pass_code = np.where(passes == "bw", 1, np.where(passes == "opt", 2, 0)).astype(np.int64)
    return {"t_c0": t_c0, "t_m0": t_m0, "occ": occ, "code": code, "backward": (passes == "bw") & mat,
            "pass_code": pass_code,
            "scale": scale, "log_peak": np.log(peak / 100.0), "log_bw": np.full(n, np.log(spec.mem_bandwidth_gbs / 1000)),
            "dim_n": np.where(gemm_like, np.maximum(np.minimum(M, N), 1.0), 1e9),
            "dim_k": np.where(gemm_like, np.maximum(K, 1.0), 1e9),
            "l2_fit": 1.0 / (1.0 + table["bytes"].to_numpy(dtype=float) / (float(spec.l2_mib or 0.0) * 2**20 + 1.0)),
            "log_power": np.full(n, np.log(rules.power_per_flop(spec)))}


def _matrix(code: np.ndarray) -> np.ndarray:
    """Whether each kernel code is a matrix kernel (GEMM, convolution, fused attention)."""
    return (code < 4) | (code >= 6)


def _merge_repeats(d: dict) -> dict:
    """One row per distinct kernel of a step (repeated layers: their ``scale`` summed); the step's
    time is unchanged and fitting evaluates fewer rows."""
    key = np.stack([d["t_c0"], d["t_m0"], d["occ"], d["code"].astype(float), d["backward"].astype(float),
                    d["log_peak"], d["log_bw"], d["dim_n"], d["dim_k"], d["l2_fit"], d["pass_code"].astype(float),
                    d["log_power"]], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    if len(uniq) == len(key):
        return d
    inv = inv.reshape(-1)
    return {"t_c0": uniq[:, 0], "t_m0": uniq[:, 1], "occ": uniq[:, 2], "code": uniq[:, 3].astype(np.int64),
            "backward": uniq[:, 4] > 0.5, "scale": np.bincount(inv, weights=d["scale"], minlength=len(uniq)),
            "log_peak": uniq[:, 5], "log_bw": uniq[:, 6], "dim_n": uniq[:, 7], "dim_k": uniq[:, 8],
            "l2_fit": uniq[:, 9], "pass_code": uniq[:, 10].astype(np.int64), "log_power": uniq[:, 11]}


def eager_table(table: pd.DataFrame, precision: str, autocast: bool = False,
                fused_attention: bool = False) -> pd.DataFrame:
    """A step's kernel table as eager PyTorch runs it: each SiLU one kernel
    (:func:`perfseer.specmodel.eager.fuse_silu`), no kernel for a forward broadcast, nor for a
    forward slice where attention is fused (:func:`perfseer.specmodel.eager.drop_views`), each attention one fused kernel where
    ``fused_attention`` (PyTorch 2's ``scaled_dot_product_attention``,
    :func:`perfseer.specmodel.attention.fuse_attention`), and autocast's casts where ``autocast``
    and ``precision`` is 16-bit (:func:`perfseer.specmodel.compose.with_autocast`)."""
    from perfseer.specmodel.attention import fuse_attention
    from perfseer.specmodel.compose import with_autocast
    from perfseer.specmodel.eager import drop_views, fuse_silu

    table = drop_views(fuse_silu(table), slices=fused_attention)
    if fused_attention:
        table = fuse_attention(table)
    if autocast and precision in ("fp16", "bf16"):
        table = with_autocast(table)
    return table


def design(items, settings=None, eager: bool = False) -> Design:
    """A :class:`Design` from ``(table, spec, precision, h2d_bytes[, autocast[, fused_attention]])``
    items, one per step (``settings``: each step's software-setting index, default 0;
    ``autocast``: the step ran under ``torch.autocast``; ``fused_attention``: its software runs
    ``scaled_dot_product_attention`` as one kernel, PyTorch 2), each table composed by
    :func:`eager_table` (``eager``: the tables already are, the last two fields unused)."""
    parts, h2d = [], []
    for i, item in enumerate(items):
        table, spec, precision, hb = item[:4]
        if not eager:
            table = eager_table(table, precision, len(item) > 4 and bool(item[4]), len(item) > 5 and bool(item[5]))
        d = _merge_repeats(kernel_inputs(table, spec, precision))
        d["step"] = np.full(len(d["t_c0"]), i, dtype=np.int64)
        parts.append(d)
        h2d.append(float(hb or 0.0))
    cat = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in
           KERNEL_FIELDS + ("step",)}
    st = np.zeros(len(parts), dtype=np.int64) if settings is None else np.asarray(settings, dtype=np.int64)
    return Design(n_steps=len(parts), h2d_bytes=np.asarray(h2d), setting=st, **cat)


KERNEL_FIELDS = ("t_c0", "t_m0", "occ", "code", "backward", "scale", "log_peak", "log_bw", "dim_n", "dim_k", "l2_fit",
                 "pass_code", "log_power")


def subset(d: Design, steps: np.ndarray, setting: np.ndarray | None = None) -> Design:
    """The steps of ``d`` where the boolean mask ``steps`` is true (renumbered); ``setting``: every
    step's software setting to use instead of ``d.setting`` (before masking)."""
    keep = steps[d.step]
    new_index = np.cumsum(steps) - 1
    cols = {k: getattr(d, k)[keep] if len(getattr(d, k)) else getattr(d, k) for k in KERNEL_FIELDS}
    return Design(**cols, step=new_index[d.step[keep]],
                  n_steps=int(steps.sum()), h2d_bytes=d.h2d_bytes[steps],
                  setting=(d.setting if setting is None else np.asarray(setting))[steps])


def _theta(params) -> np.ndarray:
    return np.array([float(params[k]) for k in PARAMS]) if isinstance(params, dict) else np.asarray(params, float)


def kernel_us(theta, d: Design) -> np.ndarray:
    """Each kernel's time (us, once; multiply by ``scale`` for its repetitions)."""
    th = _theta(theta)
    c = np.array([th[0], th[1], th[2], th[3], 0.0, 0.0, th[19], th[1]])
    m = np.array([th[4], th[4], th[4], th[4], th[5], th[6], th[20], th[20]])
    mat = _matrix(d.code)
    cc = np.where(mat, c[d.code], 0.0)
    eff = np.exp(cc + th[12] * d.log_peak)
    # no GEMM or tensor-core convolution beats its unit's peak (CUDA-core convolutions may: Winograd and
    # FFT algorithms do fewer multiplications than the direct convolution's FLOPs)
    eff = np.where(d.code != 3, np.maximum(eff, 1.0), eff)
    tc = d.t_c0 * eff * np.where(mat, d.occ ** (-th[7]), 1.0) \
        * np.where(d.backward, np.exp(th[10] + np.where((d.code == 0) | (d.code == 2) | (d.code == 6), th[21], 0.0)), 1.0)
    tc = tc * (1.0 + np.exp(th[14]) / d.dim_n) * (1.0 + np.exp(th[15]) / d.dim_k)
    if len(d.log_power):  # a GPU whose board power cannot feed its SMs at boost runs them at a lower clock
        tc = tc * np.exp(POWER_EXP * np.maximum(th[22] - d.log_power, 0.0))
    tm = d.t_m0 * np.exp(m[d.code] + th[13] * d.log_bw)
    if len(d.l2_fit):  # a kernel whose bytes fit in L2 reads what the previous kernel left there
        tm = tm * np.exp(th[16] * d.l2_fit)
    p = 1.0 + np.exp(th[8])
    hi = np.maximum(np.maximum(tc, tm), 1e-9)
    t = hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)
    return t + np.exp(th[9])


def step_us(theta, overhead: np.ndarray, d: Design) -> np.ndarray:
    """Each step's time, us; ``overhead``: ``[settings, 2]`` (log host us per kernel, log us per step)."""
    th = _theta(theta)
    ov = np.asarray(overhead, float).reshape(-1, 2)[d.setting]
    k = kernel_us(th, d)
    h = np.exp(ov[d.step, 0])  # the host's launch cost of each kernel
    train = np.zeros(d.n_steps)
    if len(d.pass_code):
        late = d.pass_code > 0
        train = np.bincount(d.step, weights=late.astype(float), minlength=d.n_steps) > 0  # a training step
        h = h + np.where(late, np.exp(th[17]), 0.0)  # autograd's and the optimizer's host work per kernel
    hi = np.maximum(np.maximum(k, h), 1e-9)
    k = hi * ((k / hi) ** LAUNCH_P + (h / hi) ** LAUNCH_P) ** (1.0 / LAUNCH_P)
    t = np.bincount(d.step, weights=k * d.scale, minlength=d.n_steps)
    h2d = d.h2d_bytes / (np.exp(th[11]) * 1e3) if len(d.h2d_bytes) else 0.0
    return t + np.exp(ov[:, 1]) + h2d + np.exp(th[18]) * train


def fit(d: Design, measured_ms: np.ndarray, weights: np.ndarray | None = None, n_settings: int = 1,
        max_nfev: int = 200, host_floor=None) -> tuple[dict, np.ndarray]:
    """The shared constants and the per-setting overheads (``[n_settings, 2]``) minimising the
    weighted robust (soft-L1, scale 0.15) squared log error of :func:`step_us` against
    ``measured_ms``; ``host_floor``: per setting, the least log host µs per kernel (``None``: free),
    for settings whose long steps do not show their launch cost."""
    from scipy.optimize import least_squares  # deferred: fitting only

    y = np.log(np.asarray(measured_ms, float) * 1000.0)
    w = np.sqrt(np.ones_like(y) if weights is None else np.asarray(weights, float))
    names = list(PARAMS) + [k for _ in range(n_settings) for k in OVERHEAD]
    x0 = np.concatenate([_theta(INIT), np.tile([INIT_OVERHEAD[k] for k in OVERHEAD], n_settings)])
    lo = np.array([BOUNDS.get(k, (-6.0, 8.0))[0] for k in names])
    hi = np.array([BOUNDS.get(k, (-6.0, 8.0))[1] for k in names])
    if host_floor is not None:  # per setting: the least log host us per kernel (eager PyTorch's launch)
        n0 = len(PARAMS)
        for i, f in enumerate(host_floor):
            if f is not None:
                lo[n0 + 2 * i] = max(lo[n0 + 2 * i], float(f))
    x0 = np.clip(x0, lo + 1e-6, hi - 1e-6)
    n = len(PARAMS)
    res = least_squares(lambda x: w * (np.log(step_us(x[:n], x[n:], d)) - y), x0, bounds=(lo, hi), loss="soft_l1",
                        f_scale=0.15, max_nfev=max_nfev, x_scale="jac", diff_step=1e-3)
    return {k: float(v) for k, v in zip(PARAMS, res.x[:n])}, res.x[n:].reshape(n_settings, 2)


class AnyGpuModel:
    """The fitted constants plus the card they came with; :meth:`step_ms` answers for a step."""

    def __init__(self, card: dict):
        if card.get("format") != CARD_FORMAT:
            raise AnyGpuError(f"not an any-GPU card (format {card.get('format')!r})",
                              "write one with python -m benchmarks.lib.anygpu_logo --fit-all CARD")
        # whether the default setting's framework fuses attention (PyTorch 2); a card written before
        # the model knew fused attention has no such entry and answers with the unfused kernels
        self.fused_attention = bool((card.get("fused_attention") or {}).get(card.get("default_setting", "")))
        need = [k for k in PARAMS if (k not in ATTENTION_PARAMS or self.fused_attention) and k not in OPTIONAL]
        missing = [k for k in need if k not in (card.get("params") or {})]
        ov = (card.get("overheads") or {}).get(card.get("default_setting", ""))
        if isinstance(ov, list) and len(ov) == len(OVERHEAD):  # as fitted: [log host us per kernel, log us per step]
            ov = dict(zip(OVERHEAD, ov))
        if missing or not ov or any(k not in ov for k in OVERHEAD):
            raise AnyGpuError(f"the any-GPU card lacks constants ({', '.join(missing) or 'the default overhead'})",
                              "refit it with python -m benchmarks.lib.anygpu_logo --fit-all CARD")
        self.card = card
        self.params = dict(card["params"])
        # the constants as kernel_us reads them (the attention ones at their start where not fitted)
        self._theta = _theta({**{k: INIT[k] for k in ATTENTION_PARAMS}, **OPTIONAL, **self.params})
        self.overhead = np.array([[ov[k] for k in OVERHEAD]])
        self.name = card.get("name", "anygpu")

    def step_ms(self, table: pd.DataFrame, spec, precision: str, h2d_bytes: float = 0.0,
                autocast: bool = False, fused_attention: bool | None = None, eager: bool = False) -> dict:
        """``{"latency_ms", "kernel_us", "gpu_ms", "host_ms"}`` of one step's kernel table, with the
        framework overhead of the card's default software setting; ``autocast``: the 16-bit
        ``table`` runs under ``torch.autocast`` (its casts added, :func:`eager_table`);
        ``fused_attention``: each attention of the table (its ``attn`` column) is one fused kernel
        (default: as the card's default setting runs it, :attr:`fused_attention`); ``eager``: the
        table already is :meth:`eager_table`'s (``autocast`` and ``fused_attention`` unused)."""
        fused = self.fused_attention if fused_attention is None else bool(fused_attention)
        if fused and not eager and any(k not in self.card["params"] for k in ATTENTION_PARAMS):
            raise AnyGpuError("this any-GPU card has no fused-attention constants",
                              "refit it with python -m benchmarks.lib.anygpu_logo --fit-all CARD")
        d = design([(table, spec, precision, h2d_bytes, autocast, fused)], eager=eager)
        th = self._theta
        k = kernel_us(th, d)
        late = d.scale[d.pass_code > 0].sum()
        return {"latency_ms": float(step_us(th, self.overhead, d)[0]) / 1000, "kernel_us": k,
                "gpu_ms": float((k * d.scale).sum()) / 1000,
                "host_ms": float(d.scale.sum() * np.exp(self.overhead[0, 0]) + late * np.exp(th[17])) / 1000}

    def eager_table(self, table: pd.DataFrame, precision: str, autocast: bool = False) -> pd.DataFrame:
        """:func:`eager_table` with the attention fused as the card's default setting runs it."""
        return eager_table(table, precision, autocast, self.fused_attention)

    def interval_q(self, kind: str, phase: str, precision: str) -> float | None:
        """The 90 % quantile of |log(measured / predicted)| of the leave-one-GPU-out runs of the cell,
        or ``None`` where the card has none."""
        q = (self.card.get("intervals") or {}).get(f"{kind}/{phase}/{precision}")
        return float(q) if q is not None else None


def read_card(path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise AnyGpuError(f"cannot read the any-GPU card {path}: {e}", "reinstall perfseer or refit it") from e
