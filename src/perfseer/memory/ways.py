"""What would make a step that does not fit one device fit there: a smaller batch, 8-bit optimizer
states, activation checkpointing, a larger device or MIG slice (several GPUs are
:mod:`perfseer.parallel`'s question, not this one's).

Each way says how much memory the step would need with it and whether that fits, and how the
figure was obtained:

* **smaller batch**: the largest batch that fits, found by simulation (:func:`~perfseer.memory.api.max_batch_for`);
* **8-bit optimizer states** (e.g. bitsandbytes' ``AdamW8bit``): each fp32 state element takes one
  byte instead of four, so the optimizer state shrinks to a quarter.  The state is allocated once
  and held through the whole step, so the peak drops by three quarters of the state held at it;
* **activation checkpointing**: recomputing activations in the backward pass keeps fewer of them,
  at most all the activations held at the peak: the step needs at least the total minus those
  (and minus the allocator's rounding, which fewer blocks may also save).
  That is a bound, not a simulation (how much is saved depends on where the checkpoints are), so
  this way only says whether it *can* fit;
* **a larger device**: the three smallest GPUs of the registry whose memory holds the total (the
  CUDA context and cuBLAS workspace differ a little between devices: "about"), and for a MIG slice
  the smallest slice of its GPU that holds it (with ``--mig``: the simulated smallest slice).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from perfseer.errors import PerfseerError

GIB = 1 << 30
STATE_KEPT_8BIT = 0.25  # bytes of an 8-bit state element per byte of an fp32 one


@dataclass
class Way:
    """One way to make the step fit: ``how`` in words, the memory it would need (``None``: not
    computed), whether that fits (``None``: cannot tell), and ``basis`` (simulated, arithmetic, bound)."""

    way: str
    how: str
    needs: int | None
    fits: bool | None
    basis: str

    def to_dict(self) -> dict:
        return asdict(self)


def ways_to_fit(est, max_batch: int | None = None) -> list[Way]:
    """The ways that would make ``est`` (a :class:`~perfseer.memory.breakdown.MemoryEstimate` that
    does not fit its device) fit there.  ``max_batch``: the largest batch that fits, when searched."""
    if est.fits is not False or est.capacity is None:
        return []
    out = []
    cap = est.capacity
    if max_batch is not None:
        out.append(Way("smaller batch", f"batch {max_batch} (the largest that fits)" if max_batch >= 1
                       else "even batch 1 does not fit", None, max_batch >= 1, "simulated"))
    state = est.breakdown.get("optimizer_state", 0)
    if est.phase == "train" and state:
        needs = int(est.total - (1 - STATE_KEPT_8BIT) * state)
        out.append(Way("8-bit optimizer states", f"optimizer state {state / GIB:.1f} -> "
                       f"{STATE_KEPT_8BIT * state / GIB:.1f} GiB (e.g. bitsandbytes AdamW8bit)", needs,
                       needs <= cap, "arithmetic on the simulated breakdown"))
    acts = est.breakdown.get("activations", 0)
    if est.phase == "train" and acts:  # fewer activations may also leave the allocator less to round up
        floor = int(est.total - acts - est.breakdown.get("allocator_overhead", 0))
        out.append(Way("activation checkpointing", f"saves at most the {acts / GIB:.1f} GiB of activations held at the "
                       "peak", floor, None if floor <= cap else False,
                       "a bound, not simulated" if floor <= cap
                       else "a bound: even without any activation it does not fit"))
    out += _devices(est)
    return out


def _devices(est) -> list[Way]:
    from perfseer.devices import list_devices  # deferred: the registry reads its files on first use

    need = est.total
    here = _device_name(est.device)
    bigger = []
    for d in list_devices("gpu"):
        mem = int(round((d.memory_gib or 0) * GIB))
        if d.name != here and mem >= need:
            bigger.append((mem, d))
    out = []
    for mem, d in sorted(bigger, key=lambda x: (x[0], x[1].name))[:3]:
        out.append(Way("larger device", f"{d.name} ({mem / GIB:g} GiB)", need, True,
                       "about"))
    if est.mig:
        for m in est.mig:
            if m.get("smallest"):
                out.append(Way("MIG slice", f"{m['device']}: {m['smallest']}", need, True, "simulated on the slice"))
    elif here is not None:  # a MIG slice asked for: the larger slices of its GPU
        from perfseer.devices import get_device  # deferred: the registry reads its files on first use

        parent = get_device(here).parent
        if parent is not None:
            for p in sorted(get_device(parent).mig_profiles, key=lambda p: p.memory_gib):
                if p.memory_gib * GIB >= need and f"{parent}:{p.name}" != here:
                    out.append(Way("MIG slice", f"{parent}:{p.name} ({p.memory_gib:g} GiB)", need, True,
                                   "about"))
                    break
    return out


def _device_name(device: str | None) -> str | None:
    if not device:
        return None
    try:
        from perfseer.devices import get_device  # deferred: the registry reads its files on first use

        return get_device(device).name
    except PerfseerError:  # an unknown name (a --capacity-gib run): nothing excluded
        return device
