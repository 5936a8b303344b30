r"""Physical sanity bounds of a prediction: what a device can not beat, and what no model takes.

For a latency target on a device with a known spec (:func:`perfseer.devices.get_device`), a step
cannot take less than the **floor**

.. math::
    t_{floor} = \max\Big(\frac{k F}{P},\ \frac{\max(0,\ k_w W - L)}{B},\ n_{mm}\, t_{kernel}\Big)

where ``F`` is the graph's FLOPs, ``P`` the device's highest dense peak of the float precisions
(fp32, tf32, fp16, bf16: AMP and TF32 may use any of them, and a floor must not assume a slower
one), ``W`` the weight bytes, which must come from memory at least once a step unless they fit in
the last-level cache ``L`` (the spec's ``l2_mib``), ``B`` the memory bandwidth, ``n_mm`` the
convolution and matrix-multiply operators (each at least one kernel; fusion can remove
element-wise kernels, not these) and ``t_kernel`` the least time a GPU kernel takes, launch and
drain (:data:`KERNEL_FLOOR_S`, 1 µs; 0 on CPUs).  A training step counts ``k = 2`` (the forward
pass and at least the weight gradients of the backward pass) and ``k_w = 2`` (weights read
forward and backward).  Each term alone is a lower bound, so their maximum is one.

The **ceiling** catches absurd values: ``C_F (F / P + W / B) + n\, t_{op}`` with ``C_F`` =
:data:`CEILING_EFFICIENCY` (the whole graph at 0.1 % of peak) and ``t_op`` = :data:`CEILING_OP_S`
(10 ms per operator).  Both constants are checked against every timm measurement by
``benchmarks/sanity_bounds.py`` (no measurement outside the bounds).

Without a spec (or for memory), the ceiling is 1,000 times the largest training target, scaled up
by the FLOPs ratio to the largest training graph when the graph is larger; utilisation is bounded
by 0 and 100 %.  A prediction outside its bounds is clipped to them and flagged (:func:`check`),
never shown bare; its interval is then the whole ``[floor, ceiling]``: a network that left the
physical range says nothing about where in it the answer lies.  A value above the ceiling is no
answer: every answerer's row becomes a refusal (:func:`refuse_above_ceiling`: ``value`` and
``interval`` ``None``, a ``reason``), the flag kept.  A value that is not finite, or that is still
zero or negative (or a latency under :data:`MIN_LATENCY_MS`) once clipped, is no answer at all:
:class:`~perfseer.errors.AbsurdAnswerError`.

**Memory** (:func:`check_memory`): a step's total must be finite and positive, at least its own
weights and context, at most :data:`MEMORY_CEILING_CAPACITY` times the device's capacity (and
:data:`MEMORY_CEILING_BYTES` whatever the device), and its batch-dependent part (activations,
inputs, transients) at most :data:`MEMORY_CEILING_PER_SAMPLE` per sample; outside, a refusal.
"""

from __future__ import annotations

import math

import numpy as np

from perfseer.errors import AbsurdAnswerError
from perfseer.features import schema

KERNEL_FLOOR_S = 1e-6  # least GPU time of one convolution / matmul kernel (launch to completion)
CEILING_EFFICIENCY = 1000.0  # the ceiling runs the whole graph at 1/1000 of the roofline
CEILING_OP_S = 0.01  # ... plus 10 ms per operator (eager frameworks spend ~5-50 us per op)
SPEC_FREE_CEILING = 1000.0  # without a spec: this many times the largest training target
CEILING_WORDS = "above the sanity ceiling"  # in the flag of a value over the ceiling (what the router reads)
MIN_LATENCY_MS = 1e-3  # no step of a graph takes less than 1 us (one kernel launch)
MEMORY_CEILING_BYTES = 2**50  # 1 PiB: ~7,000 times the largest GPU; a step needing more is a corrupt graph
MEMORY_CEILING_CAPACITY = 10_000  # a step needs at most this many times the device's memory
MEMORY_CEILING_PER_SAMPLE = 2**40  # 1 TiB of batch-dependent memory per sample
FLOAT_PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
MATMUL_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "Attention", "LSTM", "GRU", "RNN",
                        "QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"})

_X = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
_U = {n: i for i, n in enumerate(schema.GLOBAL_FEATURES)}


