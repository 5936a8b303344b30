"""CUDA autocast (``torch.autocast("cuda", dtype)``) emulated on fake CPU tensors.

The simulation runs on fake CPU tensors (a CPU-only PyTorch cannot run autograd on fake CUDA
tensors), and CPU autocast casts a different set of operators than CUDA autocast.  This
``TorchFunctionMode`` applies CUDA's policy instead, at the level of the ``torch`` functions a
model calls.  The operator lists are CUDA's, from ``aten/src/ATen/autocast_mode.cpp`` (PyTorch
2.x): ``lower_precision_fp`` operators run in fp16/bf16, ``fp32`` operators (and the
``fp32_set_opt_dtype`` reductions: softmax, log_softmax, cumsum, sum, prod when no dtype is
given) run in fp32, ``promote`` operators run in the widest input type.

Like autocast, casts of leaf tensors that require grad (the parameters) to the low precision are
cached for the life of the autocast region (``cached_cast`` in ``autocast_mode.h``): each weight
is cast once per forward and the fp16 copy stays alive until the region exits or, when saved
for backward, until backward has used it.

Limit: functions whose nested calls this mode does not see (a Python-level ``torch`` function it
does not list runs with the mode suspended) run in their input precision; nn.MultiheadAttention's
``multi_head_attention_forward`` is treated as one low-precision operator, which is what it is
when ``need_weights=False`` (its attention then is ``scaled_dot_product_attention``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

T = torch.Tensor

_LOWER = {
    torch.conv1d, torch.conv2d, torch.conv3d, torch.conv_tbc, torch.conv_transpose1d,
    torch.conv_transpose2d, torch.conv_transpose3d, torch.convolution, torch._convolution,
    torch.prelu, F.prelu, torch.addmm, torch.addmv, torch.addr, torch.matmul, T.matmul, T.__matmul__,
    T.__rmatmul__, torch.einsum, torch.mm, T.mm, torch.mv, torch.linalg.vecdot, F.linear, torch.addbmm,
    torch.baddbmm, T.baddbmm, torch.bmm, T.bmm, torch.chain_matmul, torch.linalg.multi_dot,
    torch.lstm_cell, torch.gru_cell, torch.rnn_tanh_cell, torch.rnn_relu_cell,
    F.scaled_dot_product_attention, F.multi_head_attention_forward,
}
_FP32 = {
    torch.acos, torch.asin, torch.cosh, torch.erfinv, torch.exp, T.exp, torch.expm1, torch.log, T.log,
    torch.log10, torch.log2, torch.log1p, torch.reciprocal, torch.rsqrt, T.rsqrt, torch.sinh, torch.tan,
    torch.pow, T.pow, T.__pow__, F.softplus, F.layer_norm, torch.layer_norm, torch.native_layer_norm,
    F.group_norm, torch.group_norm, torch.frobenius_norm, torch.nuclear_norm, F.cosine_similarity,
    F.poisson_nll_loss, F.cosine_embedding_loss, F.nll_loss, F.hinge_embedding_loss, F.kl_div,
    F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.mse_loss, F.margin_ranking_loss,
    F.multilabel_margin_loss, F.soft_margin_loss, F.triplet_margin_loss, F.multi_margin_loss,
    F.binary_cross_entropy_with_logits, torch.dist, F.pdist, torch.cdist, torch.renorm,
    torch.logsumexp, T.logsumexp, torch.norm, T.norm, F.normalize, F.cross_entropy,
    F.interpolate, F.upsample, F.upsample_bilinear, F.upsample_nearest,
}
# fp32_set_opt_dtype: run in fp32 unless the caller chose an output dtype
_FP32_OPT = {torch.softmax, T.softmax, F.softmax, torch.log_softmax, T.log_softmax, F.log_softmax,
             torch.cumsum, T.cumsum, torch.cumprod, T.cumprod, torch.sum, T.sum, torch.prod, T.prod}
_PROMOTE = {torch.addcdiv, torch.addcmul, torch.atan2, F.bilinear, torch.cross, torch.dot,
            F.grid_sample, torch.index_put, torch.scatter_add, torch.tensordot, torch.cat, torch.stack}


class CudaAutocast(TorchFunctionMode):
    """Apply CUDA autocast's casting policy (see the module docstring).

    Args:
        dtype: the low precision, ``torch.float16`` or ``torch.bfloat16``.
        on_cast: called with each cached weight cast (the simulator tags it ``weight_casts``).
    """

    def __init__(self, dtype: torch.dtype, on_cast=None):
        super().__init__()
        self.dtype = dtype
        self.on_cast = on_cast
        self._cache: dict[int, torch.Tensor] = {}

    def __exit__(self, *exc):
        self._cache.clear()  # autocast clears its weight-cast cache when the region exits
        return super().__exit__(*exc)

    def _to_low(self, x):
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32):
            return x
        cacheable = x.requires_grad and x.is_leaf and not x._is_view()
        if cacheable:
            hit = self._cache.get(id(x))
            if hit is not None:
                return hit
        y = x.to(self.dtype)
        if cacheable:
            self._cache[id(x)] = y
            if self.on_cast is not None:
                self.on_cast(y)
        return y

    @staticmethod
    def _to_fp32(x):
        if isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16):
            return x.float()
        return x

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _LOWER:
            args, kwargs = tree_map(self._to_low, (args, kwargs))
        elif func in _FP32:
            args, kwargs = tree_map(self._to_fp32, (args, kwargs))
        elif func in _FP32_OPT and kwargs.get("dtype") is None:
            args, kwargs = tree_map(self._to_fp32, (args, kwargs))
        elif func in _PROMOTE:
            leaves = [t for t in torch.utils._pytree.tree_leaves((args, kwargs))
                      if isinstance(t, torch.Tensor) and t.is_floating_point()]
            if any(t.dtype == torch.float32 for t in leaves):
                args, kwargs = tree_map(self._to_fp32, (args, kwargs))
        return func(*args, **kwargs)
