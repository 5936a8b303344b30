"""What the libraries run per GPU generation: which unit (tensor cores or CUDA cores) and which
peak a kernel of a given precision reaches.

A spec sheet gives peaks per precision; which of them a PyTorch kernel reaches depends on the
generation and on the library defaults:

- **Tensor cores only where the precision has them** (:data:`TENSOR_PRECISIONS`): FP16 from
  Volta, BF16 and TF32 from Ampere, FP8 from Ada/Hopper.  Elsewhere the precision runs on the
  CUDA cores: BF16 on Volta/Turing is stored in 16 bits and multiplied in FP32 (cuBLAS's
  ``CUBLAS_COMPUTE_32F``), TF32 asked of a pre-Ampere GPU is plain FP32.
- **Pascal's ``model.half()``**: GP102/GP104 (GTX 1080 Ti, Titan Xp, Titan X, P4) execute native
  FP16 arithmetic at 1/64 of FP32, but cuDNN and cuBLAS run an FP16 model there with FP16
  storage and FP32 arithmetic ("pseudo-FP16", ``CUDNN_DATA_HALF`` with an FP32 compute type),
  at the FP32 rate with half the bytes.  So a 16-bit kernel without tensor cores runs at the
  better of the native 16-bit rate and the FP32 rate (P100's native FP16 is twice its FP32).
- **FP32 on Ampere and later follows PyTorch's defaults**: ``torch.backends.cudnn.allow_tf32``
  is ``True`` (convolutions run TF32 on tensor cores) and ``torch.backends.cuda.matmul.allow_tf32``
  is ``False`` since PyTorch 1.12 (matmuls run FP32 on the CUDA cores).  Asking ``tf32`` sets both.
- **Vector (memory-bound) kernels** run on the CUDA cores: FP32 at the FP32 peak; 16-bit at
  twice it where the generation has packed half arithmetic at 2x (P100, Volta, Turing, Ampere
  and later data-centre parts with the FP16 rate given), at the FP32 rate elsewhere.

:func:`matrix_peak` and :func:`vector_peak` apply them; :func:`unit` names the unit.
"""

from __future__ import annotations

from perfseer.errors import PerfseerError

# generation -> precisions with matrix (tensor-core / matrix-core) units
TENSOR_PRECISIONS = {
    "maxwell": (), "pascal": (), "volta": ("fp16",), "turing": ("fp16", "int8"),
    "ampere": ("tf32", "fp16", "bf16", "int8"), "ada": ("tf32", "fp16", "bf16", "fp8", "int8"),
    "hopper": ("tf32", "fp16", "bf16", "fp8", "int8"), "blackwell": ("tf32", "fp16", "bf16", "fp8", "int8"),
    "cdna1": ("fp32", "fp16", "bf16", "int8"), "cdna2": ("fp32", "fp16", "bf16", "int8"),
    "cdna3": ("fp32", "tf32", "fp16", "bf16", "fp8", "int8"),
}
# generations where cuDNN runs FP32 convolutions as TF32 by default (PyTorch: cudnn.allow_tf32 = True)
TF32_CONV_DEFAULT = ("ampere", "ada", "hopper", "blackwell")
MATRIX_FAMILIES = ("gemm", "conv")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


class RuleError(PerfseerError):
    """A precision the rules do not know."""


def generation(spec) -> str:
    """The spec's generation (its ``architecture``, lower case; ``""`` where not given)."""
    return (spec.architecture or "").lower()


def has_tensor(spec, precision: str) -> bool:
    """Whether ``spec`` has matrix units for ``precision``.  A generation the table does not list
    is judged from the sheet: a 16-bit/TF32 peak above twice the FP32 one is a matrix unit's."""
    gen = generation(spec)
    if gen in TENSOR_PRECISIONS:
        return precision in TENSOR_PRECISIONS[gen]
    p = spec.peak_tflops.get(precision)
    return bool(p) and precision != "fp32" and p > 2.01 * spec.peak_tflops["fp32"]


def matrix_precision(spec, precision: str, family: str) -> str:
    """The precision a GEMM/convolution asked at ``precision`` runs at on ``spec`` under PyTorch's
    defaults: ``fp32`` convolutions become ``tf32`` on Ampere and later (cuDNN's default)."""
    if precision not in PRECISIONS:
        raise RuleError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    if precision == "fp32" and family == "conv" and generation(spec) in TF32_CONV_DEFAULT:
        return "tf32"
    return precision


