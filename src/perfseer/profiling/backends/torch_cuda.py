"""PyTorch on an NVIDIA GPU.

What each metric means (per step; a step processes the whole batch):

``latency_ms``
    The median GPU time of one step: a ``torch.cuda.Event`` pair recorded around the step on the
    current stream, then synchronised (``elapsed_time``), by the protocol of
    :mod:`perfseer.profiling.protocol`.
``memory_mb``
    ``torch.cuda.max_memory_allocated`` over the whole measurement (model build, warm-up, timed
    steps) less what was allocated before the model was built, in MiB: the tensors the step needs
    at its peak (weights, gradients, optimizer state, activations, workspaces), independent of
    the caching allocator.  ``extra`` adds ``memory_reserved_mb`` (the caching allocator's peak
    reservation, what the process really holds) and ``nvml_used_mb`` (the device's used memory
    from NVML at its sampled peak, which also counts the CUDA context and other processes).
``util_pct``
    The mean of NVML's GPU utilisation (``nvmlDeviceGetUtilizationRates().gpu``: the share of
    time one or more kernels ran, NVML's "SM utilisation") sampled every ``sample_interval_s`` in
    a background thread during the timed steps, plus one sample at each end.
``energy_j``
    ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded, Volta and later)
    read before and after the timed steps: the difference divided by the number of steps.  The
    counter updates every few tens of milliseconds, so the protocol's ``min_time_s`` defaults to 1 s
    here.

NVML comes from the optional ``nvidia-ml-py`` package (``import pynvml``); without it, or where
NVML fails, utilisation and energy are not reported and memory comes from torch alone.
Measurements run inside the worker process (a CUDA context cannot be forked): a crash or hang
there kills the worker, which :mod:`perfseer.profiling.worker` records and replaces.
Precisions: ``fp32`` (TF32 matmuls off), ``amp_fp16`` (autocast + GradScaler), ``amp_bf16``.
"""

from __future__ import annotations

import gc
import threading
import time

from perfseer.errors import PerfseerError
from perfseer.profiling.backends._torch_steps import make_step
from perfseer.profiling.backends.base import MIB, Backend, describe_error, is_oom
from perfseer.profiling.environment import capture, device_slug
from perfseer.profiling.jobs import CollectError, Measurement
from perfseer.profiling.protocol import Protocol, run_protocol
from perfseer.sources.runnable import build_module, weight_bytes


def open_nvml(index: int):
    """``(pynvml module, device handle)``, or ``(None, reason)`` when NVML cannot be used."""
    try:
        import pynvml  # deferred: an optional extra
    except ImportError:
        return None, "pynvml not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception as e:  # noqa: BLE001 - pynvml raises NVMLError subclasses and OSError
        return None, f"NVML unavailable: {describe_error(e)}"


class NvmlSampler:
    """Samples GPU utilisation and used memory in a background thread between start() and stop()."""

    def __init__(self, nvml, handle, interval_s: float = 0.02):
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self.util: list[float] = []
        self.used: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def sample(self) -> None:
        try:
            self.util.append(float(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))
            self.used.append(float(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used))
        except Exception as e:  # noqa: BLE001 - a failing sensor must not fail the measurement
            self.error = describe_error(e)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="perfseer-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def util_pct(self) -> float | None:
        return sum(self.util) / len(self.util) if self.util else None

    def peak_used_mb(self) -> float | None:
        return max(self.used) / MIB if self.used else None


