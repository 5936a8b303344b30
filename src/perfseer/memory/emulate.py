"""CUDA kernel choices that change memory, applied while simulating on fake CPU tensors.

``F.dropout`` in training on a CPU tensor runs ``_dropout_impl`` (an fp32 noise tensor the size
of the input, saved for backward); on CUDA it runs the fused ``native_dropout``, which saves a
``bool`` mask (``is_fused_kernel_acceptable`` in ``aten/src/ATen/native/Dropout.cpp``: CUDA, XPU,
lazy and privateuse1 tensors with 0 < p < 1).  This mode routes training dropout to
``native_dropout`` so the saved mask has CUDA's size.

Whatever the target, dropout outside training (or with ``p == 0``) returns its input
(``at::dropout``: ``if (!train || p == 0) return input``); fake tensors would otherwise make it a
new tensor, so the mode returns the input itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class KernelChoices(TorchFunctionMode):
    """Make dropout allocate what the real kernel allocates (see the module docstring).

    Args:
        cuda: use CUDA's fused dropout (a bool mask) in training.
    """

    def __init__(self, cuda: bool = True):
        super().__init__()
        self.cuda = cuda

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.dropout, torch.dropout):
            names = ("input", "p", "training", "inplace") if func is F.dropout else ("input", "p", "train")
            bound = {"p": 0.5, "training": True, "train": True, "inplace": False}
            bound.update(zip(names, args))
            bound.update(kwargs)
            x, p = bound["input"], float(bound["p"])
            training = bound["training"] if func is F.dropout else bound["train"]
            if not training or p == 0.0:
                return x
            if (self.cuda and 0.0 < p < 1.0 and not bound["inplace"] and isinstance(x, torch.Tensor)
                    and x.numel() > 0):
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)
