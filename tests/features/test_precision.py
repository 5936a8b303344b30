"""Element types: MACs, FLOPs and parameters by type, and the dominant compute precision.

The quantized models are written by onnxruntime.quantization (the dev extra), as users make them.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import perfseer
from helpers import conv_model, make_model

quantization = pytest.importorskip("onnxruntime.quantization")


def test_float16_graph():
    mm = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    model = make_model([mm], {"x": (("N", 8), np.float16)}, ["y"], {"w": np.zeros((8, 4), np.float16)})
    pg = perfseer.extract(model, batch=2)
    assert pg.precision == "float16" and pg.summary()["precision"] == "float16"
    assert pg.macs_by_dtype == {"float16": 2 * 8 * 4} and pg.params_by_dtype == {"float16": 32}


def test_float32_graph_summary():
    s = perfseer.extract(conv_model(with_fc=True), batch=1).summary()
    assert s["precision"] == "float32" and set(s["macs_by_dtype"]) == {"float32"}
    assert sum(s["macs_by_dtype"].values()) == s["macs"] and sum(s["flops_by_dtype"].values()) == s["flops"]


def lstm_model(path):
    """x (T=5, B=N, I=8) -> LSTM (H=16) -> last hidden state -> MatMul (16 -> 10)."""
    rng = np.random.default_rng(0)
    h, i = 16, 8
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (1, 4 * h, i)), ("R", (1, 4 * h, h)), ("B", (1, 8 * h)), ("W2", (h, 10)))]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes"))
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=h, name="lstm"),
             helper.make_node("Squeeze", ["yh", "axes"], ["hid"], name="sq"),
             helper.make_node("MatMul", ["hid", "W2"], ["out"], name="fc")]
    graph = helper.make_graph(nodes, "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, "N", i])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_dynamically_quantized_lstm(tmp_path):
    # used to crash with KeyError: '' (a declared shape re-bound after its dim_param was cleared)
    lstm_model(tmp_path / "f.onnx")
    quantization.quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=quantization.QuantType.QInt8)
    pg = perfseer.extract(str(tmp_path / "q.onnx"), dims={"N": 4})
    ops = pg.summary()["op_counts"]
    assert ops["DynamicQuantizeLSTM"] == 1 and ops["MatMulInteger"] == 1 and pg.uncovered_ops == {}
    lstm_macs = 5 * 4 * 4 * 16 * (8 + 16)
    assert pg.macs_by_dtype == {"int8": lstm_macs + 4 * 16 * 10} and pg.precision == "int8"
    # the int8 weights are parameters; W2's float scale, read by a plain Mul, is the one float parameter
    assert pg.params_by_dtype == {"int8": 4 * 16 * 8 + 4 * 16 * 16 + 16 * 10, "float32": 8 * 16 + 1}


class _Images(quantization.CalibrationDataReader if hasattr(quantization, "CalibrationDataReader") else object):
    def __init__(self):
        self.batches = iter([{"x": np.random.default_rng(k).standard_normal((1, 3, 8, 8)).astype(np.float32)}
                             for k in range(2)])

    def get_next(self):
        return next(self.batches, None)


@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
def test_statically_quantized_conv(tmp_path, fmt):
    onnx.save(conv_model(batch=1, with_fc=True), tmp_path / "f.onnx")
    quantization.quantize_static(tmp_path / "f.onnx", tmp_path / "q.onnx", _Images(),
                                 quant_format=getattr(quantization.QuantFormat, fmt))
    pg = perfseer.extract(str(tmp_path / "q.onnx"))
    s = pg.summary()
    conv_macs = 4 * 8 * 8 * 27
    # the conv runs on int8 operands in both formats (QDQ: between DequantizeLinear nodes)
    assert s["macs_by_dtype"]["int8"] >= conv_macs and s["precision"] == "int8"
    assert s["params_by_dtype"]["int8"] == 4 * 27 + 10 * 4  # conv and Gemm weights, stored as int8
    if fmt == "QOperator":
        assert s["op_counts"].get("QLinearConv") == 1
    else:
        assert s["op_counts"]["Conv"] == 1 and s["op_counts"]["QuantizeLinear"] >= 1
    assert s["uncovered_ops"] == {}
