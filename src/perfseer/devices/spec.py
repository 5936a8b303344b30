"""A device's spec sheet (:class:`DeviceSpec`), its MIG profiles (:class:`MigProfile`), and the
validation of the JSON spec files they are read from.

A spec file is JSON: ``{"format": "perfseer.devices", "format_version": 1, "devices": [...]}``
(or one device object on its own), each device::

    {"name": "h100-sxm", "kind": "gpu", "display_name": "NVIDIA H100 SXM5 80GB",
     "aliases": ["h100", "NVIDIA H100 80GB HBM3"],
     "memory_gib": 80, "mem_bandwidth_gbs": 3350, "sms": 132, "cores_per_sm": 128,
     "clock_mhz": 1980, "l2_mib": 50,
     "peak_tflops": {"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "int8": 1978.9},
     "tdp_w": 700,
     "mig": {"profiles": ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"], "sms_per_slice": 16},
     "source": "NVIDIA H100 datasheet"}

Required: ``name``, ``kind`` (``gpu`` or ``cpu``), ``mem_bandwidth_gbs`` (GPUs), ``sms`` (SMs or
compute units; cores for a CPU), ``peak_tflops`` with at least ``fp32``, and ``source`` (where
the numbers come from).  Peak rates are dense (without structured sparsity), TFLOP/s (TOP/s for
int8).

MIG (Multi-Instance GPU) profiles ``<g>g.<m>gb`` are derived: ``g`` of the GPU's 7 compute
slices and ``m`` GB of its memory, which is also the profile's share of the 8 memory slices
(bandwidth and L2 go with the memory slices).  A slice's SMs are ``sms_per_slice`` x ``g`` where
the file gives it (A100: 14 SMs per slice, 98 at 7g), else ``sms`` x ``g`` / 7.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from perfseer.errors import PerfseerError

FORMAT = "perfseer.devices"
FORMAT_VERSION = 1
KINDS = ("gpu", "cpu")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8")
_MIG_RE = re.compile(r"^([1-7])g\.(\d+)gb$")
_FIELDS = {"name", "display_name", "kind", "vendor", "architecture", "aliases", "memory_gib", "mem_bandwidth_gbs",
           "sms", "cores_per_sm", "clock_mhz", "l2_mib", "peak_tflops", "tdp_w", "mig", "source", "notes", "memory_type"}


class DeviceSpecError(PerfseerError):
    """A device spec file that cannot be used (unreadable, a missing or bad field)."""


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile of a GPU: ``name`` (``1g.10gb``), its memory (GiB), its share of the GPU's
    compute (``g``/7 slices) and of its memory system (memory slices of 8: capacity, bandwidth, L2),
    and its SMs."""

    name: str
    memory_gib: float
    compute_fraction: float
    memory_fraction: float
    sms: int


