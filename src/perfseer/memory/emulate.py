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
    from torch.utils._python_dispatch import _disable_current_modes  # deferred: heavy, loaded on first use

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


def _cuda_dropout_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    """``scaled_dot_product_attention`` with attention dropout as CUDA runs it, or ``None``.

    With ``dropout_p > 0`` the CPU has no fused kernel and runs the math one, which saves the
    attention matrix and its dropout mask for backward; CUDA runs the memory-efficient kernel (or
    flash, which saves the same: the output and a log-sum-exp per query), so this calls that
    kernel (``_scaled_dot_product_efficient_attention``, whose meta function allocates what the CUDA
    one returns).  Conditions of ``sdp_utils.cpp``'s memory-efficient check that change the answer
    here: 4-D inputs, no grouped-query attention, a head size that is a multiple of 4 (fp32) or 8.
    A boolean mask becomes the additive float bias CUDA builds from it.
    """
    if not (dropout_p > 0 and isinstance(query, torch.Tensor) and query.dim() == 4 and not enable_gqa
            and query.shape[-1] % (4 if query.dtype == torch.float32 else 8) == 0
            and query.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and key.dtype == query.dtype and value.dtype == query.dtype):
        return None
    bias = attn_mask
    if bias is not None and bias.dtype == torch.bool:
        bias = torch.zeros(bias.shape, dtype=query.dtype, device=query.device).masked_fill(~bias, float("-inf"))
    if bias is not None and bias.dim() == 4:
        bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    return torch.ops.aten._scaled_dot_product_efficient_attention(query, key, value, bias, grad, dropout_p, is_causal,
                                                                  scale=scale)[0]


class KernelChoices(TorchFunctionMode):
    """Make dropout allocate what the real kernel allocates (see the module docstring), attention
    dropout included (:func:`_cuda_dropout_sdpa`).

    Args:
        cuda: use CUDA's fused dropout (a bool mask) in training.
    """

    def __init__(self, cuda: bool = True):
        super().__init__()
        self.cuda = cuda

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.cuda and func is F.scaled_dot_product_attention:
            out = _cuda_dropout_sdpa(*args, **kwargs)
            if out is not None:
                return out
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


# -- batch norm on the meta backend ------------------------------------------------------------
# The meta device's batch norm kernels are PyTorch's Python decompositions, which run dozens of
# Python reference operators per call (most of a ResNet's simulation time).  These give the
# outputs the CPU kernels allocate (aten/src/ATen/native/Normalization.cpp: ``batch_norm_cpu``,
# ``batch_norm_backward_cpu``), directly: the output like the input (its memory format kept), the
# saved mean and inverse std per channel in training (empty outside it), one gradient per
# requested input.  Values are not computed (meta tensors have none).


def _like(x):
    """``torch.empty_like(x)`` (memory format kept) without its Python reference on meta."""
    for fmt in (torch.contiguous_format, torch.channels_last, torch.channels_last_3d):
        try:
            if x.is_contiguous(memory_format=fmt):
                return torch.empty(x.shape, dtype=x.dtype, device=x.device, memory_format=fmt)
        except RuntimeError:  # channels_last of a tensor that is not 4-D
            continue
    return torch.empty_like(x)


def _stat_dtype(x):
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def _bn(input, weight, bias, running_mean, running_var, training, momentum, eps):
    c = input.shape[1] if input.dim() > 1 else 0
    n = c if training else 0
    return (_like(input), torch.empty((n,), dtype=_stat_dtype(input), device=input.device),
            torch.empty((n,), dtype=_stat_dtype(input), device=input.device))


def _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                 output_mask):
    c = input.shape[1]
    like = weight if weight is not None else None
    gw = (_like(like) if like is not None else torch.empty((c,), dtype=input.dtype, device=input.device))
    gb = (_like(like) if like is not None else torch.empty((c,), dtype=input.dtype, device=input.device))
    return (_like(input) if output_mask[0] else None, gw if output_mask[1] else None,
            gb if output_mask[2] else None)


def _bn_whole(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled):
    return _like(input)  # under inference_mode the composite operator is dispatched whole


def _conv(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """``convolution``'s output, as its meta kernel (``meta_conv``) makes it (contiguous), without
    the Python shape checks (their ``torch._check`` imports sympy)."""
    k = weight.shape[2:]
    n = len(k)
    stride, padding, dilation = (list(v) * n if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    if transposed:
        output_padding = list(output_padding) * n if len(output_padding) == 1 else list(output_padding)
        spatial = [(i - 1) * s - 2 * p + d * (kk - 1) + op + 1 for i, s, p, d, kk, op in
                   zip(input.shape[2:], stride, padding, dilation, k, output_padding)]
        channels = weight.shape[1] * groups
    else:
        spatial = [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, s, p, d, kk in
                   zip(input.shape[2:], stride, padding, dilation, k)]
        channels = weight.shape[0]
    if input.shape[1] == 0:
        channels = 0
    if min(spatial, default=1) <= 0:
        raise NotOnMeta(f"convolution output size {spatial}")  # the real kernel's error, on the fake backend
    return input.new_empty((input.shape[0], channels, *spatial))


META_KERNELS = {torch.ops.aten.convolution.default: _conv,
                torch.ops.aten.native_batch_norm.default: _bn,
                torch.ops.aten.native_batch_norm_backward.default: _bn_backward,
                torch.ops.aten.batch_norm.default: _bn_whole}
