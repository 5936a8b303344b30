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
  is ``False`` since PyTorch 1.12 (matmuls run FP32 on the CUDA cores).  Asking ``tf32`` sets both;
  :data:`FP32_IEEE` clears both (``cudnn.allow_tf32 = False``; PyTorch 2.9's ``fp32_precision =
  "ieee"``): FP32 everywhere, as perfseer's collection kit measures its ``fp32`` steps.
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
FP32_IEEE = "fp32-ieee"  # FP32 with TF32 off for convolutions too (torch.backends.cudnn.allow_tf32 = False)
PRECISIONS = ("fp32", "tf32", "fp16", "bf16", FP32_IEEE)


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
    defaults: ``fp32`` convolutions become ``tf32`` on Ampere and later (cuDNN's default);
    :data:`FP32_IEEE` stays ``fp32`` (TF32 turned off)."""
    if precision not in PRECISIONS:
        raise RuleError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISIONS)}")
    if precision == FP32_IEEE:
        return "fp32"
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


# generation -> process node, nm (the foundry's name: TSMC 16FF Pascal, 12FFN Volta/Turing, Samsung 8N
# GA10x (GA100 is TSMC N7: Ampere is taken at 8), TSMC 4N Ada/Hopper, 4NP Blackwell; AMD CDNA N7, N6, N5)
PROCESS_NM = {"kepler": 28.0, "maxwell": 28.0, "pascal": 16.0, "volta": 12.0, "turing": 12.0, "ampere": 8.0,
              "ada": 4.0, "hopper": 4.0, "blackwell": 4.0, "cdna1": 7.0, "cdna2": 6.0, "cdna3": 5.0}


def power_per_flop(spec) -> float:
    """The board power the sheet gives per unit of FP32 peak and of process node, W / (TFLOP/s nm):
    how well the power limit feeds the SMs at the boost clock (the energy of an operation shrinks
    about with the node).  Full-power boards sit at 1.2-2.6 (RTX 4090 1.36, V100 1.49, H200 2.61);
    70-75 W and Max-Q boards well below (T4 0.72, P4 0.82, RTX PRO 6000 Max-Q 0.68), where the
    sustained clock is lower than the boost clock.  ``inf`` (never power-limited) where the sheet
    gives no TDP or the generation's node is unknown."""
    nm = PROCESS_NM.get(generation(spec))
    if not nm or not spec.tdp_w:
        return float("inf")
    return float(spec.tdp_w) / (float(spec.peak_tflops["fp32"]) * nm)