def unit(spec, precision: str, family: str) -> str:
    """``tensor`` or ``cuda``: the unit a kernel of ``family`` at ``precision`` runs on."""
    if family not in MATRIX_FAMILIES:
        return "cuda"
    p = matrix_precision(spec, precision, family)
    if p == "fp32":
        return "tensor" if has_tensor(spec, "fp32") and spec.peak_tflops.get("fp32_matrix") else "cuda"
    return "tensor" if has_tensor(spec, p) else "cuda"


def vector_peak(spec, precision: str) -> float:
    """TFLOP/s of a CUDA-core (vector) kernel at ``precision``: the FP32 peak; at 16 bits twice it
    where the sheet's 16-bit rate without tensor cores is at least that (packed half arithmetic),
    else the FP32 rate (Pascal's pseudo-FP16)."""
    fp32 = float(spec.peak_tflops["fp32"])
    if precision in ("fp16", "bf16"):
        native = spec.peak_tflops.get(precision)
        if has_tensor(spec, precision):  # tensor-core GPUs have packed FP16 on the CUDA cores
            return 2.0 * fp32
        if native and native >= 2.0 * fp32 * 0.95:  # P100: native FP16 at (about) twice FP32
            return float(native)
        return fp32
    return fp32


def matrix_peak(spec, precision: str, family: str) -> float:
    """TFLOP/s a GEMM (``family="gemm"``) or convolution (``"conv"``) at ``precision`` reaches on
    ``spec``, by the rules of the module docstring."""
    p = matrix_precision(spec, precision, family)
    fp32 = float(spec.peak_tflops["fp32"])
    if p == "fp32":
        return float(spec.peak_tflops.get("fp32_matrix") or fp32) if has_tensor(spec, "fp32") else fp32
    if has_tensor(spec, p):
        return float(spec.peak_tflops.get(p) or fp32)
    return vector_peak(spec, p) if p in ("fp16", "bf16") else fp32


def peak(spec, precision: str, family: str) -> float:
    """The peak TFLOP/s of a kernel of ``family`` at ``precision`` on ``spec``."""
    return matrix_peak(spec, precision, family) if family in MATRIX_FAMILIES else vector_peak(spec, precision)


# PyTorch (``use_cudnn_depthwise``, cuDNN >= 8.2; ``supportsDepthwiseConvolutionWithCuDNN``: Volta
# and later) hands an FP16 depthwise convolution to cuDNN for these kernel sides, at stride 1 with at
# least this many channels; every other one runs PyTorch's own direct kernels (``conv_depthwise2d``)
CUDNN_DEPTHWISE_SIDES = (1.0, 3.0, 5.0)
CUDNN_DEPTHWISE_CHANNELS = 32
CUDNN_DEPTHWISE_GENERATIONS = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")


def depthwise_cudnn(spec, precision: str, kernel, stride_one, channels):
    """Whether each depthwise convolution (``kernel`` its side, ``stride_one`` whether its stride
    is 1, ``channels`` its channels) runs in cuDNN rather than PyTorch's direct kernels: FP16,
    a 1x1, 3x3 or 5x5 kernel, stride 1, at least 32 channels, on Volta or later."""
    import numpy as np  # deferred: the rest of the module is plain Python

    k = np.asarray(kernel, float)
    if precision != "fp16" or generation(spec) not in CUDNN_DEPTHWISE_GENERATIONS:
        return np.zeros(k.shape, dtype=bool)
    return np.isin(k, CUDNN_DEPTHWISE_SIDES) & np.asarray(stride_one, bool) & (np.asarray(channels, float)
                                                                               >= CUDNN_DEPTHWISE_CHANNELS)


def depthwise_tap_rate(spec) -> float:
    """Taps (one multiply-add with its load) per microsecond a direct depthwise kernel is costed
    at: 32 per SM per clock (one warp-wide load per clock), whatever the precision."""
    clock = spec.clock_mhz or float(spec.peak_tflops["fp32"]) * 1e6 / (2.0 * spec.sms * (spec.cores_per_sm or 128))
    return 32.0 * spec.sms * float(clock)
