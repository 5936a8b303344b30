"""CUDA autocast's policy as emulated on CPU tensors (operator lists of autocast_mode.cpp)."""

import torch
import torch.nn.functional as F

from perfseer.memory.autocast import CudaAutocast


def test_lower_fp32_and_promote_operators():
    w = torch.nn.Parameter(torch.randn(8, 8))
    x = torch.randn(4, 8)
    with CudaAutocast(torch.float16):
        y = F.linear(x, w)                      # lower_precision_fp
        n = F.layer_norm(y, (8,))               # fp32
        s = torch.softmax(y, -1)                # fp32_set_opt_dtype
        s16 = torch.softmax(y, -1, dtype=torch.float16)
        c = torch.cat([y, x])                   # promote: widest input type
        r = y.relu()                            # not listed: runs in its input's type
    assert (y.dtype, n.dtype, s.dtype, s16.dtype, c.dtype, r.dtype) == (
        torch.float16, torch.float32, torch.float32, torch.float16, torch.float32, torch.float16)


def test_weight_casts_are_cached_per_region():
    w = torch.nn.Parameter(torch.randn(8, 8))
    x = torch.randn(4, 8)
    casts = []
    with CudaAutocast(torch.bfloat16, on_cast=casts.append) as ac:
        F.linear(x, w)
        F.linear(x, w)
        assert len(ac._cache) == 1
    assert len(casts) == 1 and casts[0].dtype == torch.bfloat16
    assert not ac._cache  # cleared when the region exits