def device_spec(device: str):
    """The spec of a measurement-table device string, or ``None`` when the registry has none (or
    perfseer has no device registry)."""
    try:
        from perfseer.devices import get_device
    except ImportError:
        return None
    try:
        return get_device(device)
    except Exception:  # noqa: BLE001 - an unknown device has no spec: spec-free bounds apply
        return None


def _peak_flops(spec) -> float | None:
    peaks = [float(v) for k, v in (spec.peak_tflops or {}).items() if k in FLOAT_PRECISIONS and v]
    return max(peaks) * 1e12 if peaks else None


def graph_costs(data, op_types) -> dict:
    """FLOPs, weight bytes, operators and matmul-type operators of one PyG graph of raw features."""
    u = data.u.reshape(-1)
    u = u.detach().cpu().numpy() if hasattr(u, "detach") else np.asarray(u)
    return {"flops": float(u[_U["flops_total"]]), "weight_bytes": float(u[_U["weight_total"]]),
            "ops": int(u[_U["num_nodes"]]), "matmul_ops": sum(1 for op in op_types if op in MATMUL_OPS)}


def latency_bounds_ms(costs: dict, spec, phase: str) -> tuple[float, float, str]:
    """``(floor, ceiling, how)`` of a step's latency in ms on ``spec`` (see the module docstring)."""
    k = 2.0 if phase == "train" else 1.0
    peak = _peak_flops(spec)
    bw = float(spec.mem_bandwidth_gbs) * 1e9 if getattr(spec, "mem_bandwidth_gbs", None) else None
    cache = float(getattr(spec, "l2_mib", None) or 0.0) * 2**20
    compute = k * costs["flops"] / peak if peak else 0.0
    memory = max(0.0, k * costs["weight_bytes"] - cache) / bw if bw else 0.0
    launches = costs["matmul_ops"] * KERNEL_FLOOR_S if spec.kind == "gpu" else 0.0
    floor = max(compute, memory, launches)
    roof = (k * costs["flops"] / peak if peak else 0.0) + (k * costs["weight_bytes"] / bw if bw else 0.0)
    ceiling = CEILING_EFFICIENCY * roof + costs["ops"] * CEILING_OP_S
    parts = {"compute": compute, "memory": memory, "kernels": launches}
    how = max(parts, key=parts.get)
    return floor * 1e3, ceiling * 1e3, how


def spec_free_bounds(metric: str, costs: dict, target_range, flops_range) -> tuple[float, float]:
    """``(floor, ceiling)`` without a device spec: positive, and at most :data:`SPEC_FREE_CEILING`
    times the largest training target (scaled by the FLOPs ratio to the largest training graph)."""
    if metric == "util_pct":
        return 0.0, 100.0
    if not target_range:
        return 0.0, math.inf
    scale = max(1.0, costs["flops"] / flops_range[1]) if flops_range and flops_range[1] > 0 else 1.0
    return 0.0, SPEC_FREE_CEILING * float(target_range[1]) * scale


def check(value: float, lo: float, hi: float, floor: float, ceiling: float, unit: str,
          basis: str, floor_basis: str | None = None) -> tuple[float, float, float, list[str]]:
    """Clip ``value`` and its interval ``[lo, hi]`` to ``[floor, ceiling]``; the flags say what was done
    (``basis``: where the bounds come from; ``floor_basis``: the floor's, if more specific).

    Returns:
        ``(value, lo, hi, flags)``.

    Raises:
        AbsurdAnswerError: ``value`` is not finite, or is zero or negative once clipped (a latency:
            under :data:`MIN_LATENCY_MS`); utilisation (``%``) may be zero.
    """
    flags = []
    v = float(value)
    if not math.isfinite(v):
        raise AbsurdAnswerError(f"the network returned {v} {unit} ({basis}): no answer",
                                "the graph is far outside what the predictor was trained on; try another "
                                "predictor or --basis spec")
    if v < floor or v > ceiling:  # the network is off its map: the interval is all the bounds allow
        lo, hi = floor, ceiling
    if v < floor:
        flags.append(f"predicted {_f(v)} {unit} is below the physical floor {_f(floor)} {unit} ({floor_basis or basis}); "
                     f"raised to it")
        v = floor
    elif v > ceiling:
        flags.append(f"predicted {_f(v)} {unit} is {CEILING_WORDS} {_f(ceiling)} {unit} ({basis}); no answer")
        v = ceiling
    least = MIN_LATENCY_MS if unit == "ms" else 0.0
    if unit != "%" and (v <= 0.0 or v < least):
        raise AbsurdAnswerError(f"the prediction {_f(v)} {unit} is {'zero or negative' if v <= 0 else 'under 1 us'} "
                                f"({basis}): no answer", "the graph does no measurable work (check it with "
                                "perfseer graph), or it is outside what the predictor was trained on")
    return v, max(lo, floor) if math.isfinite(lo) else lo, min(hi, ceiling) if math.isfinite(hi) else hi, flags


