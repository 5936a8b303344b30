"""Element-wise operators with several inputs (perfseer.features.ops.elementwise).

FLOPs = (inputs - 1) per *output* element (broadcasting counts the broadcast result); Mean:
inputs per element; Where: 1 per element.  No MACs; memory = inputs + weights + output bytes.
"""

import numpy as np
import pytest
from onnx import TensorProto, helper

import perfseer
from helpers import one_node
from op_testing import BOOL, F32, I32, I64, check

# x (2, 3, 4) op c (3, 1) -> (2, 3, 4): c is a broadcast initializer
E = 2 * 3 * 4
C = 3 * 1

# op -> (input dtype, output bytes per element, extra attributes)
BINARY = {
    "Add": (np.float32, F32, {}), "Sub": (np.float32, F32, {}), "Mul": (np.float32, F32, {}),
    "Div": (np.float32, F32, {}), "Pow": (np.float32, F32, {}), "Max": (np.float32, F32, {}),
    "Min": (np.float32, F32, {}), "Sum": (np.float32, F32, {}),
    "Mod": (np.int64, I64, {}),
    "Equal": (np.float32, BOOL, {}), "Less": (np.float32, BOOL, {}), "Greater": (np.float32, BOOL, {}),
    "LessOrEqual": (np.float32, BOOL, {}), "GreaterOrEqual": (np.float32, BOOL, {}),
    "And": (np.bool_, BOOL, {}), "Or": (np.bool_, BOOL, {}), "Xor": (np.bool_, BOOL, {}),
    "BitwiseAnd": (np.int32, I32, {}), "BitwiseOr": (np.int32, I32, {}), "BitwiseXor": (np.int32, I32, {}),
}
OPS = [*BINARY, "BitShift", "Mean", "Where"]


@pytest.mark.parametrize("op", list(BINARY))
def test_binary_broadcast(op):
    dtype, out_size, attrs = BINARY[op]
    size = np.dtype(dtype).itemsize
    pg = one_node(op, {"x": ((2, 3, 4), dtype)}, {"c": np.ones((3, 1), dtype)}, **attrs)
    # a floating-point initializer is a weight; an integer or boolean one counts as an input
    is_float = np.issubdtype(np.dtype(dtype), np.floating)
    check(pg, op, flops=(2 - 1) * E, macs=0, input_bytes=E * size + (0 if is_float else C * size),
          weight_bytes=C * size if is_float else 0,
          output_bytes=E * out_size, memory_access_bytes=E * size + C * size + E * out_size)


def test_bitshift_unsigned():
    # BitShift is defined on unsigned integers only: x (2, 3, 4) uint32 >> 1
    node = helper.make_node("BitShift", ["x", "s"], ["y"], name="node", direction="RIGHT")
    graph = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.UINT32, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", 0, None)],
                              initializer=[helper.make_tensor("s", TensorProto.UINT32, [1], [1])])
    pg = perfseer.extract(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))
    check(pg, "BitShift", flops=(2 - 1) * E, memory_access_bytes=E * 4 + 1 * 4 + E * 4)


def test_flops_follow_the_broadcast_output():
    # x (2, 1, 4) + c (3, 1) -> (2, 3, 4): one add per output element, not per input element
    pg = one_node("Add", {"x": (2, 1, 4)}, {"c": np.ones((3, 1), np.float32)})
    check(pg, "Add", flops=2 * 3 * 4, memory_access_bytes=(2 * 1 * 4 + 3 * 1 + 2 * 3 * 4) * F32)


def test_two_activations():
    pg = one_node("Mul", {"a": (2, 3, 4), "b": (2, 3, 4)})
    check(pg, "Mul", flops=E, weight_bytes=0, memory_access_bytes=3 * E * F32)


@pytest.mark.parametrize("op", ["Sum", "Max", "Min"])
def test_variadic_three_inputs(op):
    # three inputs: 2 operations per output element
    pg = one_node(op, {"a": (2, 3, 4), "b": (2, 3, 4)}, {"c": np.ones(4, np.float32)})
    check(pg, op, flops=(3 - 1) * E, memory_access_bytes=(E + E + 4 + E) * F32)


@pytest.mark.parametrize("op", ["Sum", "Max", "Min"])
def test_variadic_single_input_is_a_copy(op):
    pg = one_node(op, {"a": (2, 3, 4)})
    check(pg, op, flops=(1 - 1) * E, memory_access_bytes=2 * E * F32)


def test_mean():
    # (a + b + c) / 3: 2 adds and a division per element
    pg = one_node("Mean", {"a": (2, 3, 4), "b": (2, 3, 4)}, {"c": np.ones(4, np.float32)})
    check(pg, "Mean", flops=3 * E, macs=0, memory_access_bytes=(E + E + 4 + E) * F32)


def test_where():
    # cond (2, 3, 4) bool, x (4,) float, y scalar float -> (2, 3, 4): one select per element
    pg = one_node("Where", {"cond": ((2, 3, 4), np.bool_)},
                  {"x": np.ones(4, np.float32), "y": np.array(0.0, np.float32)})
    check(pg, "Where", flops=E, macs=0, memory_access_bytes=E * BOOL + (4 + 1) * F32 + E * F32)
