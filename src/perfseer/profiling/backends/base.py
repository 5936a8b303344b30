"""The measurement-backend interface and what the backends share.

A backend measures one ``(model, input shape, batch, phase, precision)`` and returns a
:class:`~perfseer.profiling.jobs.Measurement`; it never raises for a model that fails (the failure
is the measurement's status).  Backends are created by registered name
(:func:`perfseer.profiling.backends.create_backend`) inside a worker process
(:mod:`perfseer.profiling.worker`) and configured by JSON-able options only, so the same backend
can be rebuilt in a spawned process or on a Ray node.

Isolation (``Backend.isolation``): ``"fork"`` backends (the CPU ones) run every measurement in a
child forked from the worker, which imported the libraries and :meth:`Backend.prime`-d them once:
so no measurement pays for an import, a measurement's memory is counted from a clean heap (no
allocator cache left by the previous model), and a crash or hang kills only the child.
``"inline"`` backends (CUDA: a CUDA context cannot be forked) measure in the worker itself, which
is replaced after a crash or timeout.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import math
import os
import time
import traceback
from typing import ClassVar

from perfseer.errors import PerfseerError
from perfseer.profiling.environment import capture
from perfseer.profiling.jobs import OPTIMIZERS, PHASES, PRECISIONS, CollectError, Measurement
from perfseer.profiling.protocol import Protocol, run_protocol

MIB = float(2**20)


class Backend:
    """Base class of measurement backends.

    Subclasses set ``name``, ``short`` (the setting prefix in the device column), ``phases``,
    ``precisions`` and ``isolation``, and implement :meth:`measure`, :meth:`hardware` and
    optionally :meth:`prime`, :meth:`prepare`, :meth:`environment`.

    Args:
        threads: intra-op threads (CPU backends); ``None``: the library's default.
        protocol: the timing protocol (a :class:`Protocol` or its dict).
    """

    name: ClassVar[str] = ""
    short: ClassVar[str] = ""
    kind: ClassVar[str] = "cpu"  # the device kind it measures (gpu / cpu), read back from a device column
    phases: ClassVar[tuple[str, ...]] = PHASES
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    isolation: ClassVar[str] = "fork"

    def __init__(self, threads: int | None = None, protocol: Protocol | dict | None = None):
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise CollectError(f"threads is {threads!r}", "give a whole number >= 1")
        self.threads = threads
        self.protocol = protocol if isinstance(protocol, Protocol) else Protocol.from_dict(protocol)

    # -- what subclasses provide ---------------------------------------------------------------------
    def prime(self) -> None:
        """Run once in the worker before any measurement: import and warm up what every
        measurement would otherwise initialise (fork-safe: no thread pools left running)."""

    def prepare(self, model, input_shape) -> None:
        """Optional work before measuring a model (ONNX export), run in its own child process so
        that its memory never counts in the measurement's."""

    def hardware(self) -> str:
        """The hardware part of the device column, e.g. ``xeon_platinum_8370c``."""
        raise NotImplementedError

    def setting(self) -> str:
        """The setting part of the device column, e.g. ``torch-t1``."""
        return f"{self.short}-t{self.threads}" if self.threads else self.short

    def environment(self) -> dict:
        return capture(self.threads, {"backend": self.name})

    def measure(self, model, input_shape, batch: int, phase: str, precision: str = "fp32",
                optimizer: str = "sgd") -> Measurement:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the backend holds (temporary files)."""

    # -- shared helpers ----------------------------------------------------------------------------------
    def check(self, phase: str, precision: str, optimizer: str) -> Measurement | None:
        """An ``unsupported`` measurement when this backend cannot run the request, else None."""
        if phase not in PHASES:
            raise CollectError(f"unknown phase {phase!r}", f"use one of: {', '.join(PHASES)}")
        if precision not in PRECISIONS:
            raise CollectError(f"unknown precision {precision!r}", f"use one of: {', '.join(PRECISIONS)}")
        if optimizer not in OPTIMIZERS:
            raise CollectError(f"unknown optimizer {optimizer!r}", f"use one of: {', '.join(OPTIMIZERS)}")
        if phase not in self.phases:
            return Measurement.failed("unsupported", f"{self.name} does not support the {phase} phase "
                                                     f"(it runs: {', '.join(self.phases)})")
        if precision not in self.precisions:
            return Measurement.failed("unsupported", f"{self.name} does not support precision {precision} "
                                                     f"(it runs: {', '.join(self.precisions)})")
        return None


def describe_error(e: BaseException) -> str:
    """One line: ``Type: first line of the message`` (at most 300 characters), plus where it was
    raised, so a stored failure can be traced without a log."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    if isinstance(e, PerfseerError):
        return text[:300]
    tb = traceback.extract_tb(e.__traceback__)
    if tb:
        last = tb[-1]
        text = f"{text[:260]} (at {os.path.basename(last.filename)}:{last.lineno})"
    return text[:300]


def is_oom(e: BaseException) -> bool:
    """Whether an exception means "out of memory": ``MemoryError``, ``torch.OutOfMemoryError``
    (CUDA), or the CPU allocator's ``RuntimeError`` (``DefaultCPUAllocator: can't allocate memory``),
    or ONNX Runtime's allocation failure."""
    if isinstance(e, MemoryError):
        return True
    name = type(e).__name__
    if name in ("OutOfMemoryError", "OutOfMemory"):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and any(s in text for s in (
        "can't allocate memory", "cannot allocate memory", "out of memory", "failed to allocate memory",
        "bad_alloc"))


