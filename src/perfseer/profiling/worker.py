"""Measurements in a separate process, so that a model that crashes or hangs costs one result.

A :class:`Worker` is a persistent process (``multiprocessing`` *spawn*: nothing of the driver is
inherited) that creates the backend, imports and primes it once, then serves measurement
requests over a pipe, as JSON.

- **fork backends** (CPU): each request runs in a child ``os.fork()``-ed from the worker, which
  sends its :class:`~perfseer.profiling.jobs.Measurement` back as JSON and exits.  The worker
  enforces the timeout (it kills the child) and reads a child that died without answering as a
  crash (its signal or exit code).  The child starts from the worker's primed state -- no import,
  no lazy initialisation, no allocator cache of the previous model -- which is what makes its peak
  RSS a per-measurement figure.  Backends with a ``prepare`` step (ONNX export) run it in a child
  of its own first, so its memory never counts.
- **inline backends** (CUDA): requests run in the worker itself; the driver enforces the timeout
  and kills the worker, and reads a worker that died as a crash.

Either way the driver replaces a dead or killed worker on the next request, and retires the worker
after ``recycle_every`` measurements (slow leaks, fragmentation).  Each process also dies with its
parent (``PR_SET_PDEATHSIG`` on Linux, and the pipe's end-of-file), so a ``kill -9`` of the driver
leaves no measuring process behind.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import multiprocessing as mp
import os
import select
import signal
import sys
import time

from perfseer.errors import PerfseerError
from perfseer.profiling.backends import create_backend
from perfseer.profiling.backends.base import Backend, describe_error, is_oom
from perfseer.profiling.jobs import CollectError, Job, Measurement, device_name

# The driver waits this much longer than the job's timeout for a fork-backend worker, which
# enforces the timeout itself: past it, the worker is stuck, not the model.
_GRACE_S = 60.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def describe_exit(status: int) -> str:
    """A ``waitpid`` status (or a negative ``Process.exitcode``) in words."""
    if status < 0:
        sig = -status
    elif os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
    else:
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return f"the measuring process exited with code {code} without a result"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    hint = " (the kernel's out-of-memory killer, if nothing else sent it)" if sig == signal.SIGKILL else ""
    return f"the measuring process was killed by {name}{hint}"


def _send(conn, msg: dict) -> None:
    conn.send_bytes(json.dumps(msg, default=str).encode())


def _recv(conn) -> dict:
    return json.loads(conn.recv_bytes())


# -- the worker process ----------------------------------------------------------------------------------

def _serve(conn, backend_name: str, options: dict, log_path: str | None) -> None:
    """The worker's main function (runs in the spawned process)."""
    _die_with_parent()
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    out = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)  # library chatter must not garble the driver's progress bar
    os.close(out)
    backend = None
    try:
        backend = create_backend(backend_name, **options)
        backend.prime()
        info = {"ready": True, "env": backend.environment(), "hardware": backend.hardware(),
                "setting": backend.setting(), "isolation": backend.isolation, "pid": os.getpid()}
    except PerfseerError as e:
        info = {"ready": False, "problem": e.problem, "fix": e.fix}
    except BaseException as e:  # noqa: BLE001 - reported to the driver, which raises it

        info = {"ready": False, "problem": f"backend {backend_name} failed to start: {describe_error(e)}"}
    _send(conn, info)
    if not info["ready"]:
        return
    try:
        while True:
            try:
                msg = _recv(conn)
            except (EOFError, OSError):
                break
            if msg.get("op") != "measure":
                break
            job = Job.from_dict(msg["job"])
            if backend.isolation == "fork":
                result = measure_forked(backend, job, float(msg["timeout"]), conn, parent)
            else:
                result = measure_inline(backend, job)
            _send(conn, {"result": result.to_dict()})
    finally:
        backend.close()


def measure_inline(backend, job: Job) -> Measurement:
    started = time.perf_counter()
    try:
        return backend.measure(job.model, job.shape, job.batch_size, job.phase, job.precision,
                               optimizer=job.optimizer)
    except BaseException as e:  # noqa: BLE001 - a backend bug is this measurement's error, not the worker's end
        return Measurement.failed("oom" if is_oom(e) else "error", describe_error(e),
                                  seconds=time.perf_counter() - started)


def measure_forked(backend, job: Job, timeout: float, conn=None, parent: int | None = None) -> Measurement:
    """Run ``backend.prepare`` (if it has one) and ``backend.measure`` for ``job``, each in a
    forked child, within ``timeout`` seconds in all."""

    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    if type(backend).prepare is not Backend.prepare:
        def prepare():
            backend.prepare(job.model, job.shape)
            return Measurement(status="ok")

        result = _in_child(prepare, deadline, timeout, conn, parent)
        if result.status != "ok":
            result.seconds = time.perf_counter() - started
            if result.error and result.status != "timeout":
                result.error = f"preparing the model: {result.error}"
            return result
    result = _in_child(lambda: backend.measure(job.model, job.shape, job.batch_size, job.phase, job.precision,
                                               optimizer=job.optimizer), deadline, timeout, conn, parent)
    if result.status in ("timeout", "crash"):
        result.seconds = time.perf_counter() - started
    return result


