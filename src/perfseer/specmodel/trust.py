"""How far to trust a spec-model answer: its domain of validity, a verdict with reasons per row,
and a 90 % interval — the fields every measured-device prediction row carries (``interval``,
``in_domain``, ``domain_reasons``, ``flags``; see ``docs/concepts/trust.md``), here for a GPU nobody measured.

**Domain** (``domain`` in the spec card, written by ``scripts/train_spec_model.py`` from the GPUs
its kernel data come from).  A row is out of domain, with one reason each, when

- the device is of another vendor than the training GPUs (AMD: the kernels are NVIDIA's);
- the device's memory bandwidth, FP32 peak or SM count lies beyond the training GPUs' range by
  more than ``tolerance`` (a factor; 1.5: the kernel model sees a device only through these, and
  its inputs are held at the edge of the training range, so a GPU far outside is answered as the
  nearest training GPU would be);
- the precision has no kernel measurements (the training kernels are FP32 with TF32 off:
  ``fp16``/``bf16``/``tf32`` GEMMs run on tensor cores, whose efficiency the model extrapolates
  from the tensor-core peak);
- more than ``max_approx_share`` of the predicted step is in operators no kernel family covers,
  each costed as one memory-bound pass over its tensors (pooling, resizing, gathers,
  concatenation, depthwise convolutions ...: :data:`FAMILY_OPS` lists what the families learned);
- more than ``max_approx_share`` of the predicted step is in kernel families the interval's
  calibration runs did not have (the ``fp32`` runs are transformers: no convolution);
- an operator with multiply-accumulates is costed as a memory-bound pass (``LSTM``, ``GRU``,
  ``Einsum``...): its arithmetic is not modelled at all.

**Interval**: split-conformal in log space (:mod:`perfseer.trust.intervals`), ``q`` from
leave-one-GPU-out residuals stored in the card's ``intervals`` by kind of answer: ``fp32``
(NeuSight's end-to-end workloads, ``benchmarks/lib/spec_neusight.py --trust``), ``amp-calibrated``
and ``amp-zero-shot`` (timm inference at FP16 on RTX GPUs with / without the whole-model
calibration, ``benchmarks/lib/spec_timm_logo.py --trust``).  Out of domain for a reason the
calibration runs did not share (a device beyond the range, uncovered operators; a precision the
``amp-*`` runs were measured at is theirs) ``q`` is multiplied by ``ood_factor`` (2, as for the
measured predictors).  The value and interval are then held to the physical bounds of
:mod:`perfseer.trust.bounds`.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pandas as pd

from perfseer.features import schema
from perfseer.kept import remember
from perfseer.trust import bounds as bnd
from perfseer.trust import intervals as itv
from perfseer.trust.bounds import MATMUL_OPS

TOLERANCE = 1.5  # a device spec may lie this factor beyond the training GPUs' range and stay in domain
MAX_APPROX_SHARE = 0.25  # largest share of the predicted step in operators no kernel family covers
OOD_FACTOR = 2.0  # q's multiplier for a reason the calibration runs did not share
RANGE_SPECS = {"mem_bandwidth_gbs": ("memory bandwidth", "GB/s"), "fp32_tflops": ("FP32 peak", "TFLOP/s"),
               "sms": ("SM count", "")}
# Operators whose kernels are of a family the training data measured: GEMMs, convolutions,
# attention (two GEMMs and a softmax), layer norm, softmax and element-wise arithmetic (NeuSight's
# add/mul/div/pow, relu/gelu/tanh: any unary or binary element-wise op is the same memory-bound kernel).
FAMILY_OPS = frozenset({
    "MatMul", "Gemm", "FusedMatMul", "Conv", "ConvTranspose", "Attention", "LayerNormalization",
    "RMSNormalization", "SimplifiedLayerNormalization", "Softmax", "LogSoftmax",
    "Add", "Sub", "Mul", "Div", "Pow", "Relu", "Gelu", "FastGelu", "Tanh", "Sigmoid", "HardSigmoid", "HardSwish",
    "Erf", "Sqrt", "Reciprocal", "Neg", "Exp", "Log", "Abs", "Clip", "LeakyRelu", "Elu", "Selu", "Mish", "Softplus",
    "Where", "Max", "Min", "Sum", "BatchNormalization", "Dropout", "Cast", "Equal", "Less", "Greater", "Not", "And",
    "Or", "Sin", "Cos", "PRelu", "QuickGelu", "BiasGelu"})


def build_domain(specs, precisions=("fp32",), tolerance: float = TOLERANCE,
                 max_approx_share: float = MAX_APPROX_SHARE) -> dict:
    """The card's ``domain`` from the :class:`~perfseer.devices.DeviceSpec` of the training GPUs."""
    vals = {"mem_bandwidth_gbs": [float(s.mem_bandwidth_gbs) for s in specs],
            "fp32_tflops": [float(s.peak("fp32")) for s in specs], "sms": [float(s.sms) for s in specs]}
    return {"devices": sorted(s.name for s in specs), "vendors": sorted({s.vendor for s in specs if s.vendor}),
            "ranges": {k: [min(v), max(v)] for k, v in vals.items()},
            "tolerance": tolerance, "precisions": list(precisions), "max_approx_share": max_approx_share,
            "family_ops": sorted(FAMILY_OPS)}


