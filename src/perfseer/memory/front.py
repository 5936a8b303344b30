"""``perfseer.memory(...)``: one GPU's step (:mod:`perfseer.memory.api`) or one GPU's share of a
step laid over several GPUs (:mod:`perfseer.memory.parallel`), by the arguments given."""

from __future__ import annotations

from perfseer.memory.api import memory as memory_one
from perfseer.memory.step import MemoryConfigError
from perfseer.memory.breakdown import MemoryEstimate


def memory(model, batch: int = 1, phase: str = "train", optimizer: str | None = "adamw", precision: str = "fp32",
           device: str | None = None, input_shape=None, context_mib: float | None = None,
           capacity_gib: float | None = None, foreach: bool | None = None, mig: bool = False,
           gpus: int = 1, parallel: str | None = None, tp: int | None = None, pp: int | None = None,
           dp: int | None = None, microbatches: int | None = None, schedule: str = "1f1b",
           sequence_parallel: bool = False, checkpoint: bool = False) -> MemoryEstimate:
    """Peak GPU memory of one training or inference step, with its breakdown.

    Args:
        model: ``"timm:NAME"``, ``"torchvision:NAME"``, ``"hf:NAME"`` (``input_shape=(tokens,)``),
            ``"nb201:..."``, ``"fbnet:..."``, ``"space:..."``, a ``torch.nn.Module`` (with
            ``input_shape``), or an ONNX model (a path,
            ``example:NAME`` or ``onnx.ModelProto``: inference only, by liveness analysis).
        batch: samples per step.
        phase: ``"train"`` (forward, backward, optimizer step) or ``"infer"``.
        optimizer: ``"sgd"``, ``"sgd-momentum"``, ``"adam"`` or ``"adamw"`` (train only).
        precision: ``"fp32"``, ``"amp-fp16"``, ``"amp-bf16"`` (autocast, fp32 weights), ``"fp16"``,
            ``"bf16"`` (the whole model cast).
        device: a device registry name (``"a100-40gb"``): sets the capacity, the cuBLAS workspace
            and ``fits``.
        input_shape: one sample without the batch (zoo models default to their own).
        context_mib: CUDA context size (default :data:`~perfseer.memory.overheads.DEFAULT_CONTEXT_MIB`).
        capacity_gib: device memory, instead of the registry's.
        foreach: optimizer ``foreach`` implementation (default: on, as PyTorch picks for CUDA).
        mig: also check the MIG profiles (of ``device`` if it has any, else of A100 40/80 GB,
            H100 80/94 GB and H200): ``.mig`` lists each profile and the smallest that fits.
        gpus, parallel, tp, pp, dp, microbatches, schedule, sequence_parallel: one GPU's share
            of the step laid over several GPUs, as :func:`perfseer.predict` takes them (``batch``
            is then the global batch; docs/guide/several-gpus.md).
        checkpoint: activation checkpointing (full recompute of each transformer layer).

    Returns:
        a :class:`~perfseer.memory.breakdown.MemoryEstimate`; ``.to_dict()`` is its JSON.  With
        several GPUs or ``checkpoint``: a :class:`~perfseer.memory.parallel.ParallelMemory` (one
        GPU's ``total`` and ``breakdown``, ``fits``, ``per_gpu_batch``, the one-GPU step it was
        divided from as ``single``).

    Raises:
        SimulationError: the step cannot run on fake tensors and no fallback applies (training).

    Example:
        >>> est = perfseer.memory("timm:resnet50", batch=64, phase="train", optimizer="sgd")  # doctest: +SKIP
        >>> est.total / 2**30  # doctest: +SKIP
    """
    if gpus != 1 or parallel is not None or tp or pp or dp or checkpoint:  # several GPUs
        if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
            raise MemoryConfigError(f"batch size must be a positive integer, got {batch!r}",
                                    "pass batch=N with N >= 1")
        from perfseer.memory.parallel import memory_of_layout

        return memory_of_layout(model, batch, phase=phase, optimizer=optimizer, precision=precision, device=device,
                                input_shape=input_shape, capacity_gib=capacity_gib, context_mib=context_mib,
                                foreach=foreach, mig=mig, gpus=gpus, parallel=parallel, tp=tp, pp=pp, dp=dp,
                                microbatches=microbatches, schedule=schedule, sequence_parallel=sequence_parallel,
                                checkpoint=checkpoint)
    return memory_one(model, batch=batch, phase=phase, optimizer=optimizer, precision=precision, device=device,
                      input_shape=input_shape, context_mib=context_mib, capacity_gib=capacity_gib, foreach=foreach,
                      mig=mig)
