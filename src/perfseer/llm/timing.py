"""Operator time on a GPU from its spec sheet and the fitted constants of ``data/op_model.json``.

Each operator of :mod:`perfseer.llm.cost` runs at a roofline with fitted efficiencies:

- GEMMs: ``t = o + ((F' / (e_c x peak))^p + (B / (e_m x bw))^p)^(1/p)``: a smooth maximum of the
  compute time (``F'``: with ``tile`` > 0, the FLOPs of the output tiles the GPU's SMs run in
  whole waves of ``tile x tile`` tiles) and the memory time, plus a launch overhead ``o``;
- memory-bound kernels (norms, rotary, activation, residual add, embedding, KV writes, softmax):
  ``t = o_kind + B / (e_kind x bw) + B / (f_kind x SMs x clock)``;
- attention (not in the fitting data): prefill at ``prefill_compute_eff`` of the peak over the
  causal pairs, decode as a memory-bound read of the KV cache at ``decode_bw_eff`` of the
  bandwidth (both stated in the constants file with their source).

The constants were fitted on Vidur's per-operator CUDA times of Llama-2/3, CodeLlama, InternLM,
Qwen and Phi-2 layers on A100 (``python -m benchmarks.lib.llm_fit``; the file records the data,
the held-out models and the errors).  ``peak`` is the device sheet's dense rate at the GEMM's type,
``bw`` its memory bandwidth: a GPU nobody measured is answered from its sheet.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

from perfseer.errors import PerfseerError
from perfseer.llm.cost import Op

OP_MODEL = Path(__file__).resolve().parent / "data" / "op_model.json"
VEC_KINDS = ("norm", "rope", "act", "add", "emb", "copy", "softmax")


class TimingError(PerfseerError):
    """A device the time model cannot answer for (no bandwidth or peak on its sheet)."""


@lru_cache(maxsize=4)
def load_constants(path: str | None = None) -> dict:
    """The fitted constants (``data/op_model.json`` unless ``path``)."""
    return json.loads(Path(path or OP_MODEL).read_text())


def device_terms(spec, compute: str) -> dict:
    """What the time model reads from a :class:`~perfseer.devices.DeviceSpec`: the peak (TFLOP/s)
    at ``compute`` (falling back to fp16, then fp32), the bandwidth (GB/s) and the SM count."""
    if spec.kind != "gpu" or not spec.mem_bandwidth_gbs:
        raise TimingError(f"{spec.name} is not a GPU with a memory bandwidth on its spec sheet",
                          "choose a GPU of 'perfseer devices --kind gpu'")
    peaks = spec.peak_tflops
    peak = peaks.get(compute) or peaks.get("fp16") or peaks["fp32"]
    if compute == "bf16" and not peaks.get("bf16"):
        peak = peaks.get("fp16") or peaks["fp32"]
    clock = float(spec.clock_mhz or 1500.0) * 1e6
    return {"peak": float(peak) * 1e12, "bw": float(spec.mem_bandwidth_gbs) * 1e9, "sms": float(spec.sms),
            "issue": float(spec.sms) * clock, "name": spec.name}


def gemm_time_us(flops, byts, M, N, K, dev: dict, c: dict):
    """A GEMM's time, microseconds (array-friendly over ``flops``, ``byts``, ``M``, ``N``, ``K``)."""
    import numpy as np

    tile = c.get("tile", 0)
    F = np.asarray(flops, float)
    if tile:
        M_, N_ = np.maximum(np.asarray(M, float), 1.0), np.maximum(np.asarray(N, float), 1.0)
        waves = np.ceil(np.ceil(M_ / tile) * np.ceil(N_ / tile) / dev["sms"])
        # whole waves of output tiles: every SM of a wave does a (tile x tile x K) product
        F = np.maximum(F, waves * dev["sms"] * 2.0 * np.minimum(M_, tile) * np.minimum(N_, tile) * np.asarray(K, float))
    tc = F / (c["e_c"] * dev["peak"]) * 1e6
    tm = np.asarray(byts, float) / (c["e_m"] * dev["bw"]) * 1e6
    p = c["p"]
    return c["o"] + (tc ** p + tm ** p) ** (1.0 / p)


def vec_time_us(byts, kind: str, dev: dict, c: dict):
    """A memory-bound kernel's time: a launch overhead, the bytes at a share of the bandwidth, and
    the bytes at ``f`` bytes per SM per cycle (small element-wise kernels do not fill HBM)."""
    k = c["vec"][kind]
    return k["o"] + byts / (k["e"] * dev["bw"]) * 1e6 + byts / (k["f"] * dev["issue"]) * 1e6


def op_time_us(op: Op, dev: dict, consts: dict | None = None, collective=None) -> float:
    """One run of ``op`` on the device of ``dev`` (:func:`device_terms`), microseconds."""
    c = consts or load_constants()
    g = c["gemm"]
    if op.kind == "gemm":
        return float(gemm_time_us(op.flops, op.bytes, op.M, op.N, op.K, dev, g))
    if op.kind == "moe":
        # grouped GEMM: the experts' tiles together, each expert's weights read once
        return float(gemm_time_us(op.flops, op.bytes, op.M, op.N, op.K, dev, {**g, "tile": 0})) + c["moe_overhead_us"]
    if op.kind in VEC_KINDS:
        return float(vec_time_us(op.bytes, op.kind, dev, c))
    if op.kind == "attn_prefill":
        a = c["attention"]
        tc = op.flops / (a["prefill_compute_eff"] * dev["peak"]) * 1e6
        tm = op.bytes / (g["e_m"] * dev["bw"]) * 1e6
        return a["o"] + max(tc, tm)
    if op.kind == "attn_decode":
        a = c["attention"]
        tm = op.bytes / (a["decode_bw_eff"] * dev["bw"]) * 1e6
        tc = op.flops / (0.5 * dev["peak"]) * 1e6
        return a["o"] + max(tc, tm)
    if op.kind in ("allreduce", "allgather"):
        if collective is None:
            raise TimingError("a tensor-parallel step needs the collective time model", "run with gpus=1")
        return float(collective(op.kind, op.bytes))
    raise TimingError(f"no time model for operator kind {op.kind!r}", "report this as a bug")


def ops_time_us(ops: list[Op], dev: dict, consts: dict | None = None, collective=None) -> list[tuple[Op, float]]:
    """Each operator with its time per run (microseconds)."""
    c = consts or load_constants()
    out = []
    for o in ops:
        t = op_time_us(o, dev, c, collective)
        if not math.isfinite(t) or t < 0:
            raise TimingError(f"operator {o.name} came out at {t} us", "report this as a bug")
        out.append((o, t))
    return out