def device_reasons(spec, domain: dict) -> list[str]:
    """Why ``spec`` lies outside the training GPUs (empty: it does not)."""
    tol = float(domain.get("tolerance", TOLERANCE))
    have = {"mem_bandwidth_gbs": float(spec.mem_bandwidth_gbs or 0), "fp32_tflops": float(spec.peak("fp32")),
            "sms": float(spec.sms)}
    out = []
    vendors = domain.get("vendors") or []
    if vendors and spec.vendor and spec.vendor not in vendors:
        out.append(f"{spec.name} is an {spec.vendor.upper()} GPU; the kernels were measured on "
                   f"{', '.join(v.upper() for v in vendors)} GPUs only")
    for key, (lo, hi) in domain.get("ranges", {}).items():
        v = have.get(key)
        if v is None or v <= 0:
            continue
        what, unit = RANGE_SPECS.get(key, (key, ""))
        if v > hi * tol or v < lo / tol:
            side = f"{v / hi:.1f}x above" if v > hi else f"{lo / v:.1f}x below"
            out.append(f"{spec.name}'s {what} {v:g}{' ' + unit if unit else ''} is {side} the training GPUs' "
                       f"{lo:g}-{hi:g} (tolerance {tol:g}x): extrapolated")
    return out


def precision_reasons(precision: str, domain: dict) -> list[str]:
    if precision in domain.get("precisions", ["fp32"]):
        return []
    if precision == "tf32":
        return ["tf32: the training kernels ran with TF32 off; tensor-core GEMM efficiency is extrapolated "
                "from the TF32 peak"]
    return [f"{precision}: no {precision} kernel measurements (trained on FP32); tensor-core GEMM efficiency is "
            f"extrapolated from the {precision} peak"]


def op_reasons(table: pd.DataFrame, us: np.ndarray, x: np.ndarray, op_types, domain: dict, key=None) -> list[str]:
    """Reasons from the operators: compute operators costed as memory passes, and the share of the
    step in operators no kernel family covers.  ``table``/``us``: the step's kernels and their
    predicted µs (:func:`perfseer.specmodel.compose.step_kernels`), or a function giving them
    (called only where some kernel is costed approximately); ``key``: a key of the graph's
    content and step (its kernels' operators are then read once for every GPU)."""
    if not len(table):
        return []
    family_ops = frozenset(domain.get("family_ops", FAMILY_OPS))
    mkey = None if key is None else (key, family_ops)
    hit = _OP_MASKS.get(mkey) if mkey is not None else None
    if hit is None:
        hit = _op_masks(table, x, op_types, family_ops)
        if mkey is not None:
            remember(_OP_MASKS, mkey, hit, 64)
    heavy, approx, dw, op = hit
    out = []
    if heavy:
        out.append(f"{', '.join(heavy)}: multiply-accumulates costed as a memory-bound pass (no kernel family "
                   f"covers them); likely too fast")
    if not approx.any():
        return out
    us = _values(us)
    total = float(us.sum())
    share = float(us[approx].sum()) / total if total > 0 else 0.0
    lim = float(domain.get("max_approx_share", MAX_APPROX_SHARE))
    if share > lim:
        by_op = pd.Series(us[approx], index=np.where(dw[approx], "depthwise Conv", op[approx])).groupby(level=0).sum()
        top = ", ".join(f"{o} {v / total * 100:.0f} %" for o, v in by_op.sort_values(ascending=False).head(4).items())
        out.append(f"{share * 100:.0f} % of the predicted step is in operators no kernel family was trained on, "
                   f"each costed as one memory-bound pass ({top}; limit {lim * 100:.0f} %)")
    return out


_OP_MASKS: OrderedDict = OrderedDict()  # (graph key, family operators) -> _op_masks


def forget_op_masks() -> None:
    """Forget the kept operators of each graph's kernels (:func:`op_reasons` ``key``)."""
    _OP_MASKS.clear()


