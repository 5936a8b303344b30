"""From a trace to the numbers a user reads: peaks, the breakdown at the peak, fit on a device."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from perfseer.memory.allocator import replay, round_size
from perfseer.memory.overheads import Overheads
from perfseer.memory.trace import CATEGORIES, Trace

#: Lines of the breakdown, in print order.  The tensor categories are measured at the moment
#: allocated memory peaks (their sizes as the allocator rounds them); ``workspace`` is cuBLAS's;
#: ``allocator_overhead`` is reserved minus allocated at the peaks (cached free blocks, block
#: remainders too small to split); ``context`` is the CUDA context.  They sum to ``total``.
LINES = (*CATEGORIES, "workspace", "allocator_overhead", "context")


@dataclass
class MemoryEstimate:
    """GPU memory of one step at one batch size.  Bytes throughout.

    Attributes:
        peak_tensor_bytes: peak of live tensor bytes, unrounded (what the CPU ground truth checks).
        peak_allocated: peak of ``torch.cuda.memory_allocated`` (rounded blocks, cuBLAS workspace).
        peak_reserved: peak of ``torch.cuda.memory_reserved`` (segments held by the allocator).
        total: ``peak_reserved + context``: the device memory the process uses at its peak.
        breakdown: :data:`LINES` -> bytes, summing to ``total``.
        capacity: the device's (or MIG slice's) memory, if a device was given.
        fits: whether the step fits in ``capacity`` (the allocator replayed under that limit,
            releasing its cache before giving up, as PyTorch's does); ``None`` without a device.
        method: ``"simulation"`` (the step run on fake tensors), ``"onnx-liveness"`` or
            ``"learned"`` (:mod:`~perfseer.memory.learned`, when the simulator cannot run).
        basis: the method in words for output ("simulated", "ONNX liveness", "learned (card ...,
            90 % interval ...)").
        interval: for a learned estimate, the total's 90 % interval ``[low, high]``.
        category_peaks: each tensor category's own peak over the step (the breakdown holds its
            value at the moment allocated memory peaks); ``None`` where not traced.
    """

    model: str
    batch: int
    phase: str
    optimizer: str | None
    precision: str
    device: str | None
    method: str
    peak_tensor_bytes: int
    peak_allocated: int
    peak_reserved: int
    context: int
    total: int
    breakdown: dict[str, int]
    capacity: int | None = None
    fits: bool | None = None
    notes: list[str] = field(default_factory=list)
    mig: list[dict] | None = None  # perfseer.memory.api.mig_advice, when asked for
    interval: list[int] | None = None
    basis: str = ""
    category_peaks: dict[str, int] | None = None  # each tensor category's own peak (simulated steps)

    def __post_init__(self):
        if not self.basis:
            self.basis = {"simulation": "simulated", "onnx-liveness": "ONNX liveness"}.get(self.method, self.method)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["units"] = "bytes"
        return d


@dataclass
class Replayed:
    peak_tensor_bytes: int
    peak_allocated: int
    peak_reserved: int
    breakdown: dict[str, int]
    category_peaks: dict[str, int] = field(default_factory=dict)


def _with_workspace(trace: Trace, overheads: Overheads, uses_cublas: bool):
    """Sizes, categories and events with cuBLAS's workspace allocated first and never freed."""
    sizes = [0 if a.host else a.nbytes for a in trace.allocations]
    kinds = [a.kind() for a in trace.allocations]
    events = list(trace.events)
    if uses_cublas and overheads.cublas_workspace:
        sizes.append(overheads.cublas_workspace)
        kinds.append("workspace")
        events.insert(0, (1, len(sizes) - 1))
    return sizes, kinds, events


def analyse(trace: Trace, overheads: Overheads, uses_cublas: bool = True) -> Replayed:
    """Replay ``trace`` through the caching allocator (no capacity limit) and break the peak down."""
    sizes, kinds, events = _with_workspace(trace, overheads, uses_cublas)
    res = replay(sizes, events)
    live: dict[int, None] = {}
    for sign, aid in events[: res.peak_allocated_event + 1]:
        if sign > 0:
            live[aid] = None
        else:
            live.pop(aid, None)
    lines = {k: 0 for k in LINES}
    for aid in live:
        if sizes[aid] > 0:
            lines[kinds[aid]] += round_size(sizes[aid])
    lines["allocator_overhead"] = res.peak_reserved - sum(lines.values())
    lines["context"] = overheads.context
    return Replayed(trace.peak()[0], res.peak_allocated, res.peak_reserved, lines, category_peaks(sizes, kinds, events))


def category_peaks(sizes, kinds, events) -> dict[str, int]:
    """Each tensor category's own peak over the step (its live bytes, rounded as the allocator
    rounds them): beside the breakdown, which holds each category at the moment *allocated memory*
    peaks (e.g. gradients freed or not yet made by then)."""
    live = {k: 0 for k in CATEGORIES}
    top = dict(live)
    for sign, aid in events:
        k = kinds[aid]
        if k in live and sizes[aid] > 0:
            live[k] += round_size(sizes[aid]) if sign > 0 else -round_size(sizes[aid])
            top[k] = max(top[k], live[k])
    return top


def fits_in(trace: Trace, overheads: Overheads, capacity: int, uses_cublas: bool = True) -> bool:
    """Whether the step runs in ``capacity`` bytes of device memory: the allocator, limited to
    ``capacity - context``, serves every request (freeing its cache when it must)."""
    limit = capacity - overheads.context
    if limit <= 0:
        return False
    sizes, _, events = _with_workspace(trace, overheads, uses_cublas)
    return not replay(sizes, events, limit=limit).oom
