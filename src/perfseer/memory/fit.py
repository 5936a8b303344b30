"""Which batch fits, and which MIG slice: searches over the simulator.

:func:`max_batch` finds the largest batch size whose step fits a device.  A trace's storage
sizes are, almost always, affine in the batch size while its sequence of allocations and frees
does not change with it.  So the step is traced at three batch sizes (2, 3, 5); when the three
traces have the same events and every storage's size at 5 is the affine extrapolation of its
sizes at 2 and 3, the trace at any batch size is known without running the model again, and the
search (doubling, then bisection) only replays the allocator.  The answer is then confirmed by
tracing the step at the answer and one above it; a model whose trace is not affine (a code path
that depends on the batch size) is searched with a trace per probe instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfseer.memory.breakdown import fits_in
from perfseer.memory.overheads import Overheads
from perfseer.memory.trace import Trace

_PROBES = (2, 3, 5)
_CEILING = 1 << 22  # no search goes past ~4M samples per step


@dataclass
class AffineTrace:
    """A trace whose storage sizes are ``base + slope * batch``."""

    template: Trace
    base: list[int]
    slope: list[int]

    def at(self, batch: int) -> Trace:
        allocs = [replace(a, nbytes=b + s * batch) for a, b, s in zip(self.template.allocations, self.base, self.slope)]
        return Trace(allocs, self.template.events, dict(self.template.marks))


def _signature(t: Trace):
    return [(a.op, a.kind(), a.host) for a in t.allocations], t.events


def affine_trace(traces: dict[int, Trace]) -> AffineTrace | None:
    """The affine model of three traces keyed by batch size, or ``None`` if they are not affine."""
    (b1, t1), (b2, t2), (b3, t3) = sorted(traces.items())
    if not (_signature(t1) == _signature(t2) == _signature(t3)):
        return None
    base, slope = [], []
    for a1, a2, a3 in zip(t1.allocations, t2.allocations, t3.allocations):
        d, r = divmod(a2.nbytes - a1.nbytes, b2 - b1)
        if r or a1.nbytes + d * (b3 - b1) != a3.nbytes:
            return None
        slope.append(d)
        base.append(a1.nbytes - d * b1)
    return AffineTrace(t1, base, slope)


@dataclass
class MaxBatch:
    """Result of :func:`max_batch`: ``batch`` 0 means not even one sample fits."""

    batch: int
    traces_run: int
    affine: bool
    capped: bool = False  # the search stopped at its ceiling (memory does not grow with batch)


def max_batch(trace_at, overheads: Overheads, capacity: int, uses_cublas: bool = True) -> MaxBatch:
    """Largest batch whose step fits ``capacity`` bytes.

    Args:
        trace_at: ``batch -> Trace`` (runs the simulator).
    """
    runs = 0

    def real(b):
        nonlocal runs
        runs += 1
        return trace_at(b)

    def ok(t):
        return fits_in(t, overheads, capacity, uses_cublas)

    probes = {b: real(b) for b in _PROBES}
    if not ok(probes[_PROBES[0]]):
        return MaxBatch(1 if ok(real(1)) else 0, runs, False)
    model = affine_trace(probes)
    fits = (lambda b: ok(model.at(b))) if model else (lambda b: ok(real(b)))
    lo = _PROBES[0]
    hi = lo * 2
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > _CEILING:
            return MaxBatch(lo, runs, model is not None, capped=True)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if model is not None:
        # confirm on real traces; walk down or up if the affine model was wrong near the limit
        if not ok(real(lo)):
            while lo > 1 and not ok(real(lo - 1)):
                lo -= 1
            return MaxBatch(lo - 1, runs, True)
        if ok(real(lo + 1)):
            while ok(real(lo + 2)):
                lo += 1
            return MaxBatch(lo + 1, runs, True)
    return MaxBatch(lo, runs, model is not None)
