"""Element-wise unary operators (perfseer.features.ops.activation), against hand-computed costs.

FLOPs = per-element cost * output elements; no MACs; memory = input bytes + output bytes.
The per-element costs below are counted by hand from the module docstring's convention
(a transcendental function is 1 FLOP, composites count their elementary steps).
"""

import numpy as np
import pytest

from helpers import one_node
from op_testing import BOOL, F16, F32, I32, check

SHAPE = (2, 3, 4)
E = 2 * 3 * 4  # elements of SHAPE

# op -> (FLOPs per element, how they are counted)
UNARY = {
    "Relu": (1, "max(x, 0)"),
    "LeakyRelu": (2, "compare, multiply"),
    "ThresholdedRelu": (1, "compare"),
    "Elu": (3, "compare, exp, sub/scale"),
    "Selu": (4, "compare, exp, sub, scale"),
    "Celu": (4, "compare, div, exp, scale"),
    "Sigmoid": (4, "neg, exp, add, div"),
    "HardSigmoid": (3, "mul, add, clip"),
    "HardSwish": (5, "add, 2 compares, mul, div"),
    "Tanh": (1, "transcendental"),
    "Softplus": (3, "exp, add, log"),
    "Softsign": (3, "abs, add, div"),
    "Mish": (5, "exp, add, log, tanh, mul"),
    "Erf": (1, ""), "Exp": (1, ""), "Log": (1, ""), "Sqrt": (1, ""), "Reciprocal": (1, ""),
    "Neg": (1, ""), "Abs": (1, ""), "Sin": (1, ""), "Cos": (1, ""), "Tan": (1, ""), "Asin": (1, ""),
    "Acos": (1, ""), "Atan": (1, ""), "Sinh": (1, ""), "Cosh": (1, ""), "Asinh": (1, ""),
    "Acosh": (1, ""), "Atanh": (1, ""), "Floor": (1, ""), "Ceil": (1, ""), "Round": (1, ""),
    "Sign": (1, ""),
    "Shrink": (2, "compare, add/sub"),
    "Clip": (2, "max, min (no bounds given here: still counted)"),
    "Dropout": (0, "inference: identity"),
}
# Unary ops whose input or output is not float32: op -> (input dtype, output bytes per element, FLOPs)
TYPED = {
    "Not": (np.bool_, BOOL, 1),
    "BitwiseNot": (np.int32, I32, 1),
    "IsNaN": (np.float32, BOOL, 1),
    "IsInf": (np.float32, BOOL, 1),
}
OPS = [*UNARY, *TYPED, "Swish", "PRelu", "Cast", "CastLike", "Gelu"]


@pytest.mark.parametrize("op", list(UNARY))
def test_float_unary(op):
    per, _why = UNARY[op]
    pg = one_node(op, {"x": SHAPE})
    check(pg, op, flops=per * E, macs=0, input_bytes=E * F32, output_bytes=E * F32, weight_bytes=0,
          memory_access_bytes=(E + E) * F32)


@pytest.mark.parametrize("op", list(TYPED))
def test_typed_unary(op):
    dtype, out_size, per = TYPED[op]
    in_size = np.dtype(dtype).itemsize
    pg = one_node(op, {"x": (SHAPE, dtype)})
    check(pg, op, flops=per * E, macs=0, memory_access_bytes=E * in_size + E * out_size)


def test_swish_opset24():
    # x * sigmoid(x): sigmoid 4 + mul 1
    pg = one_node("Swish", {"x": SHAPE}, opset=24)
    check(pg, "Swish", flops=5 * E, memory_access_bytes=2 * E * F32)


def test_prelu_reads_its_slope():
    # per-channel slope (4,) broadcast on the last axis: compare, multiply
    pg = one_node("PRelu", {"x": SHAPE}, {"slope": np.zeros(4, np.float32)})
    check(pg, "PRelu", flops=2 * E, weight_bytes=4 * F32, params=4, memory_access_bytes=(E + 4 + E) * F32)


def test_clip_with_bounds():
    pg = one_node("Clip", {"x": SHAPE}, {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)})
    check(pg, "Clip", flops=2 * E, memory_access_bytes=(E + 1 + 1 + E) * F32)


def test_dropout_with_mask():
    # inference Dropout: no arithmetic; Y float32 and the mask (bool) are both written
    pg = one_node("Dropout", {"x": SHAPE}, n_outputs=2)
    check(pg, "Dropout", flops=0, output_bytes=E * F32 + E * BOOL, memory_access_bytes=E * F32 + E * F32 + E * BOOL)


def test_cast_changes_output_bytes():
    # float32 -> float16 (TensorProto.FLOAT16 = 10): 0 FLOPs, reads 4 and writes 2 bytes per element
    pg = one_node("Cast", {"x": SHAPE}, to=10)
    check(pg, "Cast", flops=0, macs=0, input_bytes=E * F32, output_bytes=E * F16,
          memory_access_bytes=E * F32 + E * F16)


def test_castlike():
    # cast to the type of a float16 (1,) tensor; its bytes count as a (tiny) weight read
    pg = one_node("CastLike", {"x": SHAPE}, {"like": np.zeros(1, np.float16)})
    check(pg, "CastLike", flops=0, output_bytes=E * F16, memory_access_bytes=E * F32 + 1 * F16 + E * F16)


@pytest.mark.parametrize("approximate, per, mode", [
    ("none", 5, 0),  # 0.5 x (1 + erf(x / sqrt 2)): div, erf, add, mul, mul
    ("tanh", 9, 1),  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
])
def test_gelu(approximate, per, mode):
    pg = one_node("Gelu", {"x": SHAPE}, approximate=approximate)
    check(pg, "Gelu", flops=per * E, mode=mode, memory_access_bytes=2 * E * F32)
