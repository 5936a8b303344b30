"""Per-device memory that is not the model's tensors: the CUDA context and cuBLAS's workspace.

Device capacities and MIG profiles come from the device registry (:mod:`perfseer.devices`);
this module holds only what the memory model adds on top of the allocator's own accounting.

* **CUDA context** (not in ``memory_reserved``; visible in NVML's used memory): the driver's
  per-process state plus the kernels of CUDA, cuBLAS and cuDNN that get loaded.
  :data:`DEFAULT_CONTEXT_MIB` = 1,314 MiB is *measured*: NVML's used memory less the caching
  allocator's peak reservation, median of the 20 calibration-set inference rows of
  ``datasets/h200/`` (NVIDIA H200, driver 580.159, CUDA 13.0, cuDNN 9.19, PyTorch 2.11; range
  1,310-1,318).  On the other 130 rows of that table (training steps, fp32 and AMP) it was
  1,310-1,398 MiB, median 1,322.  Other drivers, CUDA versions and libraries load different
  kernels: overridable per call (``context_mib=`` / ``--context-mib``).
* **cuBLAS workspace** (allocated through the caching allocator at the first matmul, kept for
  the life of the handle, so it is counted in ``memory_allocated``): PyTorch's default size is
  ``4096 * 1024 * 2 + 16 * 1024 * 8`` B (8 MiB + 128 KiB) and ``4096 * 8 * 1024`` B (32 MiB) on
  compute capability 9.0 (Hopper) GPUs (``parseChosenWorkspaceSize`` in
  ``aten/src/ATen/cuda/CublasHandlePool.cpp``, PyTorch 2.x, when ``CUBLAS_WORKSPACE_CONFIG`` is
  unset).
* **cuDNN workspaces** are transient per-convolution allocations whose size depends on the
  algorithm cuDNN picks at run time; they are not modelled (see docs/concepts/memory-simulation.md).
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
DEFAULT_CONTEXT_MIB = 1314
CUBLAS_WORKSPACE_DEFAULT = 4096 * 1024 * 2 + 16 * 1024 * 8
CUBLAS_WORKSPACE_SM90 = 4096 * 8 * 1024


@dataclass(frozen=True)
class Overheads:
    """Bytes added to the allocator's peaks on a device."""

    context: int           # CUDA context, outside the caching allocator
    cublas_workspace: int  # one cuBLAS workspace, inside the caching allocator


def overheads_for(architecture: str | None, context_mib: float | None = None) -> Overheads:
    """The overheads on a GPU of ``architecture`` (the registry's ``DeviceSpec.architecture``,
    e.g. ``"hopper"``; ``None`` for an unnamed GPU: the pre-Hopper workspace)."""
    hopper = (architecture or "").lower() == "hopper"
    ctx = DEFAULT_CONTEXT_MIB if context_mib is None else context_mib
    return Overheads(context=int(ctx * MIB),
                     cublas_workspace=CUBLAS_WORKSPACE_SM90 if hopper else CUBLAS_WORKSPACE_DEFAULT)