class TorchCudaBackend(Backend):
    """PyTorch on one CUDA device.

    Args:
        device: the torch device to run on (``cuda``, ``cuda:1``).
        gpu_index: the NVML index of that GPU (default: the device's index, 0 for ``cuda``).
        sample_interval_s: NVML sampling period.
    """

    name = "torch-cuda"
    short = "torch-cuda"
    kind = "gpu"
    precisions = ("fp32", "amp_fp16", "amp_bf16")
    isolation = "inline"

    def __init__(self, threads: int | None = None, protocol=None, device: str = "cuda",
                 gpu_index: int | None = None, sample_interval_s: float = 0.02):
        # NVML's energy counter moves every few tens of milliseconds: time at least a second
        if protocol is None:
            protocol = Protocol(min_time_s=1.0)
        elif isinstance(protocol, dict) and "min_time_s" not in protocol:
            protocol = {**protocol, "min_time_s": 1.0}
        super().__init__(threads, protocol)
        self.device = device
        self.gpu_index = gpu_index
        self.sample_interval_s = sample_interval_s
        self._nvml = self._handle = None
        self._nvml_note: str | None = None

    def setting(self) -> str:
        return self.short

    def _torch_device(self):
        import torch  # deferred: heavy, loaded on first use

        return torch.device(self.device)

    def _index(self) -> int:
        if self.gpu_index is not None:
            return self.gpu_index
        dev = self._torch_device()
        return dev.index or 0

    def _ensure_nvml(self) -> None:
        if self._nvml is None and self._nvml_note is None:
            nvml, handle = open_nvml(self._index())
            if nvml is None:
                self._nvml_note = handle
            else:
                self._nvml, self._handle = nvml, handle

    def _check_cuda(self) -> None:
        import torch  # deferred: heavy, loaded on first use

        if not torch.cuda.is_available():
            raise CollectError("torch-cuda needs a CUDA GPU, and torch sees none "
                               f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})",
                               "run on a machine with an NVIDIA GPU and a CUDA build of torch, "
                               "or use --backend torch-cpu")

    def hardware(self) -> str:
        import torch  # deferred: heavy, loaded on first use

        self._check_cuda()
        return device_slug(torch.cuda.get_device_name(self._torch_device()))

    def environment(self) -> dict:
        import torch  # deferred: heavy, loaded on first use

        self._check_cuda()
        self._ensure_nvml()
        dev = self._torch_device()
        props = torch.cuda.get_device_properties(dev)
        extra = {"backend": self.name, "gpu": torch.cuda.get_device_name(dev),
                 "gpu_memory_mb": getattr(props, "total_memory", 0) / MIB,
                 "gpu_capability": list(torch.cuda.get_device_capability(dev)),
                 "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}
        if self._nvml is not None:
            try:
                driver = self._nvml.nvmlSystemGetDriverVersion()
                extra["driver"] = driver.decode() if isinstance(driver, bytes) else driver
            except Exception as e:  # noqa: BLE001
                extra["driver"] = f"unknown ({describe_error(e)})"
        else:
            extra["nvml"] = self._nvml_note
        return capture(self.threads, extra)

    def prime(self) -> None:
        import torch  # deferred: heavy, loaded on first use

        self._check_cuda()
        self._ensure_nvml()
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = False
        if self.threads:
            torch.set_num_threads(self.threads)
        torch.ones(1, device=self._torch_device()).sum().item()  # create the context

    def measure(self, model, input_shape, batch: int, phase: str, precision: str = "fp32",
                optimizer: str = "sgd") -> Measurement:
        refused = self.check(phase, precision, optimizer)
        if refused is not None:
            return refused
        import torch  # deferred: heavy, loaded on first use

        self._ensure_nvml()
        dev = self._torch_device()
        if precision == "amp_bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
            return Measurement.failed("unsupported", "this GPU has no bfloat16 support")
        started = time.perf_counter()
        sampler = NvmlSampler(self._nvml, self._handle, self.sample_interval_s) if self._nvml else None
        counters: dict = {}
        module = x = step_fn = state = None
        try:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
            base = torch.cuda.memory_allocated(dev)
            torch.manual_seed(0)
            module = build_module(model).to(dev)
            weights = weight_bytes(module)
            x = torch.randn(batch, *tuple(input_shape), device=dev)
            step_fn, state = make_step(module, x, phase, precision, optimizer, dev.type)

            def step() -> float:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step_fn()
                end.record()
                end.synchronize()
                return float(start.elapsed_time(end))

            def timed_start():
                torch.cuda.synchronize(dev)
                counters["energy0"] = self._energy_mj()
                if sampler is not None:
                    sampler.start()

            timing = run_protocol(step, self.protocol, on_timed_start=timed_start)
            torch.cuda.synchronize(dev)
            if sampler is not None:
                sampler.stop()
            energy1 = self._energy_mj()
            peak = torch.cuda.max_memory_allocated(dev)
            reserved = torch.cuda.max_memory_reserved(dev)
        except PerfseerError as e:
            return Measurement.failed("error", str(e), seconds=time.perf_counter() - started)
        except Exception as e:  # noqa: BLE001 - any failure of the model is its measurement's status
            status = "oom" if is_oom(e) else "error"
            return Measurement.failed(status, describe_error(e), seconds=time.perf_counter() - started)
        finally:
            if sampler is not None and sampler._thread is not None and not sampler._stop.is_set():
                sampler.stop()
            del module, x, step_fn, state
            gc.collect()
            try:
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - a broken context shows up in the next measurement
                pass
        energy0 = counters.get("energy0")
        joules = ((energy1 - energy0) / 1e3 / timing.reps
                  if energy0 is not None and energy1 is not None and timing.reps else None)
        extra = {"weights_mb": weights / MIB, "memory_reserved_mb": reserved / MIB,
                 "memory_base_mb": base / MIB, "memory_method": "torch-max-allocated"}
        if sampler is not None:
            extra.update(nvml_used_mb=sampler.peak_used_mb(), util_samples=len(sampler.util))
            if sampler.error:
                extra["nvml_error"] = sampler.error
        elif self._nvml_note:
            extra["nvml"] = self._nvml_note
        return Measurement(status="ok", latency_ms=timing.median_ms, memory_mb=(peak - base) / MIB,
                           util_pct=sampler.util_pct() if sampler is not None else None,
                           energy_j=joules, timing=timing.to_dict(), extra=extra,
                           seconds=time.perf_counter() - started)

    def _energy_mj(self) -> float | None:
        if self._nvml is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))
        except Exception:  # noqa: BLE001 - not supported before Volta
            return None

