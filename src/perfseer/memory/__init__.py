"""GPU memory of a training or inference step: simulated, not guessed.

A model's step runs on fake tensors under a recorder of every storage allocation and free
(:mod:`~perfseer.memory.trace`, :mod:`~perfseer.memory.step`); the recorded trace is replayed
through a model of PyTorch's CUDA caching allocator (:mod:`~perfseer.memory.allocator`) to give
peak allocated and reserved bytes; per-device constants (CUDA context, cuBLAS workspace,
:mod:`~perfseer.memory.overheads`) complete the total (:mod:`~perfseer.memory.breakdown`).
ONNX-only models get a liveness analysis of their graph (:mod:`~perfseer.memory.onnx_liveness`).
See ``docs/memory.md``.
"""
