"""GPU memory of a training or inference step: simulated, not guessed.

A model's step runs on fake tensors under a recorder of every storage allocation and free
(:mod:`~perfseer.memory.trace`, :mod:`~perfseer.memory.step`); the recorded trace is replayed
through a model of PyTorch's CUDA caching allocator (:mod:`~perfseer.memory.allocator`) to give
peak allocated and reserved bytes; per-device constants (CUDA context, cuBLAS workspace,
:mod:`~perfseer.memory.overheads`) complete the total (:mod:`~perfseer.memory.breakdown`).
ONNX-only models get a liveness analysis of their graph (:mod:`~perfseer.memory.onnx_liveness`).
See ``docs/concepts/memory-simulation.md``.
"""

from __future__ import annotations

import sys
import types


class _CallableModule(types.ModuleType):
    """Lets ``perfseer.memory(...)`` call :func:`perfseer.memory.front.memory` while
    ``perfseer.memory.trace`` etc. stay importable submodules of this package."""

    def __call__(self, *args, **kwargs):
        from perfseer.memory.front import memory  # deferred: loads torch

        return memory(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


def __getattr__(name):  # the public names, imported on first use (torch loads lazily)
    if name == "memory":
        from perfseer.memory.front import memory  # deferred: loads torch

        return memory
    if name in ("resolve_model", "MemoryEstimate", "max_batch_for", "mig_advice"):
        from perfseer.memory import api  # deferred: loads torch

        return getattr(api, name)
    raise AttributeError(name)