# -- CPU process counters ------------------------------------------------------------------------------

def _status_kb() -> dict[str, int]:
    out = {}
    with open("/proc/self/status", encoding="ascii", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0])
    return out


class RssProbe:
    """Peak resident memory of this process since :meth:`start`, without file-backed pages.

    ``start()`` resets the kernel's high-water mark (``echo 5 > /proc/self/clear_refs``, Linux
    >= 4.0) and reads the baseline; ``peak_mb()`` is ``(VmHWM - VmRSS_0) - (RssFile - RssFile_0)``:
    the growth of the peak RSS, less the shared-library pages the run faulted in (after a fork
    the child maps library code lazily, and those pages are the libraries', not the model's; file
    pages are not released while memory is plentiful, so their growth at the end is their growth
    at the peak).  ``None`` where ``/proc`` is not available.
    """

    def __init__(self):
        self.available = os.path.exists("/proc/self/status")
        self.reset_ok = False
        self.base: dict[str, int] = {}

    def start(self) -> None:
        if not self.available:
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset_ok = True
        except OSError:
            self.reset_ok = False  # VmHWM then counts from the process start (still right after a fork)
        self.base = _status_kb()

    def peak_mb(self) -> float | None:
        if not self.available or not self.base:
            return None
        now = _status_kb()
        grown = now["VmHWM"] - self.base["VmRSS"]
        files = now.get("RssFile", 0) - self.base.get("RssFile", 0)
        return max(0.0, (grown - max(files, 0)) / 1024.0)

    def details(self) -> dict:
        if not self.available or not self.base:
            return {}
        now = _status_kb()
        return {"rss_base_mb": self.base["VmRSS"] / 1024.0, "rss_hwm_mb": now["VmHWM"] / 1024.0,
                "rss_file_growth_mb": (now.get("RssFile", 0) - self.base.get("RssFile", 0)) / 1024.0,
                "hwm_reset": self.reset_ok}


class CpuClock:
    """Process CPU time (user + system, all threads) over wall time: ``util_pct`` is
    ``cpu / wall / threads * 100``, the share of the cores the backend was allowed to use."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self.t0 = self.c0 = None

    def start(self) -> None:
        t = os.times()
        self.c0, self.t0 = t.user + t.system, time.perf_counter()

    def util_pct(self) -> float | None:
        if self.t0 is None:
            return None
        t = os.times()
        wall = time.perf_counter() - self.t0
        if wall <= 0:
            return None
        return min(100.0, max(0.0, 100.0 * (t.user + t.system - self.c0) / wall / self.threads))


class Rapl:
    """CPU package energy from Linux powercap (``/sys/class/powercap/intel-rapl:N/energy_uj``, also
    on AMD).  Whole-package energy, so other processes' work counts too; usually readable only by
    root, and absent in most VMs (then :meth:`read_j` is None and energy is not reported)."""

    def __init__(self, root: str = "/sys/class/powercap"):
        self.zones = []
        try:
            for name in sorted(os.listdir(root)):
                if name.count(":") == 1 and name.startswith("intel-rapl"):  # packages, not sub-zones
                    path = os.path.join(root, name)
                    with open(os.path.join(path, "energy_uj")) as f:
                        f.read()
                    with open(os.path.join(path, "max_energy_range_uj")) as f:
                        top = int(f.read())
                    self.zones.append((os.path.join(path, "energy_uj"), top))
        except OSError:
            self.zones = []

    def read_uj(self) -> list[int] | None:
        if not self.zones:
            return None
        try:
            out = []
            for path, _ in self.zones:
                with open(path) as f:
                    out.append(int(f.read()))
            return out
        except OSError:
            return None

    def joules_between(self, a: list[int] | None, b: list[int] | None) -> float | None:
        if a is None or b is None:
            return None
        total = 0
        for (_, top), x, y in zip(self.zones, a, b):
            total += y - x if y >= x else y + top - x  # the counter wrapped
        return total / 1e6


def run_timed_cpu(step, protocol: Protocol, threads: int):
    """Run ``protocol`` on ``step`` (one timed call, returning milliseconds) with the CPU metrics
    taken around its timed repetitions: returns ``(timing, util_pct, joules)``, ``joules`` over all
    timed repetitions (None without RAPL).  Python's garbage collector is collected first and off
    while it runs: a collection inside a timed step is noise, not the model's cost."""

    clock, rapl, energy = CpuClock(threads), Rapl(), {}

    def timed_start() -> None:
        clock.start()
        energy["start"] = rapl.read_uj()

    gc.collect()
    gc.disable()
    try:
        timing = run_protocol(step, protocol, on_timed_start=timed_start)
    finally:
        gc.enable()
    return timing, clock.util_pct(), rapl.joules_between(energy.get("start"), rapl.read_uj())


_LIBC = None


def malloc_trim() -> None:
    """Give freed heap pages back to the OS (glibc), so the next fork starts from a small heap."""
    global _LIBC
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _LIBC.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def collect_garbage() -> None:
    gc.collect()
    malloc_trim()


def finite_or_none(x):
    return x if x is not None and math.isfinite(x) else None