def above_ceiling(row: dict) -> list[str]:
    """The flags of ``row`` that say its value was above the sanity ceiling."""
    return [str(f) for f in row.get("flags") or [] if CEILING_WORDS in str(f)]


def refuse_above_ceiling(row: dict) -> dict:
    """``row`` (a prediction row: ``value``, ``interval``, ``flags``) made a refusal, in place, when
    :func:`check` flagged its value above the sanity ceiling: ``value`` and ``interval`` ``None``,
    ``reason`` naming the value and the ceiling; the flag stays.  Other rows are returned as they are."""
    hit = above_ceiling(row)
    if hit and row.get("value") is not None:
        row["value"] = None
        row["interval"] = None
        row.pop("throughput_per_s", None)
        row["reason"] = (f"{'; '.join(hit)}: the value is no answer; ask another basis (--basis spec) or check "
                         "the model's input shape")
    return row


_BATCH_LINES = ("input", "activations", "transient")  # the lines of a step's memory that grow with the batch


def memory_bounds(capacity: int | None = None) -> tuple[float, float]:
    """``(floor, ceiling)`` of a step's total memory in bytes on a device of ``capacity`` bytes
    (``None``: no device)."""
    ceiling = float(MEMORY_CEILING_BYTES)
    if capacity:
        ceiling = min(ceiling, float(MEMORY_CEILING_CAPACITY) * float(capacity))
    return 1.0, ceiling


def check_memory(total, breakdown: dict, batch: int, capacity: int | None, label: str) -> None:
    """Refuse an absurd memory estimate (see the module docstring).

    Raises:
        AbsurdAnswerError: naming the value and the bound it breaks.
    """
    fix = "check the model's shapes (perfseer graph MODEL) and --input-shape; a corrupt graph gives absurd sizes"
    try:
        t = float(total)
        lines = {k: float(v) for k, v in (breakdown or {}).items()}
    except (TypeError, ValueError):
        raise AbsurdAnswerError(f"{label}: the memory estimate is not a number", fix) from None
    floor, ceiling = memory_bounds(capacity)
    if not math.isfinite(t) or not all(math.isfinite(v) for v in lines.values()):
        raise AbsurdAnswerError(f"{label}: the memory estimate is not finite ({t}): no answer", fix)
    if t < floor:  # a line may be negative (a learned estimate's allocator line corrects its sum); the total not
        raise AbsurdAnswerError(f"{label}: the memory estimate is zero or negative ({t:.4g} bytes): no answer", fix)
    own = lines.get("weights", 0.0) + lines.get("context", 0.0)
    if t < own * (1 - 1e-9):
        raise AbsurdAnswerError(f"{label}: the memory estimate {t:.4g} bytes is less than its own weights and "
                                f"context ({own:.4g} bytes): no answer", fix)
    if t > ceiling:
        where = "the device's memory" if capacity else "any device's memory"
        raise AbsurdAnswerError(f"{label}: the memory estimate {t:.4g} bytes is over the sanity ceiling "
                                f"{ceiling:.4g} bytes ({where}): no answer", fix)
    per_sample = sum(max(0.0, lines.get(k, 0.0)) for k in _BATCH_LINES) / max(1, int(batch))
    if per_sample > MEMORY_CEILING_PER_SAMPLE:
        raise AbsurdAnswerError(f"{label}: {per_sample:.4g} bytes per sample is over the sanity ceiling "
                                f"{MEMORY_CEILING_PER_SAMPLE:.4g} bytes: no answer", fix)


def _f(v: float) -> str:
    return f"{v:.4g}"