def _in_child(fn, deadline: float, timeout: float, conn, parent: int | None) -> Measurement:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, answer, exit without running any of the parent's cleanup
        code = 0
        try:
            os.close(r)
            _die_with_parent()
            try:
                result = fn()
            except BaseException as e:  # noqa: BLE001

                result = Measurement.failed("oom" if is_oom(e) else "error", describe_error(e))
            view = memoryview(result.to_json().encode())
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    chunks: list[bytes] = []
    watch = [r] + ([conn] if conn is not None else [])
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _kill(pid)
                return Measurement.failed("timeout", f"no result within {timeout:g} s; the measuring process "
                                                     "was killed")
            ready, _, _ = select.select(watch, [], [], min(remaining, 1.0))
            if (conn is not None and conn in ready) or (parent is not None and os.getppid() != parent):
                # the driver never writes during a job: readable means it closed the pipe (it died)
                _kill(pid)
                os._exit(0)
            if r in ready:
                chunk = os.read(r, 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if data:
        try:
            return Measurement.from_dict(json.loads(data))
        except (ValueError, TypeError):
            pass
    return Measurement.failed("crash", describe_exit(status))


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


# -- the driver's side ----------------------------------------------------------------------------------

class Worker:
    """The driver's handle on a measuring process (see the module docstring).

    Args:
        backend: a registered backend name (:data:`perfseer.profiling.backends.BACKENDS`).
        options: the backend's JSON-able constructor arguments (``threads``, ``protocol``...).
        recycle_every: measurements before the process is replaced by a fresh one.
        start_timeout: seconds allowed for the process to import and prime the backend.
        log_path: where the process's stdout/stderr go (default: discarded).

    Example::

        with Worker("torch-cpu", {"threads": 1}) as w:
            m = w.run(Job("space:{...}", "3x64x64", 8, "infer", "fp32", w.device("infer", "sgd")), timeout=600)
    """

    def __init__(self, backend: str, options: dict | None = None, recycle_every: int = 100,
                 start_timeout: float = 600.0, log_path: str | None = None):
        if recycle_every < 1:
            raise CollectError(f"recycle_every is {recycle_every}", "give a whole number >= 1")
        self.backend = backend
        self.options = dict(options or {})
        self.recycle_every = recycle_every
        self.start_timeout = start_timeout
        self.log_path = log_path
        self.info: dict | None = None  # the ready message: env, hardware, setting, isolation
        self.starts = 0
        self._proc = None
        self._conn = None
        self._served = 0

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> dict:
        """Start the process (if not running) and return its ready message."""
        if self.alive:
            return self.info
        self._discard()
        ctx = mp.get_context("spawn")
        ours, theirs = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_serve, args=(theirs, self.backend, self.options, self.log_path),
                           name="perfseer-worker", daemon=True)
        proc.start()
        theirs.close()
        self._proc, self._conn, self._served = proc, ours, 0
        self.starts += 1
        if not ours.poll(self.start_timeout):
            self._discard()
            raise CollectError(f"the {self.backend} worker did not start within {self.start_timeout:g} s",
                               "check that the backend's libraries import on this machine")
        try:
            msg = _recv(ours)
        except (EOFError, OSError):
            proc.join(5)
            code = proc.exitcode
            self._discard()
            raise CollectError(f"the {self.backend} worker died while starting "
                               f"({describe_exit(code) if code is not None else 'no exit code'})",
                               "run the backend's libraries by hand on this machine to see why") from None
        if not msg.get("ready"):
            self._discard()
            raise CollectError(msg.get("problem", "the worker could not start"),
                               msg.get("fix") or "check the backend's options and libraries")
        self.info = msg
        return msg

    def device(self, phase: str, optimizer: str, hardware: str | None = None) -> str:
        """The ``device`` column for a job of this worker (``hardware`` overrides the detected name)."""

        info = self.start()
        return device_name(hardware or info["hardware"], info["setting"], phase, optimizer)

    def run(self, job: Job, timeout: float) -> Measurement:
        """Measure ``job``; a crash, hang or timeout is the result's status, never an exception
        (only a worker that cannot start raises :class:`CollectError`)."""
        self.start()
        fork = self.info.get("isolation") == "fork"
        started = time.perf_counter()
        try:
            _send(self._conn, {"op": "measure", "job": job.to_dict(), "timeout": timeout})
            answered = self._conn.poll(timeout + (_GRACE_S if fork else 0.0))
        except (OSError, EOFError):
            answered = True  # the pipe broke: the process died; recv below says so
        if not answered:
            self._kill()
            return Measurement.failed("timeout", f"no result within {timeout:g} s; the worker was killed",
                                      seconds=time.perf_counter() - started)
        try:
            msg = _recv(self._conn)
        except (EOFError, OSError, ValueError):
            self._proc.join(5)
            code = self._proc.exitcode
            self._discard()
            return Measurement.failed("crash", describe_exit(code) if code is not None else "the worker vanished",
                                      seconds=time.perf_counter() - started)
        self._served += 1
        if self._served >= self.recycle_every:
            self.close()
        return Measurement.from_dict(msg["result"])

    def close(self) -> None:
        """Stop the process (politely, then by force)."""
        if self._proc is None:
            return
        try:
            if self._proc.is_alive():
                _send(self._conn, {"op": "exit"})
                self._proc.join(10)
        except (OSError, EOFError):
            pass
        self._kill()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)
        self._discard()

    def _discard(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
        self._proc = self._conn = None
