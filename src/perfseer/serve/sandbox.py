"""Run untrusted work (parsing an uploaded ONNX file, exporting a model) in a child process with
a time limit and a memory limit, so that one bad input cannot take the caller down.

Children are forked from a *fork server* (:mod:`multiprocessing`'s ``forkserver`` context) that
imported perfseer, onnx and torch once at start-up: a job starts in tens of milliseconds rather
than the seconds a fresh interpreter needs, and the server process itself never runs a job, so a
job that crashes, aborts inside a C library or exceeds its limits kills only its own child.

The child sets ``RLIMIT_AS`` (address space) before doing anything, so an allocation past the
limit fails there as a ``MemoryError`` (reported as such) or kills the child (reported as a
crash).  A child still running at the time limit is killed.  The result comes back through a pipe
between two processes of our own (multiprocessing pickles it; the untrusted input itself is only
ever parsed by perfseer's ONNX reader inside the child).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import threading
import time
from dataclasses import dataclass

from perfseer.errors import PerfseerError

# Modules the fork server imports once, so that every child starts with them loaded.
PRELOAD = ["torch", "onnx", "perfseer.features.extract", "perfseer.sources.zoo", "perfseer.features.perfgraph"]


class SandboxError(PerfseerError):
    """A job that ran out of time or memory, or whose process died."""

    def __init__(self, message: str, fix: str = "", kind: str = "crash"):
        super().__init__(message, fix)
        self.kind = kind  # "timeout", "memory" or "crash"


@dataclass(frozen=True)
class Limits:
    """What one job may use."""

    time_s: float = 60.0  # wall-clock seconds before the child is killed
    # address-space limit of the child: torch alone maps ~1.5 GB of it; ViT-L/16 and BERT-large extract within 3 GB
    memory_mb: int = 3072
    threads: int = 1  # torch / OpenMP threads inside the child


def _child(conn, fn, args, kwargs, limits: Limits) -> None:
    try:
        limit = int(limits.memory_mb) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.environ["OMP_NUM_THREADS"] = str(limits.threads)
        try:
            import torch  # deferred: heavy, loaded on first use

            torch.set_num_threads(limits.threads)
        except Exception:  # torch missing or already initialised: the limit above still holds
            pass
        try:
            conn.send(("ok", fn(*args, **kwargs)))
        except MemoryError:
            conn.send(("memory", None))
        except PerfseerError as e:
            conn.send(("error", (type(e).__name__, e.problem, e.fix)))
        except Exception as e:  # an unexpected failure inside a library: reported, never re-raised here
            conn.send(("error", (type(e).__name__, f"{type(e).__name__}: {e}", "")))
    finally:
        conn.close()


class Sandbox:
    """Runs functions in limited child processes, at most ``max_jobs`` at a time.

    Args:
        limits: per-job :class:`Limits`.
        max_jobs: children running at once; a caller past that waits (see :meth:`run`'s ``wait_s``).
        preload: modules the fork server imports once.

    Example:
        >>> box = Sandbox(Limits(time_s=30))
        >>> pg = box.run(perfseer.extract, "example:resnet18", batch=4)  # doctest: +SKIP
    """

    def __init__(self, limits: Limits = Limits(), max_jobs: int = 2, preload: list[str] | None = None):
        self.limits = limits
        self.max_jobs = max_jobs
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(list(PRELOAD if preload is None else preload))
        self._slots = threading.BoundedSemaphore(max_jobs)
        self.stats = {"jobs": 0, "timeouts": 0, "memory": 0, "crashes": 0}

    def run(self, fn, *args, wait_s: float | None = None, **kwargs):
        """``fn(*args, **kwargs)`` in a child; its result, or the child's ``PerfseerError`` re-raised.

        ``fn`` must be importable by name (a module-level function).  Raises :class:`SandboxError`
        on a timeout, memory exhaustion or a crash, and :class:`Busy` when no slot frees within
        ``wait_s`` seconds (None: wait as long as it takes).
        """
        if not self._slots.acquire(timeout=wait_s if wait_s is not None else -1):
            raise Busy(f"all {self.max_jobs} worker slots are busy", "retry in a few seconds")
        try:
            return self._run(fn, args, kwargs)
        finally:
            self._slots.release()

    def _run(self, fn, args, kwargs):
        self.stats["jobs"] += 1
        recv, send = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_child, args=(send, fn, args, kwargs, self.limits), daemon=True)
        proc.start()
        send.close()
        deadline = time.monotonic() + self.limits.time_s
        msg = None
        try:
            if recv.poll(max(0.0, deadline - time.monotonic())):
                try:
                    msg = recv.recv()
                except (EOFError, OSError):
                    msg = None
            elif proc.is_alive():
                proc.kill()
                proc.join(5)
                self.stats["timeouts"] += 1
                raise SandboxError(f"the job took longer than {self.limits.time_s:g} s and was stopped",
                                   "try a smaller model or input, or raise the time limit", kind="timeout")
        finally:
            recv.close()
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        if msg is None:
            self.stats["crashes"] += 1
            code = proc.exitcode
            raise SandboxError(f"the job's process died (exit code {code}) before answering; the input most "
                               f"likely exhausted its {self.limits.memory_mb} MB memory limit or crashed a parser",
                               "check the model file; if it is valid, report it with the file", kind="crash")
        status, payload = msg
        if status == "ok":
            return payload
        if status == "memory":
            self.stats["memory"] += 1
            raise SandboxError(f"the job needed more than its {self.limits.memory_mb} MB memory limit",
                               "try a smaller model or input, or raise the memory limit", kind="memory")
        name, problem, fix = payload
        err = PerfseerError(problem, fix)
        err.kind = name
        raise err


class Busy(PerfseerError):
    """Every worker slot is in use (the service answers 503 with Retry-After)."""
