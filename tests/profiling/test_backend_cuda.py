"""The CUDA backend on a CPU machine: only the CUDA and NVML calls are fakes (monkeypatched); the
model really runs (on the CPU).  Checks event timing, memory arithmetic, utilisation sampling,
the energy delta, the environment, and OOM as a status."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from perfseer.profiling.backends import create_backend
from perfseer.profiling.protocol import Protocol

TINY = {"v": 1, "stem": 8, "act": "relu", "classes": 10, "stages": [
    {"style": "vgg", "depth": 1, "width": 8, "down": "first", "kernel": 3} for _ in range(4)]}
MIB = 2**20
WARMUP, REPS = 2, 8
# Event durations in ms: the warm-up steps are slow, then eight timed steps with median 5.0.
DURATIONS = [90.0, 80.0] + [5.0, 5.0, 6.0, 5.0, 4.0, 5.0, 5.5, 5.0]


class FakeEvent:
    """``torch.cuda.Event``: each (start, end) pair's elapsed_time is the next scripted duration."""

    durations: list = []
    created = 0

    def __init__(self, enable_timing=False):
        assert enable_timing
        FakeEvent.created += 1
        self.recorded = False

    def record(self, stream=None):
        self.recorded = True

    def synchronize(self):
        assert self.recorded

    def elapsed_time(self, end):
        assert self.recorded and end.recorded
        return FakeEvent.durations.pop(0)


class FakeNvml(types.ModuleType):
    """``pynvml``: fixed utilisation, a used-memory ramp, and an energy counter in millijoules."""

    def __init__(self, energy_readings):
        super().__init__("pynvml")
        self.energy = list(energy_readings)
        self.energy_calls = 0
        self.used = 1000 * MIB

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return types.SimpleNamespace(gpu=75, memory=30)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.used += 10 * MIB
        return types.SimpleNamespace(used=self.used, total=80_000 * MIB, free=0)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self.energy_calls += 1
        return self.energy.pop(0)

    def nvmlSystemGetDriverVersion(self):
        return b"550.54"


@pytest.fixture
def fake_cuda(monkeypatch):
    calls = {"reset": 0, "empty": 0, "sync": 0}
    FakeEvent.durations = list(DURATIONS)
    FakeEvent.created = 0
    nvml = FakeNvml([1_000.0, 5_000.0])  # 4 J over the timed steps
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.__setitem__("sync", calls["sync"] + 1))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.__setitem__("empty", calls["empty"] + 1))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: calls.__setitem__("reset", calls["reset"] + 1))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 100 * MIB)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 350 * MIB)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 512 * MIB)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(total_memory=80 * 1024 * MIB))
    return calls, nvml


def backend():
    protocol = Protocol(warmup_reps=WARMUP, warmup_s=0.0, min_reps=REPS, max_reps=REPS, time_cap_s=60)
    # device="cpu": the model runs here; every CUDA and NVML call above is a fake
    return create_backend("torch-cuda", device="cpu", protocol=protocol.to_dict(), sample_interval_s=0.001)


@pytest.mark.parametrize("phase", ["infer", "train"])
def test_timing_memory_utilisation_and_energy(fake_cuda, phase):
    calls, nvml = fake_cuda
    m = backend().measure(TINY, (3, 32, 32), 2, phase, "fp32")
    assert m.status == "ok", m.error
    # timing: the median of the eight timed event pairs, warm-up excluded
    assert m.latency_ms == 5.0
    assert m.timing["reps"] == REPS and m.timing["warmup_reps"] == WARMUP
    assert FakeEvent.created == 2 * (WARMUP + REPS) and FakeEvent.durations == []
    # memory: peak allocated less what was allocated before the model was built
    assert m.memory_mb == pytest.approx(250.0)
    assert m.extra["memory_reserved_mb"] == pytest.approx(512.0)
    assert m.extra["memory_base_mb"] == pytest.approx(100.0)
    assert calls["reset"] == 1 and calls["empty"] >= 1
    # utilisation: the mean of the NVML samples (all 75 %), at least one at each end
    assert m.util_pct == pytest.approx(75.0)
    assert m.extra["util_samples"] >= 2
    assert m.extra["nvml_used_mb"] > 1000.0  # the sampled peak of the used-memory ramp
    # energy: (5000 - 1000) mJ over 8 steps
    assert nvml.energy_calls == 2
    assert m.energy_j == pytest.approx(4.0 / REPS)
    assert m.extra["weights_mb"] > 0


def test_environment_and_device_name(fake_cuda):
    b = backend()
    env = b.environment()
    assert env["gpu"] == "NVIDIA H100 80GB HBM3" and env["driver"] == "550.54"
    assert env["gpu_capability"] == [9, 0] and env["gpu_memory_mb"] == pytest.approx(80 * 1024)
    assert b.hardware() == "h100_80gb_hbm3" and b.setting() == "torch-cuda"


def test_out_of_memory_is_a_status(fake_cuda, monkeypatch):
    class Greedy(torch.nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    m = backend().measure(Greedy(), (3, 8, 8), 64, "infer", "fp32")
    assert m.status == "oom" and "out of memory" in m.error
    assert fake_cuda[0]["empty"] >= 2  # the cache is emptied after the failure too


def test_without_nvml_memory_still_comes_from_torch(fake_cuda, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    m = backend().measure(TINY, (3, 32, 32), 2, "infer", "fp32")
    assert m.status == "ok"
    assert m.util_pct is None and m.energy_j is None
    assert m.memory_mb == pytest.approx(250.0)
    assert "nvidia-ml-py" in m.extra["nvml"]


def test_unsupported_requests(fake_cuda):
    m = backend().measure(TINY, (3, 32, 32), 2, "infer", "fp32", optimizer="sgd")
    assert m.status == "ok"
    with pytest.raises(Exception, match="unknown precision"):
        backend().measure(TINY, (3, 32, 32), 2, "infer", "int8")
