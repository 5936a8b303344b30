"""The GPUs of the device registry as the memory answer uses them: a device's spec, and which
MIG slices of a MIG-capable GPU a job fits in.

Shared by the simulated answer (:mod:`perfseer.memory.api`) and the learned fallback
(:mod:`perfseer.memory.learned`); it imports neither.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from perfseer.devices import get_device
from perfseer.errors import MemoryConfigError
from perfseer.memory.breakdown import analyse, fits_in
from perfseer.memory.overheads import overheads_for

GIB = 1 << 30
#: The GPUs ``--mig`` covers when no device is named (the registry's names).
MIG_DEVICES = ("a100-40gb-sxm", "a100-80gb-sxm", "h100-sxm", "h100-nvl", "h200")
#: A job whose total is within this share of a slice's nominal size is reported as tight: a MIG
#: slice reports somewhat less memory than its profile's name (the driver keeps part of each
#: slice), and the registry's slice sizes are nominal.
TIGHT_SHARE = 0.95


def device_spec(device: str):
    """The registry's spec of ``device`` (``perfseer.devices.get_device``)."""
    return get_device(device)


@dataclass
class MigFit:
    """One MIG profile checked for a job."""

    device: str
    profile: str
    memory_gib: float
    fits: bool
    tight: bool


def mig_table(devices, context_mib: float | None, total_and_fit) -> list[dict]:
    """For each MIG-capable GPU of ``devices`` (default :data:`MIG_DEVICES`), every profile checked
    and the smallest that fits.

    Args:
        total_and_fit: ``(overheads, capacity bytes) -> (total bytes, fits)`` of the job on one slice.

    Returns:
        one dict per GPU: ``device``, ``smallest`` (profile name or ``None``), ``profiles``
        (list of :class:`MigFit` as dicts), ordered by memory then compute.

    Raises:
        MemoryConfigError: a named GPU has no MIG profiles.
    """
    out = []
    for name in devices or MIG_DEVICES:
        spec = device_spec(name)
        if not spec.mig_profiles:
            raise MemoryConfigError(f"{spec.name} has no MIG profiles", f"use one of: {', '.join(MIG_DEVICES)}")
        over = overheads_for(spec.architecture, context_mib)
        rows = []
        for p in sorted(spec.mig_profiles, key=lambda p: (p.memory_gib, p.compute_fraction)):
            cap = int(p.memory_gib * GIB)
            total, ok = total_and_fit(over, cap)
            rows.append(MigFit(spec.name, p.name, p.memory_gib, ok, ok and total > TIGHT_SHARE * cap))
        smallest = next((r.profile for r in rows if r.fits), None)
        out.append({"device": spec.name, "smallest": smallest, "profiles": [asdict(r) for r in rows]})
    return out


def mig_advice(trace, devices=None, context_mib: float | None = None) -> list[dict]:
    """For each MIG-capable GPU, every profile checked and the smallest that fits ``trace`` (a
    simulated step): see :func:`mig_table`."""

    def total_and_fit(over, cap):
        return analyse(trace, over).peak_reserved + over.context, fits_in(trace, over, cap)

    return mig_table(devices, context_mib, total_and_fit)
