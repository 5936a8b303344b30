"""ONNX shape inference that an abort inside onnx cannot take the caller down with it.

ONNX's shape inference is C++; on some malformed graphs it aborts (``std::terminate``, a failed
assertion, a segmentation fault), and in-process that kills the whole service.  Here it runs in a
small helper process (Python with ``onnx`` only, started on first use and kept): the model's bytes
go through a pipe, the inferred model's bytes come back.  A helper that dies mid-request becomes a
:class:`~perfseer.errors.ShapeError` naming the model, and the next request starts a new one.

The in-process path serialises the model and parses the result too (that is how
``onnx.shape_inference.infer_shapes`` works), so the helper adds only the pipe transfers: the
ResNet-50 extraction times with and without it are in ``docs/concepts/perfgraph.md``.  Forking the caller
instead was measured slower (its page tables are copied at every pass once torch is loaded).

The helper has a memory limit of its own (``RLIMIT_AS``, :data:`MEMORY_MB`, or
``PERFSEER_SHAPE_INFERENCE_MB``): a graph whose inference would allocate past it (a constant of
2^40 elements) fails there as an inference error naming the limit, instead of taking the host's
memory.

``PERFSEER_SHAPE_INFERENCE=inprocess`` runs inference in-process (no memory limit of its own).
"""

from __future__ import annotations

import atexit
import os
import struct
import subprocess
import sys
import threading

import onnx

from perfseer.errors import ShapeError

_MODE_ENV = "PERFSEER_SHAPE_INFERENCE"
_MEMORY_ENV = "PERFSEER_SHAPE_INFERENCE_MB"
MEMORY_MB = 4096  # address space of the helper process (Python and onnx map ~200 MB of it)
_HEADER = struct.Struct("<QBBB")  # length, check_type, strict_mode, data_prop
_REPLY = struct.Struct("<QB")  # length, status (0 ok, 1 inference error)
_HELPER = r"""
import struct, sys
from onnx.onnx_cpp2py_export import shape_inference as C
inp, out = sys.stdin.buffer, sys.stdout.buffer
H, R = struct.Struct("<QBBB"), struct.Struct("<QB")
while True:
    head = inp.read(H.size)
    if len(head) < H.size:
        break
    n, check_type, strict, data_prop = H.unpack(head)
    data = inp.read(n)
    try:
        reply, status = C.infer_shapes(data, bool(check_type), bool(strict), bool(data_prop)), 0
    except Exception as e:
        reply, status = str(e).encode("utf-8", "replace"), 1
    out.write(R.pack(len(reply), status))
    out.write(reply)
    out.flush()
"""


_LIMIT = r"""
import resource, sys
_soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
_cap = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (_cap if _hard == resource.RLIM_INFINITY else min(_cap, _hard), _hard))
"""


class InferenceFailed(Exception):
    """ONNX's shape inference raised (an ordinary error, reported by the caller)."""


class _Helper:
    def __init__(self, code: str = _HELPER):
        self.code = code
        self.proc: subprocess.Popen | None = None
        self.limit_mb = MEMORY_MB
        self.lock = threading.Lock()

    def _start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
        self.limit_mb = memory_limit_mb()
        # the helper sets its own limit first thing (no preexec_fn: unsafe in a threaded server)
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", _LIMIT + self.code, str(self.limit_mb * 2**20)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env)

    def run(self, data: bytes, flags: tuple[int, int, int], source: str) -> bytes:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            proc = self.proc
            try:
                proc.stdin.write(_HEADER.pack(len(data), *flags))
                proc.stdin.write(data)
                proc.stdin.flush()
                head = proc.stdout.read(_REPLY.size)
                if len(head) < _REPLY.size:
                    raise BrokenPipeError
                n, status = _REPLY.unpack(head)
                reply = proc.stdout.read(n)
                if len(reply) < n:
                    raise BrokenPipeError
            except (BrokenPipeError, OSError):
                code = proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    try:
                        pipe.close()
                    except OSError:  # a broken pipe's buffered bytes cannot be flushed
                        pass
                self.proc = None
                raise ShapeError(
                    f"ONNX shape inference crashed (exit status {code}) on {source}: the graph is malformed in a "
                    "way onnx does not survive", "check the model with onnx.checker.check_model and re-export it")
        if status:
            text = reply.decode("utf-8", "replace")
            if "bad_alloc" in text or "MemoryError" in text:
                text = (f"shape inference needed more than its {self.limit_mb} MB memory limit (a tensor of the "
                        f"graph is absurdly large; {_MEMORY_ENV} raises the limit)")
            raise InferenceFailed(text)
        return reply


    def close(self) -> None:
        with self.lock:
            if self.proc is not None:
                self.proc.stdin.close()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                self.proc.stdout.close()
                self.proc = None


def memory_limit_mb() -> int:
    """The helper's memory limit in MB: ``PERFSEER_SHAPE_INFERENCE_MB`` or :data:`MEMORY_MB`."""
    text = os.environ.get(_MEMORY_ENV, "").strip()
    if text:
        try:
            value = int(text)
        except ValueError:
            raise ShapeError(f"{_MEMORY_ENV}={text[:40]!r} is not a whole number of MB",
                             f"set {_MEMORY_ENV} to e.g. 4096, or unset it") from None
        if value >= 256:
            return value
        raise ShapeError(f"{_MEMORY_ENV}={value} is too small (at least 256 MB)", f"set {_MEMORY_ENV} to e.g. 4096")
    return MEMORY_MB


_helper = _Helper()
atexit.register(lambda: _helper.close())


def infer_shapes(model: onnx.ModelProto, source: str, check_type: bool = False, strict_mode: bool = False,
                 data_prop: bool = False) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes(model, ...)``, isolated in the helper process.

    Raises:
        InferenceFailed: inference raised an exception (the message is onnx's).
        ShapeError: inference crashed the helper (a signal or an abnormal exit).
    """
    data = model.SerializeToString()
    if os.environ.get(_MODE_ENV) == "inprocess":
        from onnx.onnx_cpp2py_export import shape_inference as C  # deferred: heavy, loaded on first use

        try:
            out = C.infer_shapes(data, check_type, strict_mode, data_prop)
        except Exception as e:  # InferenceError, RuntimeError, ValidationError
            raise InferenceFailed(str(e)) from e
    else:
        out = _helper.run(data, (int(check_type), int(strict_mode), int(data_prop)), source)
    return onnx.ModelProto.FromString(out)
