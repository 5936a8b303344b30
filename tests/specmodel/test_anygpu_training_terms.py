"""The any-GPU model's training-step host terms, autocast's casts and the peak cap, each against a
hand-computed case."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import anygpu
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.compose import with_autocast


def _theta(**kw):
    th = {k: 0.0 for k in anygpu.PARAMS}
    th.update(overlap=3.0, kernel_floor=-20.0, small_n=-20.0, small_k=-20.0, h2d=0.0, host_train=-20.0,
              step_train=-20.0)
    th.update(kw)
    return th


def _design(t_c0, passes, scale):
    n = len(t_c0)
    return anygpu.Design(t_c0=np.asarray(t_c0, float), t_m0=np.zeros(n), occ=np.ones(n), code=np.full(n, 4),
                         backward=np.zeros(n, bool), scale=np.asarray(scale, float), log_peak=np.zeros(n),
                         log_bw=np.zeros(n), step=np.zeros(n, dtype=np.int64), n_steps=1, dim_n=np.full(n, 1e9),
                         dim_k=np.full(n, 1e9), h2d_bytes=np.zeros(1), setting=np.zeros(1, dtype=np.int64),
                         pass_code=np.asarray(passes, dtype=np.int64))


def test_training_kernels_pay_the_training_host_cost():
    """Hand-computed: host 10 us per kernel, 50 us more per backward / optimizer kernel, 1000 us
    more per training step.  A 1-us forward kernel takes (1 + 10^3)^(1/3) = 10.0033 us; a 1-us
    backward kernel run twice (1 + 60^3)^(1/3) = 60.0001 us each; a 1-us optimizer kernel the
    same once: 10.0033 + 3 x 60.0001 + 20 (setting's step) + 1000 = 1210.0036 us."""
    d = _design([1.0, 1.0, 1.0], [0, 1, 2], [1.0, 2.0, 1.0])
    th = _theta(host_train=np.log(50.0), step_train=np.log(1000.0))
    got = anygpu.step_us(th, np.array([[np.log(10.0), np.log(20.0)]]), d)[0]
    want = (1 + 10.0 ** 3) ** (1 / 3) + 3 * (1 + 60.0 ** 3) ** (1 / 3) + 20.0 + 1000.0
    assert want == pytest.approx(1210.0036, abs=1e-3) and got == pytest.approx(want, rel=1e-9)
    # a training step without an optimizer pass (forward and backward only) pays the step term too
    d = _design([1.0, 1.0], [0, 1], [1.0, 2.0])
    got = anygpu.step_us(th, np.array([[np.log(10.0), np.log(20.0)]]), d)[0]
    assert got == pytest.approx((1 + 1e3) ** (1 / 3) + 2 * (1 + 60.0 ** 3) ** (1 / 3) + 20.0 + 1000.0, rel=1e-9)
    # an inference step (forward kernels only) has neither term
    d = _design([1.0], [0], [1.0])
    got = anygpu.step_us(th, np.array([[np.log(10.0), np.log(20.0)]]), d)[0]
    assert got == pytest.approx((1 + 1e3) ** (1 / 3) + 20.0, rel=1e-9)


def test_autocast_adds_its_casts():
    """A 3x3 convolution of 64 -> 64 channels (36,864 weights) run twice, in a training step, and a
    layer norm over 1000 x 768 (forward and backward): autocast adds the weight's cast (4 + 2 bytes
    per weight) and its gradient's cast back, twice each (the layer's repetitions); the norm's
    bytes double (FP32) and two casts of 6 bytes per element surround each of its two passes."""
    c = kt.conv_rows(12, 64, 64, 3, 56, 56, 1, 1, dtype_bytes=2.0).assign(**{"pass": "fw", "scale": 2.0})
    ln = kt.rowwise_rows("ln", 1000, 768, dtype_bytes=2.0).assign(**{"pass": "fw", "scale": 1.0})
    t = pd.concat([c, ln, ln.assign(**{"pass": "bw"})], ignore_index=True)
    out = with_autocast(t)
    assert len(out) == 3 + 2 + 4
    casts = out.iloc[3:5]
    assert list(casts["pass"]) == ["fw", "bw"] and list(casts["scale"]) == [2.0, 2.0]
    assert casts["bytes"].tolist() == [6 * 36864, 6 * 36864]
    assert out.loc[1, "bytes"] == 2 * ln.loc[0, "bytes"] == 2 * 2 * (2 * 768000 + 2 * 768) * 2 / 2
    ln_casts = out.iloc[5:]
    assert list(ln_casts["pass"]) == ["fw", "fw", "bw", "bw"] and set(ln_casts["bytes"]) == {6 * 768000}
    # an inference table: only the forward weight cast and the norm's forward casts
    inf = with_autocast(pd.concat([c, ln], ignore_index=True))
    assert len(inf) == 2 + 1 + 2 and set(inf["pass"]) == {"fw"}
    # the design adds them only for an autocast item at 16 bits
    h200 = get_device("h200")
    n_plain = anygpu.design([(t, h200, "fp16", 0.0)]).scale.sum()
    n_amp = anygpu.design([(t, h200, "fp16", 0.0, True)]).scale.sum()
    assert n_amp - n_plain == 2 * 2 + 4
    assert anygpu.design([(t, h200, "fp32", 0.0, True)]).scale.sum() == n_plain


def test_no_gemm_beats_its_peak():
    """Hand-computed: a compute factor e^(c) (peak / 100)^a below 1 (c = -1, a = 0: 0.368) is raised
    to 1 for a GEMM (10 us at the peak stays 10 us) but kept for a CUDA-core convolution (Winograd:
    3.68 us)."""
    th = _theta(c_gemm_tensor=-1.0, c_conv_cuda=-1.0, kernel_floor=-30.0)
    d = _design([10.0, 10.0], [0, 0], [1.0, 1.0])
    d.code = np.array([0, 3])
    got = anygpu.kernel_us(th, d)
    assert got == pytest.approx([10.0, 10.0 * np.exp(-1.0)], rel=1e-6)


def test_backward_matrix_kernels_lose_more_on_tensor_cores():
    """Hand-computed: c_b = log 1.2 (every backward matrix kernel), c_bt = log 1.5 (more on tensor
    cores).  Four 10-us compute kernels: a forward tensor-core convolution 10 us, a backward
    tensor-core convolution 10 x 1.2 x 1.5 = 18 us, a backward CUDA-core convolution 10 x 1.2 = 12 us,
    a backward tensor-core GEMM 18 us."""
    n = 4
    d = anygpu.Design(t_c0=np.full(n, 10.0), t_m0=np.zeros(n), occ=np.ones(n), code=np.array([2, 2, 3, 0]),
                      backward=np.array([False, True, True, True]), scale=np.ones(n), log_peak=np.zeros(n),
                      log_bw=np.zeros(n), step=np.zeros(n, dtype=np.int64), n_steps=1, dim_n=np.full(n, 1e9),
                      dim_k=np.full(n, 1e9), h2d_bytes=np.zeros(1), setting=np.zeros(1, dtype=np.int64),
                      pass_code=np.array([0, 1, 1, 1]))
    th = _theta(c_backward=np.log(1.2), c_backward_tensor=np.log(1.5), c_conv_cuda=0.0)
    got = anygpu.kernel_us(th, d)
    assert got == pytest.approx([10.0, 18.0, 12.0, 18.0], rel=1e-6)
