"""CUDA kernel choices that change memory, applied while simulating on fake CPU tensors.

``F.dropout`` in training on a CPU tensor runs ``_dropout_impl`` (an fp32 noise tensor the size
of the input, saved for backward); on CUDA it runs the fused ``native_dropout``, which saves a
``bool`` mask (``is_fused_kernel_acceptable`` in ``aten/src/ATen/native/Dropout.cpp``: CUDA, XPU,
lazy and privateuse1 tensors with 0 < p < 1).  This mode routes training dropout to
``native_dropout`` so the saved mask has CUDA's size.

Whatever the target, dropout outside training (or with ``p == 0``) returns its input
(``at::dropout``: ``if (!train || p == 0) return input``); fake tensors would otherwise make it a
new tensor, so the mode returns the input itself.

On the meta backend (``trace_step``'s fast path) one more choice is made here:
``scaled_dot_product_attention`` asks a per-device function which kernel to run, and the meta
device has none, so it would always run the math kernel (which saves the attention matrix).  The
mode asks the CPU's ``_fused_sdp_choice`` about small CPU stand-ins of the same dtype, rank, batch,
heads and head size, and runs the CPU flash kernel when that is the CPU's answer
(``scaled_dot_product_attention`` in ``aten/src/ATen/native/transformers/attention.cpp``).  A
boolean mask (converted by extra operators first) or grouped-query attention raise
:class:`NotOnMeta`, and the step is run on the fake backend instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


class NotOnMeta(Exception):
    """The meta backend does not reproduce this operator's CPU behaviour: use the fake backend."""


def _cpu_stand_in(t):
    """A small CPU tensor that ``_fused_sdp_choice`` judges as it judges ``t``: same dtype, rank,
    batch and head sizes, last dimension and whether its last stride is 1; sequence length 1."""
    shape = [1 if i >= t.dim() - 2 else d for i, d in enumerate(t.shape)]
    shape[-1] = t.shape[-1]
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        return torch.empty(*shape[:-1], shape[-1] * 2, dtype=t.dtype, device="cpu")[..., ::2]
    return torch.empty(shape, dtype=t.dtype, device="cpu")


def _meta_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` on meta tensors with the kernel the CPU would choose."""
    from torch.utils._python_dispatch import _disable_current_modes

    if enable_gqa or (attn_mask is not None and attn_mask.dtype == torch.bool) or query.dim() < 2:
        raise NotOnMeta("scaled_dot_product_attention with a boolean mask or grouped-query attention")
    with _disable_current_modes():
        mask = None if attn_mask is None else torch.empty([1] * attn_mask.dim(), dtype=attn_mask.dtype, device="cpu")
        choice = torch._fused_sdp_choice(_cpu_stand_in(query), _cpu_stand_in(key), _cpu_stand_in(value), mask,
                                         dropout_p, is_causal, scale=scale)
    if choice == 1:  # SDPBackend.flash_attention: the CPU kernel (no padding of the head size on CPU)
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        if not torch.is_inference_mode_enabled():
            return flash(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        # under inference_mode the composite operator is dispatched whole: the recorder sees one
        # allocation, its output (the log-sum-exp lives and dies inside the CPU kernel)
        with _disable_current_modes():
            out = flash(query, key, value, dropout_p, is_causal, attn_mask=attn_mask, scale=scale)[0]
        return torch.ops.aten.alias(out)
    if choice != 0:
        raise NotOnMeta(f"scaled_dot_product_attention: CPU kernel choice {choice}")
    return None  # math: what the meta device runs anyway


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
        if (func is F.scaled_dot_product_attention and args and isinstance(args[0], torch.Tensor)
                and args[0].device.type == "meta"):
            out = _meta_sdpa(*args, **kwargs)
            if out is not None:
                return out
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
