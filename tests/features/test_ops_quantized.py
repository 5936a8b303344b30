"""Quantized operators (perfseer.features.ops.quantized), against hand-computed costs.

MACs as for the float operator; re-quantising 4 FLOPs per output element, de-quantising 2,
dynamic quantization 6 per element.  Integer weights count as parameters, scales and zero points
do not; MACs between 8-bit integers are reported as int8.
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import perfseer
from op_testing import check

OPS = ["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "ConvInteger",
       "QLinearMatMul", "MatMulInteger", "com.microsoft::MatMulIntegerToFloat",
       "com.microsoft::DynamicQuantizeMatMul", "com.microsoft::QGemm", "com.microsoft::QLinearAdd",
       "com.microsoft::QLinearMul", "com.microsoft::QLinearGlobalAveragePool", "com.microsoft::DynamicQuantizeLSTM"]

U8, I8, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.FLOAT
SCALE = np.array(0.1, np.float32)
ZP_U8, ZP_I8 = np.array(0, np.uint8), np.array(0, np.int8)


def quant_node(op, inputs, inits, domain="", n_outputs=1, **attrs) -> perfseer.PerfGraph:
    """One ``op`` node; ``inputs``: name -> (shape, elem type); ``inits``: name -> array; order as given."""
    names = [*inputs, *inits]
    order = attrs.pop("order", names)
    outs = [f"y{i}" for i in range(n_outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, order, outs, name="node", domain=domain, **attrs)], "q",
        [helper.make_tensor_value_info(n, t, list(s)) for n, (s, t) in inputs.items()],
        [helper.make_tensor_value_info(o, 0, None) for o in outs],
        initializer=[numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    opsets = [helper.make_opsetid("", 20)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return perfseer.extract(helper.make_model(graph, opset_imports=opsets))


def w8(*shape):
    return np.ones(shape, np.int8)


def test_quantize_dequantize():
    pg = quant_node("QuantizeLinear", {"x": ((2, 3), F)}, {"s": SCALE, "z": ZP_U8})
    check(pg, "QuantizeLinear", flops=4 * 6, output_bytes=6)
    pg = quant_node("DequantizeLinear", {"x": ((2, 3), I8)}, {"s": SCALE, "z": ZP_I8})
    check(pg, "DequantizeLinear", flops=2 * 6, output_bytes=6 * 4)
    pg = quant_node("DynamicQuantizeLinear", {"x": ((2, 3), F)}, {}, n_outputs=3)
    check(pg, "DynamicQuantizeLinear", flops=6 * 6)


def test_qlinear_conv_counts_int8_macs_and_int8_weights():
    # x (1, 2, 5, 5) uint8, w (3, 2, 3, 3) int8, int32 bias -> y (1, 3, 3, 3) uint8: 27 outputs
    pg = quant_node("QLinearConv", {"x": ((1, 2, 5, 5), U8)},
                    {"xs": SCALE, "xz": ZP_U8, "w": w8(3, 2, 3, 3), "ws": SCALE, "wz": ZP_I8, "ys": SCALE,
                     "yz": ZP_U8, "b": np.zeros(3, np.int32)}, kernel_shape=[3, 3])
    macs = 27 * 2 * 9
    check(pg, "QLinearConv", macs=macs, flops=2 * macs + 4 * 27 + 27, kernel_h=3, in_features=2, out_features=3,
          has_bias=1, params=54 + 3, output_bytes=27)
    assert pg.params == 57  # int8 weights and the int32 bias; scales and zero points are not parameters
    assert pg.macs_by_dtype == {"int8": macs} and pg.precision == "int8"
    assert pg.params_by_dtype == {"int8": 54, "int32": 3}


def test_conv_integer():
    pg = quant_node("ConvInteger", {"x": ((1, 2, 5, 5), U8)}, {"w": w8(3, 2, 3, 3)})
    check(pg, "ConvInteger", macs=486, flops=972, output_bytes=27 * 4)  # int32 output


def test_qlinear_matmul_and_matmul_integer():
    inits = {"as": SCALE, "az": ZP_U8, "b": w8(4, 3), "bs": SCALE, "bz": ZP_I8, "ys": SCALE, "yz": ZP_U8}
    pg = quant_node("QLinearMatMul", {"a": ((2, 4), U8)}, inits)
    check(pg, "QLinearMatMul", macs=24, flops=48 + 4 * 6, in_features=4, out_features=3, mm_m=2)
    pg = quant_node("MatMulInteger", {"a": ((2, 4), U8)}, {"b": w8(4, 3)})
    check(pg, "MatMulInteger", macs=24, flops=48, output_bytes=6 * 4)
    assert pg.precision == "int8"


def test_microsoft_matmuls():
    pg = quant_node("MatMulIntegerToFloat", {"a": ((2, 4), U8)}, {"b": w8(4, 3), "as": SCALE, "bs": SCALE},
                    domain="com.microsoft")
    check(pg, "MatMulIntegerToFloat", macs=24, flops=48 + 2 * 6, output_bytes=6 * 4)  # float output
    pg = quant_node("DynamicQuantizeMatMul", {"a": ((2, 4), F)}, {"b": w8(4, 3), "bs": SCALE},
                    domain="com.microsoft")
    check(pg, "DynamicQuantizeMatMul", macs=24, flops=48 + 2 * 6 + 6 * 8)
    # A is quantized at run time, so the product is an integer one
    assert pg.precision == "int8" and pg.params_by_dtype == {"int8": 12}
    pg = quant_node("QGemm", {"a": ((2, 4), U8)},
                    {"as": SCALE, "az": ZP_U8, "b": w8(3, 4), "bs": SCALE, "bz": ZP_I8, "c": np.zeros(3, np.int32),
                     "ys": SCALE, "yz": ZP_U8}, domain="com.microsoft", transB=1)
    check(pg, "QGemm", macs=24, flops=48 + 4 * 6 + 6, in_features=4, out_features=3, has_bias=1)


def test_microsoft_elementwise_and_pool():
    ins = {"a": ((2, 3), U8), "b": ((2, 3), U8)}
    inits = {"as": SCALE, "az": ZP_U8, "bs": SCALE, "bz": ZP_U8, "cs": SCALE, "cz": ZP_U8}
    order = ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]
    for op in ("QLinearAdd", "QLinearMul"):
        pg = quant_node(op, ins, inits, domain="com.microsoft", order=order)
        check(pg, op, flops=9 * 6, output_bytes=6)
    pg = quant_node("QLinearGlobalAveragePool", {"x": ((1, 3, 4, 4), U8)},
                    {"xs": SCALE, "xz": ZP_U8, "ys": SCALE, "yz": ZP_U8}, domain="com.microsoft")
    check(pg, "QLinearGlobalAveragePool", flops=48 + 6 * 3, axis_size=16, in_features=3, output_bytes=3)


def test_dynamic_quantize_lstm():
    # X (T=5, B=2, I=3), H = 4: W (1, 3, 16), R (1, 4, 16) int8, stored transposed; bias (1, 32)
    t, b, i, h = 5, 2, 3, 4
    inits = {"w": w8(1, i, 4 * h), "r": w8(1, h, 4 * h), "bias": np.zeros((1, 8 * h), np.float32),
             "ws": np.full(1, 0.1, np.float32), "wz": np.zeros(1, np.int8), "rs": np.full(1, 0.1, np.float32),
             "rz": np.zeros(1, np.int8)}
    order = ["x", "w", "r", "bias", "", "", "", "", "ws", "wz", "rs", "rz"]
    pg = quant_node("DynamicQuantizeLSTM", {"x": ((t, b, i), F)}, inits, domain="com.microsoft", n_outputs=3,
                    order=order, hidden_size=h)
    macs = t * b * 4 * h * (i + h)
    flops = 2 * macs + t * b * h * (18 + 8) + 6 * t * b * (i + h)
    check(pg, "DynamicQuantizeLSTM", macs=macs, flops=flops, in_features=i, out_features=h, axis_size=t)
    assert pg.graph.tensors["y0"].shape == (t, 1, b, h)
    assert pg.params_by_dtype == {"int8": 3 * 16 + 4 * 16, "float32": 32}  # scales, zero points: not parameters
    assert pg.macs_by_dtype == {"int8": macs}
