"""Model-local functions and constant shapes are bounded before anything is expanded: a clear
refusal for a recursive function, a call of the wrong arity, a fan-out past the node budget, a
chain nested too deep, and a constant shape of 2^40 elements."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from perfseer.errors import PerfseerError, ShapeError, UnsupportedModelError
from perfseer.graph.extract import extract_graph
from perfseer.graph.functions import MAX_FUNCTION_DEPTH, count_inlined, inline_functions
from perfseer.sources.load import load_skeleton

DOMAIN = "local"


def _function(name, body_calls, inputs=("a",), outputs=("b",)):
    """A function whose body chains ``body_calls`` (op names of the local domain, or ``Relu``)."""
    nodes, prev = [], inputs[0]
    for i, op in enumerate(body_calls):
        out = outputs[0] if i == len(body_calls) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [prev], [out], domain="" if op == "Relu" else DOMAIN))
        prev = out
    return helper.make_function(DOMAIN, name, list(inputs), list(outputs), nodes,
                                [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def _model(functions, call="F", call_inputs=("x",), call_outputs=("y",)):
    node = helper.make_node(call, list(call_inputs), list(call_outputs), domain=DOMAIN)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(g, functions=functions,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def _extract(model):
    return extract_graph(load_skeleton(model), batch=2)


def test_a_valid_function_is_inlined_and_extracted():
    graph = _extract(_model([_function("F", ["Relu", "G"]), _function("G", ["Relu", "Relu"])]))
    assert [n.op_type for n in graph.nodes] == ["Relu"] * 3


def test_a_recursive_function_is_refused():
    with pytest.raises(UnsupportedModelError, match="calls itself"):
        _extract(_model([_function("F", ["Relu", "F"])]))


def test_mutual_recursion_is_refused():
    with pytest.raises(UnsupportedModelError, match="calls itself .*F -> G -> F"):
        _extract(_model([_function("F", ["G"]), _function("G", ["F"])]))


def test_a_call_with_the_wrong_arity_is_refused():
    with pytest.raises(UnsupportedModelError, match="declares 1 and 1"):
        _extract(_model([_function("F", ["Relu"])], call_inputs=("x", "x", "x")))


def test_a_fan_out_past_the_node_budget_is_refused_before_inlining():
    # F0 calls F1 twice, F1 calls F2 twice, ...: 2^24 Relus from a file of a few hundred bytes
    fs = [_function(f"F{i}", [f"F{i + 1}", f"F{i + 1}"]) for i in range(24)] + [_function("F24", ["Relu"])]
    model = _model(fs, call="F0")
    assert len(model.SerializeToString()) < 4096
    with pytest.raises(UnsupportedModelError, match="more than"):
        _extract(model)
    assert count_inlined(_model(fs[14:], call="F14"), "m") == 2**10


def test_a_chain_nested_too_deep_is_refused():
    depth = MAX_FUNCTION_DEPTH + 8
    fs = [_function(f"F{i}", [f"F{i + 1}"]) for i in range(depth)] + [_function(f"F{depth}", ["Relu"])]
    with pytest.raises(UnsupportedModelError, match="nest more than"):
        inline_functions(_model(fs, call="F0"), "m")


def _constant_of_shape(size: int):
    shape = helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([size], dtype=np.int64)))
    c = helper.make_node("ConstantOfShape", ["s"], ["c"])
    add = helper.make_node("Add", ["x", "c"], ["y"])
    g = helper.make_graph([shape, c, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_constant_shape_of_2_to_the_40_is_refused_before_inference():
    model = _constant_of_shape(2**40)
    assert len(model.SerializeToString()) < 200
    with pytest.raises(UnsupportedModelError, match=r"ConstantOfShape node .*\(1.1e\+12 elements"):
        _extract(model)


def test_shape_inference_runs_under_a_memory_limit(monkeypatch):
    monkeypatch.delenv("PERFSEER_SHAPE_INFERENCE", raising=False)
    with pytest.raises(ShapeError, match="memory limit"):
        _extract(_constant_of_shape(2**31))  # under the constant budget, over the helper's 4 GB


def test_every_refusal_is_a_perfseer_error_never_a_traceback():
    bad = [_model([_function("F", ["F"])]), _model([_function("F", ["Relu"])], call_outputs=("y", "z")),
           _constant_of_shape(2**50)]
    for model in bad:
        with pytest.raises(PerfseerError):
            _extract(model)
