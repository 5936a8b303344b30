"""What a step does to a GPU, as the power model reads it: the share of the step with a kernel
running and, while one runs, how much of the GPU's compute and memory peaks it achieves.

The latency model's kernels (:mod:`perfseer.specmodel.compose`) give each kernel's FLOPs, bytes
and predicted time ``t_k``.  A kernel's achieved compute throughput is ``flops_k / t_k``, a share
``flops_k / (t_k peak_k)`` of the device's peak at its precision (tensor-core peak for GEMMs and
convolutions; TF32 for FP32 convolutions, PyTorch's default); its achieved memory throughput
``bytes_k / t_k``, a share of the bandwidth.  The time-weighted mean of these shares over the
kernels' time is what the power model uses:

    compute = sum_k flops_k / peak_k / sum_k t_k,   memory = sum_k bytes_k / bw / sum_k t_k

(each in [0, 1]: a kernel cannot run faster than its roofline).  The shares are the latency
model's view of the step's intensity (how close its kernels run to the device's peaks); a
whole-model calibration of the latency does not change them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from perfseer.specmodel import kernels as kt
from perfseer.specmodel import rules


@dataclass(frozen=True)
class Activity:
    """A step's activity on one GPU.

    Attributes:
        kernel_ms: the summed time of the step's kernels (the latency model's, before any
            whole-model calibration): the GPU's busy time.
        kernels: how many kernels the step launches.
        compute: time-weighted share of the compute peak achieved while a kernel runs, [0, 1].
        compute_cuda: the part of ``compute`` done on the CUDA cores (matrix kernels off the
            tensor cores: FP32 GEMMs, TF32 turned off, Pascal; every element-wise kernel), [0, 1].
        memory: time-weighted share of the memory bandwidth achieved while a kernel runs, [0, 1].
        compute_bound: the share of the busy time in kernels whose roofline is the compute peak
            (the part a lower clock slows), [0, 1].
        training: whether the step is a training step (its host launches more per kernel:
            autograd, the optimizer, the gradient scaler).
        roofline_ms: the summed roofline time of the kernels (each at the device's peak or
            bandwidth, whichever binds): the least time the GPU can be busy.
        gpu_ms: the kernels' time on the GPU itself: each kernel's predicted time above the
            launch floor the latency model's kernel measurements carry (the step's shortest
            predicted kernel), and at least its roofline time.
    """

    kernel_ms: float
    kernels: int
    compute: float
    memory: float
    compute_bound: float
    training: bool = False
    roofline_ms: float = 0.0
    gpu_ms: float = 0.0
    compute_cuda: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Activity":
        return cls(**{k: d[k] for k in ("kernel_ms", "kernels", "compute", "memory", "compute_bound", "training",
                                          "roofline_ms", "gpu_ms", "compute_cuda")
                      if k in d})


def activity_from_kernels(table, kernel_us, spec, precision: str) -> Activity:
    """:class:`Activity` of a kernel table (:mod:`perfseer.specmodel.kernels`) whose kernels take
    ``kernel_us`` (µs each) on ``spec`` at ``precision`` (``fp32``, ``tf32``, ``fp16``, ``bf16``;
    :data:`perfseer.specmodel.rules.FP32_IEEE`: FP32 with TF32 off, convolutions too)."""
    us = np.asarray(kernel_us, dtype=float)
    training = bool("pass" in table and (table["pass"] == "bw").any())
    if len(table) == 0 or not np.isfinite(us).all() or us.sum() <= 0:
        return Activity(0.0, int(len(table)), 0.0, 0.0, 0.0, training)
    ieee = precision == rules.FP32_IEEE  # FP32 with TF32 off (how the collection kit measures fp32)
    precision = "fp32" if ieee else precision
    dev = kt.device_frame([spec] * len(table), [precision] * len(table), table["family"])
    if precision == "fp32" and not ieee and spec.peak_tflops.get("tf32"):
        # PyTorch runs FP32 convolutions on the tensor cores in TF32 by default
        # (torch.backends.cudnn.allow_tf32 = True); FP32 matmuls stay FP32 (allow_tf32 = False)
        conv = (table["family"] == "conv").to_numpy()
        dev.loc[conv, "peak_tflops"] = spec.peak("tf32")
    t_flop, t_mem = kt.roofline_us(table, dev)
    fam = table["family"].to_numpy()
    cuda = np.ones(len(table), dtype=bool)  # the kernels on the CUDA cores (element-wise ones too)
    for f in ("gemm", "conv"):
        on = fam == f
        if on.any():
            cuda[on] = rules.unit(spec, rules.FP32_IEEE if ieee else precision, f) == "cuda"
    roof = np.maximum(t_flop, t_mem)
    t = np.maximum(us, roof)  # a kernel cannot beat its roofline
    busy = float(t.sum())
    on_gpu = np.maximum(us - float(us.min()), roof)
    return Activity(kernel_ms=float(us.sum()) / 1000, kernels=int(len(table)),
                    compute=float(np.clip(t_flop.sum() / busy, 0.0, 1.0)),
                    memory=float(np.clip(t_mem.sum() / busy, 0.0, 1.0)),
                    compute_bound=float(t[t_flop >= t_mem].sum() / busy), training=training,
                    roofline_ms=float(roof.sum()) / 1000, gpu_ms=float(on_gpu.sum()) / 1000,
                    compute_cuda=float(np.clip(t_flop[cuda].sum() / busy, 0.0, 1.0)))


def activity_from_totals(busy_ms: float, flops: float, bytes_: float, spec, precision: str,
                         kernels: int = 0) -> Activity:
    """:class:`Activity` of a step known only by totals: ``busy_ms`` of kernel time doing
    ``flops`` FLOPs at ``precision``'s peak (matrix units) and moving ``bytes_`` bytes (an LLM
    decoding step, say: :func:`perfseer.energy.llm.decode_activity`)."""
    if busy_ms <= 0:
        return Activity(0.0, kernels, 0.0, 0.0, 0.0)
    t_flop = flops / (spec.peak(precision) * 1e12) * 1000
    t_mem = bytes_ / (spec.mem_bandwidth_gbs * 1e9) * 1000
    busy = max(busy_ms, t_flop, t_mem)
    return Activity(kernel_ms=float(busy), kernels=int(kernels), compute=float(min(t_flop / busy, 1.0)),
                    memory=float(min(t_mem / busy, 1.0)), compute_bound=1.0 if t_flop >= t_mem else 0.0,
                    roofline_ms=float(max(t_flop, t_mem)), gpu_ms=float(busy))
