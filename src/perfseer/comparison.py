"""Which GPU: one model's step time and throughput on every registered GPU (or a list), ranked,
with each row's basis, precision and interval, and whether the step fits in the GPU's memory.

Example::

    import perfseer

    rows = perfseer.compare("timm:resnet50", batch=64, phase="train", devices=["a10g", "l4", "h100-sxm"])
    [(r["rank"], r["device"], r["value"], r["throughput_per_s"], r["fits"]) for r in rows]

The step times are :func:`perfseer.predict`'s (one request for every device: one precision for
all, the routing's basis per device); the memory is :func:`perfseer.memory`'s simulated peak of
the step (device memory used at its peak, CUDA context included), compared with each GPU's memory.
A GPU the step does not fit in is listed, with its time, but marked and ranked after those it fits.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import nullcontext

from perfseer.devices import get_device, list_devices
from perfseer.errors import PerfseerError
from perfseer.kept import remember
from perfseer.runtime.route import predict

_MEMORY_PRECISION = {"fp32": "fp32", "tf32": "fp32", "amp-fp16": "amp-fp16", "amp-bf16": "amp-bf16", "fp16": "fp16",
                     "bf16": "bf16", "amp": "amp-fp16"}


_ENERGY_KEYS = ("power_w", "energy_j", "energy_j_per_sample", "util_pct", "power_limit_w", "energy_notes")


# a row's ``basis_kind`` (set by the basis that answered it) -> the short label a table shows
BASIS_LABELS = {"measured": "measured", "calibrated": "calibrated", "anchored": "anchored",
                "transfer": "spec transfer", "anygpu": "any-GPU model", "blend": "any-GPU x kernel nets",
                "roofline": "roofline", "kernels": "kernel nets"}
# the words of a basis text that say whether the device's own measurements are in its data (the
# row's ``basis_seen`` says it; a footnote shared by every GPU leaves them out)
_SEEN_WORDS = (", measured in its data", ", its FP32 kernels in the training data", ", no measurement of it")


def describe_basis(row: dict, device: str) -> tuple[str, str, bool | None]:
    """A predicted row's basis as ``(label, note, seen)``: a short label for a table column (from
    the row's ``basis_kind``), the basis text with this device's particulars taken out (one footnote
    serves every GPU with that label), and whether the device's own measurements are in the basis's
    data (the row's ``basis_seen``; ``None``: not known). A refused row's note is its reason.
    """
    if row.get("value") is None and row.get("reason"):
        return "refused", str(row["reason"]), None
    text = str(row.get("basis") or "")
    kind = row.get("basis_kind")
    label = BASIS_LABELS.get(kind) or text.split(" (")[0] or "-"
    seen = row.get("basis_seen")
    for words in _SEEN_WORDS:
        text = text.replace(words, "")
    dev = re.escape(device)
    text = re.sub(rf"\b{dev} from its spec sheet", "each GPU from its spec sheet", text)
    text = re.sub(rf"carried to {dev} by its spec sheet", "carried to each GPU by its spec sheet", text)
    text = re.sub(rf"; no measurement of {dev}\b", "", text)
    return label, text, seen


class CompareError(PerfseerError):
    """A comparison that cannot be made (no GPU, a CPU asked, bad batch)."""


def _devices(devices) -> list:
    if devices is None:
        return [s for s in list_devices("gpu")]
    names = [devices] if isinstance(devices, str) else list(devices)
    if not names:
        raise CompareError("no device to compare", "pass --device NAME (several times), or none for every GPU")
    out = []
    for n in names:
        s = get_device(n)
        if s.kind != "gpu":
            raise CompareError(f"{n} is a {s.kind}; perfseer compare ranks GPUs",
                               "use perfseer predict --device for a CPU")
        if s.name not in [o.name for o in out]:
            out.append(s)
    return out


_MEMORY_KEPT: OrderedDict = OrderedDict()  # the last simulated steps (a warm process compares one model again)


def _memory_key(model, batch, phase, precision, optimizer, input_shape):
    """The key of a simulated step: a model named by a string (a zoo name, or a file with its size
    and time), the step's settings; ``None`` for a model object (not kept)."""
    if not isinstance(model, str):
        return None
    try:
        st = os.stat(model)
        stamp = (st.st_size, st.st_mtime_ns)
    except (OSError, ValueError):
        stamp = None
    shape = tuple(input_shape) if input_shape is not None else None
    return (model, stamp, batch, phase, precision, optimizer, shape)


def _memory(model, batch, phase, precision, optimizer, input_shape) -> tuple[float | None, str]:
    """Simulated device memory of the step (bytes) and its basis, or ``(None, reason)``; the last
    few simulated steps are kept (:func:`_memory_key`)."""
    key = _memory_key(model, batch, phase, precision, optimizer, input_shape)
    if key is not None and key in _MEMORY_KEPT:
        return _MEMORY_KEPT[key]
    from perfseer.memory.api import memory  # deferred: loads torch

    try:
        est = memory(model, batch=batch, phase=phase, optimizer=optimizer if phase == "train" else None,
                     precision=_MEMORY_PRECISION.get(precision or "fp32", "fp32"), input_shape=input_shape)
        out = (float(est.total), est.basis)
    except PerfseerError as e:
        return None, f"memory not estimated: {e}"  # not kept: a time limit or a file may change
    if key is not None:
        remember(_MEMORY_KEPT, key, out, 16)
    return out


def ahead(specs):
    """A context in which the spec model predicts a graph's kernels for every GPU of ``specs`` at
    once (:meth:`perfseer.runtime.spec.SpecModel.expecting`); a plain one where it cannot load."""
    from perfseer.runtime.spec import load_spec_model

    try:
        return load_spec_model().expecting(specs)
    except PerfseerError:
        return nullcontext()


def compare(model, batch: int = 1, phase: str = "infer", devices: str | Sequence[str] | None = None,
            precision: str | None = None, optimizer: str = "adamw", input_shape=None, seq_len: int | None = None,
            memory: bool = True, energy: bool = False, power_limit_w: float | None = None,
            rank_by: str = "time", _predict=None, _memory_of=None) -> list[dict]:
    """Rank GPUs by ``model``'s step time at ``batch``.

    Args:
        model: anything :func:`perfseer.predict` takes.
        batch: samples per step.
        phase: ``infer`` or ``train``.
        devices: GPU names (``perfseer devices``); default every registered GPU (MIG slices not).
        precision: one precision for every GPU (``fp32``, ``tf32``, ``amp-fp16``, ``bf16``...);
            default as :func:`perfseer.predict` picks it (a measured card's own, else fp32).
        optimizer: the training step's optimizer (memory).
        memory: simulate the step's memory and say where it does not fit.
        energy: also predict each GPU's power, energy per step and per sample and utilisation
            (:mod:`perfseer.energy`; ``power_w``, ``energy_j``, ``energy_j_per_sample``, ``util_pct``).
        power_limit_w: a power cap for every GPU (with ``energy``).
        rank_by: ``time`` (step time, the default) or ``energy`` (energy per sample: the most
            efficient GPU first; needs ``energy``).
        _predict, _memory_of: for the service: replace :func:`perfseer.predict` (same keywords)
            and the memory simulation (``(model, batch, phase, precision, optimizer, input_shape)
            -> (bytes or None, basis)``), so that the model is extracted and simulated in its sandbox.

    Returns:
        One dict per GPU, fastest (or, with ``rank_by="energy"``, most efficient) first (GPUs the
        step does not fit in after the others, refused rows last): ``rank``, ``device``, ``display_name``, ``value`` (ms per step), ``interval``,
        ``throughput_per_s`` (samples/s), ``basis``, ``basis_label`` (its short name),
        ``seen`` (the GPU's own measurements are in the basis's data), ``precision``, ``in_domain``,
        ``memory_gib`` (the step's), ``device_memory_gib``, ``fits`` (``None`` when not
        estimated), ``memory_basis``, and ``reason`` for a refused row.

    Raises:
        CompareError: no device, a CPU, a batch below 1.
        PerfseerError: a model or device that cannot be read.
    """
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise CompareError(f"batch must be an integer >= 1, got {batch!r}", "pass --batch N")
    if phase not in ("infer", "train"):
        raise CompareError(f"phase must be 'infer' or 'train', got {phase!r}", "pass --phase infer or --phase train")
    if rank_by not in ("time", "energy"):
        raise CompareError(f"rank_by must be 'time' or 'energy', got {rank_by!r}", "pass --rank-by time or energy")
    if rank_by == "energy" and not energy:
        raise CompareError("ranking by energy needs the energy prediction", "add --energy (energy=True)")
    specs = _devices(devices)
    extra = {"energy": True, "power_limit_w": power_limit_w} if energy else {}
    if _predict is None:
        with ahead(specs):
            rows = predict(model, device=[s.name for s in specs], batch=batch, phase=phase, precision=precision,
                           input_shape=input_shape, seq_len=seq_len, **extra)
    else:
        rows = _predict(model, device=[s.name for s in specs], batch=batch, phase=phase, precision=precision,
                        input_shape=input_shape, seq_len=seq_len, **extra)
    lat = {r["device"]: r for r in rows if r.get("metric", "latency_ms") == "latency_ms"}
    used_precision = next((r.get("precision") for r in lat.values() if r.get("precision")), precision)
    mem_bytes, mem_basis = (None, "not asked")
    if memory:
        mem_bytes, mem_basis = (_memory_of or _memory)(model, batch, phase, used_precision, optimizer, input_shape)
    out = []
    for s in specs:
        r = lat.get(s.name) or next((v for k, v in lat.items() if get_device(k).name == s.name), None)
        row = {"device": s.name, "display_name": s.display_name, "batch_size": batch, "phase": phase,
               "precision": (r or {}).get("precision") or used_precision, "value": None, "interval": None,
               "throughput_per_s": None, "basis": (r or {}).get("basis", ""), "basis_kind": (r or {}).get("basis_kind"),
               "basis_seen": (r or {}).get("basis_seen"), "in_domain": (r or {}).get("in_domain"),
               "device_memory_gib": s.memory_gib, "memory_gib": None if mem_bytes is None else mem_bytes / 2**30,
               "fits": None, "memory_basis": mem_basis}
        if r is None or r.get("value") is None:
            row["reason"] = (r or {}).get("reason") or "no basis answered for this GPU"
        else:
            row["value"] = float(r["value"])
            row["interval"] = r.get("interval")
            row["throughput_per_s"] = batch / row["value"] * 1000.0 if row["value"] > 0 else None
            for k in _ENERGY_KEYS:
                if r.get(k) is not None:
                    row[k] = r[k]
        if mem_bytes is not None and s.memory_gib:
            row["fits"] = mem_bytes <= s.memory_gib * 2**30
            if not row["fits"]:
                row["memory_note"] = (f"does not fit: the step needs {mem_bytes / 2**30:.1f} GiB, "
                                      f"{s.name} has {s.memory_gib:g} GiB")
        row["basis_label"], _, row["seen"] = describe_basis(row, s.name)
        out.append(row)
    key = "energy_j_per_sample" if rank_by == "energy" else "value"
    out.sort(key=lambda r: (r.get(key) is None, r["fits"] is False, r.get(key) if r.get(key) is not None else 0.0))
    for i, r in enumerate(out, 1):
        r["rank"] = i
    return out
