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
by 0 and 100 %.  A prediction outside its bounds, or not finite, is clipped to them and flagged
(:func:`check`), never shown bare; its interval is then the whole ``[floor, ceiling]``: a network
that left the physical range says nothing about where in it the answer lies.
"""

from __future__ import annotations

import math

import numpy as np

from perfseer.features import schema

KERNEL_FLOOR_S = 1e-6  # least GPU time of one convolution / matmul kernel (launch to completion)
CEILING_EFFICIENCY = 1000.0  # the ceiling runs the whole graph at 1/1000 of the roofline
CEILING_OP_S = 0.01  # ... plus 10 ms per operator (eager frameworks spend ~5-50 us per op)
SPEC_FREE_CEILING = 1000.0  # without a spec: this many times the largest training target
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
    """
    flags = []
    v = float(value)
    if not math.isfinite(v):
        mid = math.sqrt(floor * ceiling) if math.isfinite(ceiling) and floor > 0 else floor
        flags.append(f"the network returned {v}; shown: the middle of the physical bounds {_f(floor)}-{_f(ceiling)} "
                     f"{unit} ({basis})")
        return mid, floor, ceiling, flags
    if v < floor or v > ceiling:  # the network is off its map: the interval is all the bounds allow
        lo, hi = floor, ceiling
    if v < floor:
        flags.append(f"predicted {_f(v)} {unit} is below the physical floor {_f(floor)} {unit} ({floor_basis or basis}); "
                     f"raised to it")
        v = floor
    elif v > ceiling:
        flags.append(f"predicted {_f(v)} {unit} is above the sanity ceiling {_f(ceiling)} {unit} ({basis}); "
                     f"lowered to it")
        v = ceiling
    return v, max(lo, floor) if math.isfinite(lo) else lo, min(hi, ceiling) if math.isfinite(hi) else hi, flags


def _f(v: float) -> str:
    return f"{v:.4g}"