def _op_masks(table, x, op_types, family_ops) -> tuple:
    """``(heavy, approx, dw, op)`` of a step's kernels: the operators with multiply-accumulates
    costed as memory passes, the kernels costed approximately, the depthwise-like convolutions
    among them and each kernel's operator."""
    ops = np.asarray(list(op_types), dtype=object)
    macs = x[:, schema.NODE_FEATURES.index("macs")]
    node = table["node"].to_numpy()
    real = node >= 0  # the optimizer pass (node -1) and a training step's dropouts (-2) have no graph node
    other = table["op"].to_numpy(dtype=object) if "op" in table else np.full(len(table), "optimizer", dtype=object)
    op = np.where(real, ops[np.clip(node, 0, None)], other)
    vec = (table["family"].to_numpy() == "vec") & real
    heavy = sorted({o for o, n in zip(op[vec], node[vec]) if macs[n] > 0 and o not in family_ops})
    approx = real & ~np.isin(op, list(family_ops))
    dw = vec & np.isin(op, ["Conv", "ConvTranspose"])  # depthwise-like convolutions fall to vec
    return heavy, approx | dw, dw, op


def _values(us) -> np.ndarray:
    """``us``, or what it gives where it is a function (the kernel predictions, computed on demand)."""
    return np.asarray(us() if callable(us) else us, dtype=float)


def calibration_reasons(table: pd.DataFrame, us: np.ndarray, cal: dict, kind: str, lim: float) -> list[str]:
    """A reason when more than ``lim`` of the predicted step is in kernel families the interval's
    calibration runs did not contain (``families`` of the card's interval: NeuSight's transformers
    have no convolution)."""
    fams = cal.get("families")
    if not fams:
        return []
    us = _values(us)
    total = float(us.sum()) if len(us) else 0.0
    if total <= 0:
        return []
    other = ~np.isin(table["family"].to_numpy(), list(fams))
    share = float(us[other].sum()) / total
    if share <= lim:
        return []
    names = ", ".join(sorted(set(table["family"].to_numpy()[other])))
    return [f"{share * 100:.0f} % of the predicted step is in {names} kernels, which the {kind} interval's "
            f"calibration runs did not contain (they had {', '.join(fams)}); limit {lim * 100:.0f} %"]


def interval_kind(precision: str, phase: str, calibrated: bool) -> str:
    """Which of the card's ``intervals`` applies to a row."""
    if precision in ("fp16", "bf16"):
        return "amp-calibrated" if calibrated else "amp-zero-shot"
    return "fp32"


def assess_row(value: float, spec, precision: str, phase: str, calibrated: bool, card: dict,
               table: pd.DataFrame, us, x: np.ndarray, op_types, u: np.ndarray, key=None) -> dict:
    """``{"value", "interval", "in_domain", "domain_reasons", "flags"}`` of one spec-model row
    (``us``: the kernels' predicted µs, or a function giving them; ``key``: the graph's, both as
    :func:`op_reasons` takes them)."""

    domain = card.get("domain")
    kind = interval_kind(precision, phase, calibrated)
    flags: list[str] = []
    if domain is None:
        reasons = ["the spec model's card has no domain of validity (retrain with scripts/train_spec_model.py)"]
        widen_reasons = reasons
    else:
        dev_r, prec_r, op_r = device_reasons(spec, domain), precision_reasons(precision, domain), \
            op_reasons(table, us, x, op_types, domain, key)
        cal = (card.get("intervals") or {}).get(kind) or {}
        cal_r = calibration_reasons(table, us, cal, kind, float(domain.get("max_approx_share", MAX_APPROX_SHARE)))
        reasons = dev_r + prec_r + op_r + cal_r
        # the amp-* calibration runs were at 16 bits: their precision reason is part of their q
        widen_reasons = dev_r + op_r + cal_r + ([] if kind.startswith("amp") else prec_r)
    cal = (card.get("intervals") or {}).get(kind) or {}
    q = cal.get("q")
    lo = hi = float("nan")
    if q is not None:
        factor = float(card.get("ood_factor", OOD_FACTOR)) if widen_reasons else 1.0
        a, b = itv.bounds([value], q, [factor == 1.0], factor)
        lo, hi = float(a[0]), float(b[0])
    else:
        flags.append(f"no interval: the spec card has no {kind} calibration "
                     "(scripts/train_spec_model.py --attach-only --trust ...)")
    costs = _costs(u, op_types)
    floor, ceiling, how = bnd.latency_bounds_ms(costs, spec, phase)
    v, lo, hi, fl = bnd.check(value, lo, hi, floor, ceiling, "ms", f"{spec.name} spec", f"{how} floor of {spec.name}")
    flags += fl
    interval = [lo, hi] if q is not None and math.isfinite(lo) and math.isfinite(hi) else None
    return {"value": v, "interval": interval, "in_domain": not reasons, "domain_reasons": reasons, "flags": flags}


def _costs(u: np.ndarray, op_types) -> dict:
    g = schema.GLOBAL_FEATURES
    u = np.asarray(u, dtype=float).reshape(-1)

    return {"flops": float(u[g.index("flops_total")]), "weight_bytes": float(u[g.index("weight_total")]),
            "ops": int(len(op_types)), "matmul_ops": sum(1 for o in op_types if o in MATMUL_OPS)}
