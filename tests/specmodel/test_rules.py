"""Per-generation library rules, each against a hand-computed case."""

from __future__ import annotations

import numpy as np
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import kernels as kt
from perfseer.specmodel import rules


def test_pascal_half_runs_fp16_storage_fp32_arithmetic():
    """GTX 1080 Ti: native FP16 0.177 TFLOP/s (1/64), FP32 11.34: a model.half() convolution runs
    at 11.34 TFLOP/s with 2-byte tensors.  Hand computation: a 3x3 conv, 64 -> 64 channels,
    56x56, batch 12: 2 x 12 x 56 x 56 x 64 x 64 x 9 = 2.775e9 FLOPs -> 2.775e9 / 11.34e12 s =
    244.7 us at the FP32 rate (15,680 us at the native FP16 rate)."""
    s = get_device("gtx1080ti")
    assert rules.matrix_peak(s, "fp16", "conv") == pytest.approx(11.34)
    assert rules.unit(s, "fp16", "conv") == "cuda"
    t = kt.conv_rows(12, 64, 64, 3, 56, 56, 1, 1, dtype_bytes=2.0)
    assert float(t["flops"].iloc[0]) == pytest.approx(2 * 12 * 56 * 56 * 64 * 64 * 9)
    for library_rules in (False, True):
        dev = kt.device_frame([s], ["fp16"], ["conv"], library_rules=library_rules)
        t_flop, _ = kt.roofline_us(t, dev)
        assert t_flop[0] == pytest.approx(244.7, rel=1e-3)
    # P100: no tensor cores, native FP16 at twice FP32 (18.7 vs 9.519): the native rate
    assert rules.matrix_peak(get_device("p100"), "fp16", "gemm") == pytest.approx(18.7)


def test_fp32_on_ampere_follows_pytorch_defaults():
    """A100 (FP32 19.5, TF32 156): at fp32 convolutions run TF32 (cudnn.allow_tf32 = True),
    matmuls FP32 (cuda.matmul.allow_tf32 = False); tf32 asked: both TF32.  A 4096^3 GEMM:
    2 x 4096^3 = 1.374e11 FLOPs -> 7,048 us at 19.5 TFLOP/s, 881 us at 156."""
    s = get_device("a100-80gb-sxm")
    assert rules.matrix_peak(s, "fp32", "conv") == pytest.approx(156.0)
    assert rules.matrix_peak(s, "fp32", "gemm") == pytest.approx(19.5)
    assert rules.matrix_peak(s, "tf32", "gemm") == pytest.approx(156.0)
    assert rules.unit(s, "fp32", "conv") == "tensor" and rules.unit(s, "fp32", "gemm") == "cuda"
    g = kt.gemm_rows(1, 4096, 4096, 4096)
    for prec, want in (("fp32", 7048.2), ("tf32", 881.0)):
        t_flop, _ = kt.roofline_us(g, kt.device_frame([s], [prec], ["gemm"], library_rules=True))
        assert t_flop[0] == pytest.approx(want, rel=1e-3)
    # TF32 turned off (cudnn.allow_tf32 = False, as the collection kit measures): FP32 everywhere
    assert rules.matrix_peak(s, rules.FP32_IEEE, "conv") == pytest.approx(19.5)
    assert rules.unit(s, rules.FP32_IEEE, "conv") == "cuda" and rules.peak(s, rules.FP32_IEEE, "vec") == pytest.approx(19.5)
    # Volta has no TF32: fp32 convolutions stay FP32 (V100 SXM2: 15.7)
    assert rules.matrix_peak(get_device("v100"), "fp32", "conv") == pytest.approx(15.7)
    assert rules.matrix_peak(get_device("v100"), "tf32", "gemm") == pytest.approx(15.7)


def test_tensor_cores_only_where_the_precision_has_them():
    """BF16 on a V100 or T4 (FP16 tensor cores only) is stored in 16 bits and multiplied on the
    CUDA cores in FP32 (Volta has no BF16 arithmetic): V100 bf16 GEMM at 15.7, not the 125 of FP16.
    FP8 exists from Ada on; int8 from Turing."""
    v = get_device("v100")
    assert rules.matrix_peak(v, "fp16", "gemm") == pytest.approx(125.0)
    assert rules.unit(v, "bf16", "gemm") == "cuda"
    assert rules.matrix_peak(v, "bf16", "gemm") == pytest.approx(15.7)
    assert rules.has_tensor(get_device("rtx4090"), "fp8") and not rules.has_tensor(get_device("a100"), "fp8")
    assert rules.has_tensor(get_device("t4"), "int8") and not rules.has_tensor(get_device("titan-v"), "int8")
    # H100: every 16-bit precision on tensor cores
    h = get_device("h100-sxm")
    assert rules.matrix_peak(h, "bf16", "gemm") == pytest.approx(989.4)
    # AMD CDNA 3: FP32 GEMMs on the matrix cores
    assert rules.unit(get_device("mi300x"), "fp32", "gemm") == "tensor"


def test_vector_kernels_use_the_cuda_cores():
    s = get_device("gtx1080ti")
    assert rules.vector_peak(s, "fp16") == pytest.approx(11.34)  # pseudo-FP16
    assert rules.vector_peak(get_device("a100"), "fp16") == pytest.approx(2 * 19.492)
    assert rules.peak(get_device("a100"), "fp32", "vec") == pytest.approx(19.492)


def test_unknown_precision_is_refused():
    with pytest.raises(rules.RuleError, match="unknown precision"):
        rules.matrix_precision(get_device("a100"), "fp64", "gemm")


def test_bundled_frame_unchanged_off_pascal():
    """Without library_rules the bundled model's inputs are as before except Pascal's 16 bits."""
    specs = [get_device(n) for n in ("a100", "v100", "rtx4090", "t4")]
    for p in ("fp32", "fp16"):
        dev = kt.device_frame(specs, [p] * 4, ["conv"] * 4)
        assert np.allclose(dev["peak_tflops"], [s.peak(p) for s in specs])
