"""ONNX Runtime on the CPU (inference only).

The model runs as ONNX with weights: an ``.onnx`` path as it is; a PyTorch-buildable reference
(``space:``, ``nb201:``, ``fbnet:``, ``timm:``, ``torchvision:``) exported once by :meth:`prepare`
(dynamic batch axis, :func:`perfseer.sources.runnable.export_onnx`) into the backend's temporary
folder, where the later batch sizes of the same model find it.  The session runs with
``intra_op_num_threads = threads``, one inter-op thread, sequential execution and every graph
optimisation (``ORT_ENABLE_ALL``), the CPU execution provider.

Metrics are those of :mod:`perfseer.profiling.backends.torch_cpu` (wall-clock median; peak RSS
growth of a fresh fork, without shared-library pages, counted from before the session is created,
so the session's copy of the weights and its memory arena are included; CPU time over wall time
per thread; RAPL energy where readable).  ``train`` is reported as ``unsupported``, and so is
any precision but ``fp32``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time

import numpy as np

from perfseer.errors import PerfseerError
from perfseer.profiling.backends.base import Backend, RssProbe, collect_garbage, describe_error, is_oom, run_timed_cpu
from perfseer.profiling.environment import capture, cpu_model, device_slug
from perfseer.profiling.jobs import Measurement
from perfseer.sources.runnable import export_onnx, scheme_of
from perfseer.sources.space import canonical_json

_KEEP = 4  # exported models kept in the cache folder (jobs come grouped by model)


class OrtCpuBackend(Backend):
    """ONNX Runtime, CPU execution provider, ``threads`` intra-op threads (default 1)."""

    name = "ort-cpu"
    short = "ort"
    phases = ("infer",)
    precisions = ("fp32",)
    isolation = "fork"

    def __init__(self, threads: int | None = 1, protocol=None, cache_dir: str | None = None):
        super().__init__(threads if threads is not None else 1, protocol)
        self._own_cache = cache_dir is None
        self.cache_dir = cache_dir or tempfile.mkdtemp(prefix="perfseer-ort-")
        os.makedirs(self.cache_dir, exist_ok=True)

    def hardware(self) -> str:
        return device_slug(cpu_model())

    def environment(self) -> dict:
        return capture(self.threads, {"backend": self.name})

    def close(self) -> None:
        if self._own_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)

    def prime(self) -> None:
        """Import onnxruntime and torch (for exports) and run a tiny session with one thread, so
        that no thread pool is alive when the worker forks."""
        import onnx  # deferred: heavy, loaded on first use
        import onnxruntime as ort  # deferred: an optional extra
        from onnx import TensorProto, helper, numpy_helper  # deferred: heavy, loaded on first use

        w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
        graph = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
            "prime", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        sess = ort.InferenceSession(proto.SerializeToString(), self._options(1), providers=["CPUExecutionProvider"])
        sess.run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
        del sess, proto, onnx
        import torch  # noqa: F401 - exports in prepare() need it; import once here, not per model

        collect_garbage()

    def _options(self, threads: int):
        import onnxruntime as ort  # deferred: an optional extra

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        return so

    def onnx_path(self, model, input_shape) -> str:
        """Where the model's ONNX file is (or will be, after :meth:`prepare`)."""

        if isinstance(model, (str, os.PathLike)) and scheme_of(str(model)) is None:
            return os.fspath(model)

        text = canonical_json(model) if not isinstance(model, str) else model
        key = hashlib.sha256(f"{text}|{tuple(input_shape)}".encode()).hexdigest()[:20]
        return os.path.join(self.cache_dir, f"{key}.onnx")

    def prepare(self, model, input_shape) -> None:
        if scheme_of(model) == "example":
            raise PerfseerError(f"{model} is a bundled graph without weights",
                                "measure the torchvision: model of the same name instead")
        path = self.onnx_path(model, input_shape)
        if os.path.exists(path):
            os.utime(path)
            return
        export_onnx(model, tuple(input_shape), path)
        files = sorted((os.path.join(self.cache_dir, f) for f in os.listdir(self.cache_dir) if f.endswith(".onnx")),
                       key=os.path.getmtime, reverse=True)
        for old in files[_KEEP:]:
            try:
                os.remove(old)
            except OSError:
                pass

    def measure(self, model, input_shape, batch: int, phase: str, precision: str = "fp32",
                optimizer: str = "sgd") -> Measurement:
        refused = self.check(phase, precision, optimizer)
        if refused is not None:
            return refused
        import onnxruntime as ort  # deferred: an optional extra

        started = time.perf_counter()
        probe = RssProbe()
        try:
            path = self.onnx_path(model, input_shape)
            if not os.path.exists(path):
                self.prepare(model, input_shape)  # called directly, not through a worker
                collect_garbage()
            probe.start()
            sess = ort.InferenceSession(path, self._options(self.threads), providers=["CPUExecutionProvider"])
            inp = sess.get_inputs()[0]
            dtype = np.float32 if "float" in inp.type else np.int64
            x = np.random.default_rng(0).standard_normal((batch, *tuple(input_shape))).astype(dtype)
            feed = {inp.name: x}

            def step() -> float:
                t0 = time.perf_counter()
                sess.run(None, feed)
                return (time.perf_counter() - t0) * 1e3

            timing, util, joules = run_timed_cpu(step, self.protocol, self.threads)
        except PerfseerError as e:
            return Measurement.failed("error", str(e), seconds=time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - any failure of the model is its measurement's status
            status = "oom" if is_oom(e) else "error"
            return Measurement.failed(status, describe_error(e), seconds=time.perf_counter() - started)
        return Measurement(
            status="ok", latency_ms=timing.median_ms, memory_mb=probe.peak_mb(), util_pct=util,
            energy_j=joules / timing.reps if joules is not None and timing.reps else None,
            timing=timing.to_dict(), extra={**probe.details(), "threads": self.threads,
                                            "memory_method": "rss-hwm-fork", "ort": ort.__version__},
            seconds=time.perf_counter() - started)
