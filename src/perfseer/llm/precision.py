"""Numeric formats of an LLM's weights, activations and KV cache (:class:`Quant`).

``precision`` is one of the project's names (:data:`perfseer.runtime.answer.PRECISIONS`, aliases
as :func:`~perfseer.runtime.answer.canonical_precision` reads them) that an LLM can run at:
``fp32``, ``fp16``, ``bf16``, ``fp8``, ``int8``, ``int4``.  Weight-only quantization (W8A16, W4A16,
AWQ/GPTQ-style with a scale and a zero point per ``group_size`` weights) stores weights small and
multiplies at the activation type; weights+activations (W8A8, FP8) multiplies at the small type on
a GPU whose spec sheet lists that rate, else at the 16-bit rate (and says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfseer.errors import PerfseerError
from perfseer.runtime.answer import canonical_precision

LLM_PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
KV_PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


class PrecisionError(PerfseerError):
    """A precision, KV-cache type or group size an LLM cannot run at."""


@dataclass(frozen=True)
class Quant:
    """Bytes per element and the multiply rate of one run.

    Attributes:
        precision: the weights' format (``bf16``, ``int4``...).
        weights_only: weights stored at ``precision``, activations at ``act``.
        group_size: weights per quantization scale (int4/int8 weight-only); 0 for none.
        act: the activation type (``fp16``/``bf16``/``fp32``).
        kv: the KV cache's type.
        w_bytes: bytes per weight, scales and zero points included.
        a_bytes: bytes per activation element outside the GEMMs; ``gemm_in_bytes`` inside them.
        kv_bytes: bytes per KV-cache element.
        compute: the peak-rate key of the device sheet GEMMs run at (``fp16``, ``fp8``, ``int8``).
    """

    precision: str
    weights_only: bool
    group_size: int
    act: str
    kv: str
    w_bytes: float
    a_bytes: float
    gemm_in_bytes: float
    kv_bytes: float
    compute: str
    notes: tuple = ()


def make_quant(precision: str = "bf16", weights_only: bool | None = None, group_size: int | None = None,
               kv_precision: str | None = None, device_peaks: dict | None = None) -> Quant:
    """The :class:`Quant` of a request.

    Args:
        precision: weights' format, a name of :data:`LLM_PRECISIONS` (or an alias: ``float16``...).
        weights_only: quantize the weights only; default: ``True`` for ``int4``, else ``False``.
        group_size: weights per scale for weight-only int4/int8 (default 128; ``-1``: per channel).
        kv_precision: the KV cache's type (default: the activation type).
        device_peaks: the device's ``peak_tflops`` (whether it has an fp8/int8 unit).

    Raises:
        PrecisionError: a name the project does not know or an LLM does not run at, a bad group size.
    """
    p = canonical_precision(precision)
    if p not in LLM_PRECISIONS:
        raise PrecisionError(f"precision {precision!r} is not one an LLM is served at",
                             f"use one of {', '.join(LLM_PRECISIONS)}")
    if weights_only is None:
        weights_only = p == "int4"
    if p == "int4" and not weights_only:
        raise PrecisionError("int4 weights with int4 activations (W4A4) is not costed",
                             "use --weights-only with int4 (W4A16, as AWQ/GPTQ/Marlin run it)")
    notes = []
    act = "bf16" if p == "bf16" else ("fp32" if p == "fp32" else "fp16")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                   or (group_size <= 0 and group_size != -1) or group_size > 1 << 20):
        raise PrecisionError(f"group size must be a positive integer or -1 (per channel), got {group_size!r}",
                             "use e.g. --group-size 128")
    w = _BYTES[p]
    gs = 0
    if p in ("int4", "int8") and weights_only:
        gs = 128 if group_size is None else group_size
        if gs > 0:  # a 16-bit scale and a zero point at the weight's width per group
            w += (2.0 + _BYTES[p]) / gs
    elif group_size is not None:
        notes.append(f"group size {group_size} ignored: it applies to weight-only int4/int8")
    kv = act if kv_precision is None else canonical_precision(kv_precision)
    if kv not in KV_PRECISIONS:
        raise PrecisionError(f"KV-cache precision {kv_precision!r} is not one a KV cache is stored at",
                             f"use one of {', '.join(KV_PRECISIONS)}")
    compute = act if act != "fp32" else "fp32"
    gemm_in = _BYTES[act]
    if p in ("fp8", "int8") and not weights_only:
        peaks = device_peaks or {}
        if peaks.get(p):
            compute, gemm_in = p, 1.0
        else:
            notes.append(f"the device lists no {p} rate: its GEMMs are costed at the {act} rate on {p} weights "
                         "(weight-only, as vLLM runs them there)")
    elif p != act and weights_only:
        notes.append(f"weight-only {p}: weights read at {w:.3g} bytes each, multiplied at the {act} rate")
    return Quant(precision=p, weights_only=bool(weights_only), group_size=gs, act=act, kv=kv, w_bytes=w,
                 a_bytes=_BYTES[act], gemm_in_bytes=gemm_in, kv_bytes=_BYTES[kv], compute=compute, notes=tuple(notes))