@dataclass(frozen=True)
class DeviceSpec:
    """A device's spec sheet.

    Attributes:
        name: canonical name (``h100-sxm``); ``display_name`` the marketing name.
        kind: ``gpu`` or ``cpu``.
        memory_gib: device memory (``None`` for a CPU: system memory is not the chip's).
        mem_bandwidth_gbs: peak memory bandwidth, GB/s (``None`` where unknown).
        sms: streaming multiprocessors (AMD: compute units; CPU: cores).
        cores_per_sm: FP32 lanes per SM (CUDA cores / SM; 1 for a CPU core).
        clock_mhz: boost clock (CPU: base clock), MHz.
        l2_mib: L2 cache (CPU: last-level cache), MiB.
        peak_tflops: precision -> dense peak TFLOP/s (``fp32``, ``tf32``, ``fp16``, ``bf16``,
            ``fp8``, ``int8`` as known).
        tdp_w: board power, W.
        memory_type: ``HBM3``, ``GDDR6X``, ``LPDDR5``... (empty where not given).
        mig_profiles: the MIG profiles the GPU supports (empty if none).
        source: where the numbers come from.
        parent: the full GPU's name for a MIG slice (``a100-80gb-sxm:1g.10gb``), else ``None``.
        aliases: other names it answers to.
        origin: the spec file it was read from.
    """

    name: str
    kind: str
    peak_tflops: dict
    source: str
    sms: int
    display_name: str = ""
    vendor: str = ""
    architecture: str = ""
    memory_gib: float | None = None
    mem_bandwidth_gbs: float | None = None
    cores_per_sm: int | None = None
    clock_mhz: float | None = None
    l2_mib: float | None = None
    tdp_w: float | None = None
    memory_type: str = ""
    mig_profiles: tuple = ()
    parent: str | None = None
    aliases: tuple = ()
    notes: str = ""
    origin: str = ""
    mig_sms_per_slice: int | None = field(default=None, repr=False)

    def peak(self, precision: str) -> float:
        """Peak TFLOP/s for ``precision``, falling back to the FP32 rate where the sheet gives none
        (a GPU without FP16 tensor cores runs FP16/BF16 at about its FP32 rate, or slower).

        Raises:
            DeviceSpecError: an unknown precision name.
        """
        if precision not in PRECISIONS:
            raise DeviceSpecError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
        return float(self.peak_tflops.get(precision) or self.peak_tflops["fp32"])

    def mig(self, profile: str) -> "DeviceSpec":
        """The MIG slice ``profile`` of this GPU as a device of its own (``NAME:PROFILE``).

        Raises:
            DeviceSpecError: the GPU has no such profile.
        """
        for p in self.mig_profiles:
            if p.name == profile.lower():
                break
        else:
            have = ", ".join(p.name for p in self.mig_profiles) or "none"
            raise DeviceSpecError(f"{self.name} has no MIG profile {profile!r} (its profiles: {have})",
                                  f"use {self.name}:PROFILE with one of them")
        share = p.sms / self.sms
        return replace(
            self, name=f"{self.name}:{p.name}", display_name=f"{self.display_name or self.name} MIG {p.name}",
            memory_gib=p.memory_gib, sms=p.sms,
            mem_bandwidth_gbs=None if self.mem_bandwidth_gbs is None else self.mem_bandwidth_gbs * p.memory_fraction,
            l2_mib=None if self.l2_mib is None else self.l2_mib * p.memory_fraction,
            peak_tflops={k: v * share for k, v in self.peak_tflops.items()},
            tdp_w=None, mig_profiles=(), parent=self.name, aliases=(),
            source=f"derived from {self.name} ({p.name}: {p.sms} of {self.sms} SMs, {p.memory_fraction:g} of the "
                   f"memory slices); {self.name}: {self.source}")

    def to_dict(self) -> dict:
        """A JSON-ready dict (what ``perfseer devices --json`` prints)."""
        return {"name": self.name, "display_name": self.display_name, "kind": self.kind, "vendor": self.vendor,
                "architecture": self.architecture, "memory_gib": self.memory_gib,
                "mem_bandwidth_gbs": self.mem_bandwidth_gbs, "sms": self.sms, "cores_per_sm": self.cores_per_sm,
                "clock_mhz": self.clock_mhz, "l2_mib": self.l2_mib, "peak_tflops": dict(self.peak_tflops),
                "tdp_w": self.tdp_w, "memory_type": self.memory_type,
                "mig_profiles": [p.__dict__ for p in self.mig_profiles], "parent": self.parent,
                "aliases": list(self.aliases), "source": self.source, "notes": self.notes, "origin": self.origin}


def _number(d: dict, key: str, where: str, required: bool = False, integer: bool = False):
    v = d.get(key)
    if v is None:
        if required:
            raise DeviceSpecError(f"{where}: field '{key}' is missing", f"add \"{key}\": <number> (see docs/concepts/spec-model.md)")
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        raise DeviceSpecError(f"{where}: '{key}' must be a positive number, got {v!r}", f"fix '{key}'")
    if integer and int(v) != v:
        raise DeviceSpecError(f"{where}: '{key}' must be an integer, got {v!r}", f"fix '{key}'")
    return int(v) if integer else float(v)


def mig_profiles(names, memory_gib: float, sms: int, sms_per_slice: int | None, where: str) -> tuple:
    """:class:`MigProfile` objects from profile names (``3g.40gb``) and the full GPU's memory/SMs."""
    out = []
    for n in names:
        m = _MIG_RE.match(str(n).lower())
        if not m:
            raise DeviceSpecError(f"{where}: MIG profile {n!r} is not of the form <g>g.<m>gb (1g.10gb)",
                                  "name profiles as nvidia-smi does")
        g, gb = int(m.group(1)), int(m.group(2))
        mem_frac = max(1, round(gb / memory_gib * 8)) / 8
        slice_sms = g * sms_per_slice if sms_per_slice else max(1, round(sms * g / 7))
        out.append(MigProfile(name=m.group(0), memory_gib=round(memory_gib * mem_frac, 3), compute_fraction=g / 7,
                              memory_fraction=mem_frac, sms=min(slice_sms, sms)))
    return tuple(out)


