"""Backends for the collection tests: no torch, instant, and they fail on demand.

The model reference's name says what to do: ``crash`` (SIGSEGV), ``exit`` (a hard exit), ``hang``
(sleeps for an hour), ``oom`` (MemoryError from batch 4 on), ``error`` (an exception); anything
else answers at once with ``latency_ms = batch`` (after ``$FAKE_SLEEP`` seconds).  Importable by
name in the spawned worker (pytest puts this folder on ``sys.path``, which spawn passes on).
"""

from __future__ import annotations

import os
import signal
import time

from perfseer.profiling.backends.base import Backend
from perfseer.profiling.jobs import Measurement


class FakeBackend(Backend):
    name = "fake"
    short = "fake"
    isolation = "fork"

    def hardware(self) -> str:
        return "fakecpu"

    def environment(self) -> dict:
        return {"cpu": "fake", "backend": self.name, "threads": self.threads, "hostname": "test"}

    def measure(self, model, input_shape, batch, phase, precision="fp32", optimizer="sgd") -> Measurement:
        name = str(model).partition(":")[2]
        if "crash" in name:
            os.kill(os.getpid(), signal.SIGSEGV)
        if "exit" in name:
            os._exit(3)
        if "hang" in name:
            time.sleep(3600)
        if "oom" in name and batch >= 4:
            raise MemoryError("fake allocation failure")
        if "error" in name:
            raise ValueError("fake model failure")
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        timing = {"median_ms": float(batch), "reps": 10, "converged": True, "q1_ms": batch * 0.9,
                  "q3_ms": batch * 1.1, "iqr_ms": batch * 0.2, "mad_ms": batch * 0.1, "cv": 0.05, "ci_rel": 0.01}
        return Measurement("ok", latency_ms=float(batch), memory_mb=2.0 * batch, util_pct=50.0, timing=timing,
                           extra={"pid": os.getpid()}, seconds=0.01)


class InlineFakeBackend(FakeBackend):
    """The same, measuring inside the worker process (as the CUDA backend does)."""

    name = "fake-inline"
    isolation = "inline"
