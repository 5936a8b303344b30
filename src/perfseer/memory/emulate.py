"""CUDA kernel choices that change memory, applied while simulating on fake CPU tensors.

``F.dropout`` in training on a CPU tensor runs ``_dropout_impl`` (an fp32 noise tensor the size
of the input, saved for backward); on CUDA it runs the fused ``native_dropout``, which saves a
``bool`` mask (``is_fused_kernel_acceptable`` in ``aten/src/ATen/native/Dropout.cpp``: CUDA, XPU,
lazy and privateuse1 tensors with 0 < p < 1).  This mode routes training dropout to
``native_dropout`` so the saved mask has CUDA's size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class CudaKernels(TorchFunctionMode):
    """Use the CUDA kernel where its memory differs from the CPU one (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.dropout, torch.dropout):
            names = ("input", "p", "training", "inplace") if func is F.dropout else ("input", "p", "train")
            bound = {"p": 0.5, "training": True, "train": True, "inplace": False}
            bound.update(zip(names, args))
            bound.update(kwargs)
            x, p = bound["input"], float(bound["p"])
            training = bound["training"] if func is F.dropout else bound["train"]
            if (training and 0.0 < p < 1.0 and not bound["inplace"] and isinstance(x, torch.Tensor)
                    and x.numel() > 0):
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)
