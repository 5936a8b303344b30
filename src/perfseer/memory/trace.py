"""Recording every storage allocation and free of a PyTorch step, in execution order.

A :class:`StorageTracer` is a ``TorchDispatchMode``: it sees every ATen operator that runs below
autograd (forward operators, the backward formulas the autograd engine calls, gradient
accumulation, optimizer kernels, ``foreach`` temporaries).  Each tensor an operator returns is
checked: a storage not seen before is a new *allocation*; a ``weakref.finalize`` on the storage's
Python object records its *free* at the moment its last reference (Python or C++, e.g. a tensor
saved for backward) goes away.  PyTorch preserves a storage's Python object for as long as the
C++ ``StorageImpl`` lives, so the finalizer fires exactly when the caching allocator would get
the block back.  Views and in-place operators return an existing storage and allocate nothing,
as on a GPU.

The same tracer runs over fake tensors (the simulation: no memory, any batch size) and over real
CPU tensors (the ground truth of ``benchmarks/memory_cpu_truth.py`` at tag research-2026-11).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

#: Phases of a step, in the order they run.
PHASES = ("setup", "forward", "backward", "optimizer")
#: Categories of the breakdown.  ``activation`` is whatever the forward pass allocated and is
#: still alive; ``transient`` is everything else (backward intermediates, optimizer temporaries).
CATEGORIES = ("weights", "input", "weight_casts", "gradients", "optimizer_state", "activations",
              "transient")


@dataclass
class Allocation:
    """One storage: its size and where it came from."""

    id: int
    nbytes: int
    phase: str       # one of PHASES: when it was allocated
    op: str          # the ATen operator that returned it ("<existing>" for registered tensors)
    category: str | None = None  # set by tag(); None falls back on the phase
    host: bool = False           # lives in host memory on a GPU (Adam's step counters)

    def kind(self) -> str:
        if self.category:
            return self.category
        return "activations" if self.phase == "forward" else "transient"


@dataclass
class Trace:
    """Allocations and the ordered events ``(+1, id)`` (allocate) / ``(-1, id)`` (free)."""

    allocations: list[Allocation] = field(default_factory=list)
    events: list[tuple[int, int]] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)  # "step1.backward" -> event index
    backend: str | None = None  # what ran the step: "meta", "fake" or "real" (trace_step sets it)

    def device_events(self) -> list[tuple[int, int]]:
        """The events of device memory (host-resident allocations dropped)."""
        host = {a.id for a in self.allocations if a.host}
        return [e for e in self.events if e[1] not in host]

    def peak(self) -> tuple[int, int]:
        """``(peak_bytes, event_index)`` of the live tensor bytes, unrounded."""
        sizes = [a.nbytes for a in self.allocations]
        host = {a.id for a in self.allocations if a.host}
        cur = best = 0
        at = -1
        for i, (sign, aid) in enumerate(self.events):
            if aid in host:
                continue
            cur += sign * sizes[aid]
            if cur > best:
                best, at = cur, i
        return best, at

    def live_at(self, index: int) -> list[Allocation]:
        """The allocations alive just after event ``index``."""
        live: dict[int, Allocation] = {}
        for sign, aid in self.events[: index + 1]:
            if sign > 0:
                live[aid] = self.allocations[aid]
            else:
                live.pop(aid, None)
        return [a for a in live.values() if not a.host]


class StorageTracer(TorchDispatchMode):
    """Record storage allocations and frees of everything that runs inside ``with tracer:``.

    Example:
        >>> tracer = StorageTracer()
        >>> with tracer:
        ...     y = torch.ones(4) * 2
        >>> tracer.trace.peak()[0]
        32
    """

    def __init__(self, kernels: dict | None = None):
        """``kernels``: operator -> function run instead of the operator's own kernel (the meta
        backend's output-only batch norm, :data:`perfseer.memory.emulate.META_KERNELS`)."""
        super().__init__()
        self.trace = Trace()
        self.phase = "setup"
        self._live: dict[int, int] = {}  # StorageImpl address -> allocation id
        self._closed = False
        self._kernels = kernels or {}

    # -- recording -------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = self._kernels.get(func, func)(*args, **(kwargs or {}))
        name = func.__name__ if hasattr(func, "__name__") else str(func)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._see(t, name)
        return out

    def _see(self, t: torch.Tensor, op: str) -> int | None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # sparse, nested: no single storage
            return None
        key = st._cdata
        nbytes = int(st.nbytes())
        aid = self._live.get(key)
        if aid is not None:
            known = self.trace.allocations[aid]
            if nbytes <= known.nbytes:
                return aid
            # resize_ grew an existing storage: the allocator frees the old block, takes a new one
            self.trace.events.append((-1, aid))
        aid = len(self.trace.allocations)
        self.trace.allocations.append(Allocation(aid, nbytes, self.phase, op))
        self.trace.events.append((1, aid))
        self._live[key] = aid
        fin = weakref.finalize(st, self._free, key, aid)
        fin.atexit = False
        return aid

    def _free(self, key: int, aid: int) -> None:
        if self._closed:
            return
        if self._live.get(key) == aid:
            del self._live[key]
            self.trace.events.append((-1, aid))

    # -- driving ---------------------------------------------------------------------------
    def register(self, tensors, category: str) -> None:
        """Record tensors that exist already (a real model's weights) as allocated now."""
        for t in tensors:
            aid = self._see(t, "<existing>")
            if aid is not None:
                self.trace.allocations[aid].category = category

    def tag(self, tensors, category: str, host: bool = False) -> None:
        """Set the category of the live storages of ``tensors`` (e.g. the ``.grad`` of each parameter)."""
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            try:
                key = t.untyped_storage()._cdata
            except (RuntimeError, NotImplementedError):
                continue
            aid = self._live.get(key)
            if aid is not None:
                a = self.trace.allocations[aid]
                a.category = category
                a.host = a.host or host

    def mark(self, label: str) -> None:
        self.trace.marks[label] = len(self.trace.events)

    def close(self) -> Trace:
        """Stop listening for frees (objects that outlive the step are still allocated at the end)."""
        self._closed = True
        return self.trace