def parse_device(d, where: str, origin: str = "") -> DeviceSpec:
    """A :class:`DeviceSpec` from one device object of a spec file.

    Raises:
        DeviceSpecError: naming the field that is missing or wrong.
    """
    if not isinstance(d, dict):
        raise DeviceSpecError(f"{where}: a device must be a JSON object, got {type(d).__name__}",
                              "see the spec-file format in docs/concepts/spec-model.md")
    name = d.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise DeviceSpecError(f"{where}: 'name' must be lower-case letters, digits, '.', '_' or '-', got {name!r}",
                              "name it like 'h100-sxm'")
    where = f"{where} ({name})"
    unknown = sorted(set(d) - _FIELDS)
    if unknown:
        raise DeviceSpecError(f"{where}: unknown field(s) {', '.join(unknown)}",
                              f"use only {', '.join(sorted(_FIELDS))}")
    kind = d.get("kind")
    if kind not in KINDS:
        raise DeviceSpecError(f"{where}: 'kind' must be 'gpu' or 'cpu', got {kind!r}", "set \"kind\": \"gpu\"")
    src = d.get("source")
    if not isinstance(src, str) or not src.strip():
        raise DeviceSpecError(f"{where}: 'source' is missing", "say where the numbers come from (a datasheet, a URL)")
    peaks = d.get("peak_tflops")
    if not isinstance(peaks, dict) or "fp32" not in peaks:
        raise DeviceSpecError(f"{where}: 'peak_tflops' must be an object with at least 'fp32'",
                              "add \"peak_tflops\": {\"fp32\": <TFLOP/s>, \"fp16\": ...}")
    clean = {}
    for k, v in peaks.items():
        if not re.fullmatch(r"(fp32|tf32|fp16|bf16|fp8|int8)(_matrix)?", str(k)):
            raise DeviceSpecError(f"{where}: unknown precision {k!r} in peak_tflops", f"use {', '.join(PRECISIONS)}")
        clean[str(k)] = _number(peaks, k, f"{where} peak_tflops")
    memory = _number(d, "memory_gib", where)
    sms = _number(d, "sms", where, required=True, integer=True)
    mig = d.get("mig")
    profiles, per_slice = (), None
    if mig is not None:
        if kind != "gpu" or memory is None or not isinstance(mig, dict) or not isinstance(mig.get("profiles"), list):
            raise DeviceSpecError(f"{where}: 'mig' needs a GPU with memory_gib and {{\"profiles\": [...]}}",
                                  "fix or remove 'mig'")
        per_slice = _number(mig, "sms_per_slice", where, integer=True)
        profiles = mig_profiles(mig["profiles"], memory, sms, per_slice, where)
    aliases = d.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise DeviceSpecError(f"{where}: 'aliases' must be a list of strings", "fix 'aliases'")
    return DeviceSpec(
        name=name, kind=kind, peak_tflops=clean, source=src.strip(), sms=sms,
        display_name=str(d.get("display_name") or name), vendor=str(d.get("vendor") or ""),
        architecture=str(d.get("architecture") or ""), memory_gib=memory,
        mem_bandwidth_gbs=_number(d, "mem_bandwidth_gbs", where, required=kind == "gpu"),
        cores_per_sm=_number(d, "cores_per_sm", where, integer=True), clock_mhz=_number(d, "clock_mhz", where),
        l2_mib=_number(d, "l2_mib", where), tdp_w=_number(d, "tdp_w", where), mig_profiles=profiles,
        memory_type=str(d.get("memory_type") or ""),
        aliases=tuple(aliases), notes=str(d.get("notes") or ""), origin=origin, mig_sms_per_slice=per_slice)


def parse_file_content(obj, where: str) -> list[DeviceSpec]:
    """Every device of a parsed spec file (a ``{"format": ..., "devices": [...]}`` object or a
    single device object)."""
    if isinstance(obj, dict) and "devices" in obj:
        if obj.get("format", FORMAT) != FORMAT:
            raise DeviceSpecError(f"{where}: format {obj.get('format')!r} is not {FORMAT!r}", "fix 'format'")
        if int(obj.get("format_version", 1)) > FORMAT_VERSION:
            raise DeviceSpecError(f"{where}: spec format version {obj.get('format_version')} is newer than this "
                                  f"perfseer reads ({FORMAT_VERSION})", "upgrade perfseer")
        items = obj["devices"]
        if not isinstance(items, list) or not items:
            raise DeviceSpecError(f"{where}: 'devices' must be a non-empty list", "list at least one device")
    else:
        items = [obj]
    return [parse_device(d, f"{where} device {i + 1}", origin=where) for i, d in enumerate(items)]
