"""PyTorch on the CPU.

What each metric means (per step; a step processes the whole batch):

``latency_ms``
    The median wall-clock time (``time.perf_counter``) of one step, by the protocol of
    :mod:`perfseer.profiling.protocol`; spread and count in the measurement's ``timing``.
``memory_mb``
    The peak resident memory the measurement added, in MiB: the process is a fresh fork of a
    worker that imported and warmed up torch (so lazy initialisation is already paid and no
    allocator cache of an earlier model is left); at the start, before the model is built, the
    kernel's high-water mark is reset (``echo 5 > /proc/self/clear_refs``) and the RSS read.  At
    the end ``memory_mb = (VmHWM - VmRSS_start) - growth of RssFile``: everything the measurement
    held at its peak -- weights, gradients, optimizer state, input, activations, workspace, the
    allocator's own overhead and the intra-op thread stacks -- but not the pages of shared
    libraries it touched (code, not model memory).  ``extra`` keeps the weights' exact size
    (``weights_mb``) and the raw RSS figures.  The warm-up and timed steps are inside the window,
    so the peak of the worst step counts.  (Called directly in a long-lived process instead of
    through a :class:`~perfseer.profiling.worker.Worker`, the figure only counts growth beyond the
    memory the allocator already holds from earlier work: use a worker for memory.)
``util_pct``
    Process CPU time (user + system, all threads; ``os.times``) during the timed steps, divided by
    their wall time and by the number of threads: 100 means every allowed core was busy.
``energy_j``
    CPU package energy per timed step from RAPL (``/sys/class/powercap``) where readable, else not
    reported.  It counts the whole package, so other processes' work is included.

Precisions: ``fp32``; ``amp_bf16`` (``torch.autocast("cpu", bfloat16)``), reported as unsupported
where oneDNN has no bfloat16 path on this CPU (it would be emulated, and slow for no reason).
"""

from __future__ import annotations

import time

from perfseer.errors import PerfseerError
from perfseer.profiling.backends._torch_steps import make_step
from perfseer.profiling.backends.base import (MIB, Backend, RssProbe, collect_garbage, describe_error, is_oom,
                                              run_timed_cpu)
from perfseer.profiling.environment import capture, cpu_model, device_slug
from perfseer.profiling.jobs import Measurement
from perfseer.sources.runnable import build_module, weight_bytes
from perfseer.sources.space import build_space_model


def bf16_supported() -> bool:
    import torch  # deferred: heavy, loaded on first use

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


# Small networks that run every operator type of the model space, for priming.
_PRIME_CONFIGS = (
    {"v": 1, "stem": 16, "act": "relu", "classes": 10, "stages": [
        {"style": "vgg", "depth": 1, "width": 16, "down": "first", "kernel": 3},
        {"style": "inception", "depth": 1, "width": 32, "down": "last", "b1": 8, "b3r": 8, "b3": 8, "b5r": 8,
         "b5": 8, "bp": 8, "b5_mode": "5x5"},
        {"style": "resnet", "depth": 1, "width": 32, "down": "first", "block": "bottleneck", "mid": 16, "groups": 4},
        {"style": "mobilenet", "depth": 2, "width": 32, "down": "first", "expand": 3, "kernel": 5, "se": True}]},
    {"v": 1, "stem": 16, "act": "silu", "classes": 10, "stages": [
        {"style": "densenet", "depth": 2, "width": 32, "down": "last", "growth": 8, "bn_size": 2},
        {"style": "resnet", "depth": 1, "width": 32, "down": "first", "block": "basic", "mid": 32, "groups": 1},
        {"style": "vgg", "depth": 1, "width": 32, "down": "first", "kernel": 5},
        {"style": "mobilenet", "depth": 1, "width": 32, "down": "last", "expand": 1, "kernel": 3, "se": False}]},
)


class TorchCpuBackend(Backend):
    """PyTorch on the CPU, eager mode, ``threads`` intra-op threads (default 1)."""

    name = "torch-cpu"
    short = "torch"
    precisions = ("fp32", "amp_bf16")
    isolation = "fork"

    def __init__(self, threads: int | None = 1, protocol=None):
        super().__init__(threads if threads is not None else 1, protocol)

    def hardware(self) -> str:
        return device_slug(cpu_model())

    def environment(self) -> dict:
        import torch  # deferred: heavy, loaded on first use

        return capture(self.threads, {"backend": self.name, "torch_parallel": torch.__config__.parallel_info()
                                      .splitlines()[-4:], "mkldnn_bf16": bf16_supported()})

    def prime(self) -> None:
        """Import torch and run a forward and a training step of every operator type, with one
        thread (no OpenMP pool exists yet, which keeps forking safe); each measurement's child then
        sets its own thread count."""
        import torch  # deferred: heavy, loaded on first use

        torch.set_num_threads(1)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set in this process
            pass
        x = torch.randn(2, 3, 32, 32)
        precisions = ("fp32", "amp_bf16") if bf16_supported() else ("fp32",)
        for config in _PRIME_CONFIGS:
            for precision in precisions:
                for phase, opt in (("infer", "sgd"), ("train", "sgd"), ("train", "adam"), ("train", "adamw")):
                    step, _ = make_step(build_space_model(config), x, phase, precision, opt, "cpu")
                    step()
        del x, step
        collect_garbage()

    def measure(self, model, input_shape, batch: int, phase: str, precision: str = "fp32",
                optimizer: str = "sgd") -> Measurement:
        refused = self.check(phase, precision, optimizer)
        if refused is not None:
            return refused
        if precision == "amp_bf16" and not bf16_supported():
            return Measurement.failed("unsupported", "this CPU has no bfloat16 path in oneDNN; "
                                                     "autocast would emulate it")
        import torch  # deferred: heavy, loaded on first use

        started = time.perf_counter()
        torch.set_num_threads(self.threads)
        probe = RssProbe()
        probe.start()
        try:
            torch.manual_seed(0)
            module = build_module(model)
            weights = weight_bytes(module)
            x = torch.randn(batch, *tuple(input_shape))
            step_fn, _state = make_step(module, x, phase, precision, optimizer, "cpu")

            def step() -> float:
                t0 = time.perf_counter()
                step_fn()
                return (time.perf_counter() - t0) * 1e3

            timing, util, joules = run_timed_cpu(step, self.protocol, self.threads)
        except PerfseerError as e:
            return Measurement.failed("error", str(e), seconds=time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - any failure of the model is its measurement's status
            status = "oom" if is_oom(e) else "error"
            return Measurement.failed(status, describe_error(e), seconds=time.perf_counter() - started,
                                      extra={"memory_at_failure_mb": probe.peak_mb()})
        extra = {"weights_mb": weights / MIB, **probe.details(), "threads": self.threads,
                 "memory_method": "rss-hwm-fork"}
        return Measurement(
            status="ok", latency_ms=timing.median_ms, memory_mb=probe.peak_mb(), util_pct=util,
            energy_j=joules / timing.reps if joules is not None and timing.reps else None,
            timing=timing.to_dict(), extra=extra, seconds=time.perf_counter() - started)
