"""Max-batch search, MIG advice and the ONNX liveness fallback."""

import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch import nn

from perfseer.memory.api import max_batch_for, memory, mig_advice, resolve_model, trace_model
from perfseer.memory.fit import affine_trace
from perfseer.memory.onnx_liveness import liveness_trace
from perfseer.memory.step import StepConfig

MIB = 1 << 20


def net():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def test_traces_are_affine_in_the_batch():
    src = resolve_model(net(), input_shape=(3, 32, 32))
    cfg = StepConfig(phase="train", optimizer="sgd")
    model = affine_trace({b: trace_model(src, b, cfg) for b in (2, 3, 5)})
    assert model is not None
    at7 = trace_model(src, 7, cfg)
    assert [a.nbytes for a in model.at(7).allocations] == [a.nbytes for a in at7.allocations]


def test_max_batch_is_the_last_batch_that_fits():
    kw = dict(phase="train", optimizer="sgd", input_shape=(3, 32, 32), context_mib=0, capacity_gib=48 / 1024)
    mb = max_batch_for(net(), **kw)
    assert mb.affine and mb.batch > 5
    assert memory(net(), batch=mb.batch, **kw).fits
    assert not memory(net(), batch=mb.batch + 1, **kw).fits


def test_oom_is_a_result_not_an_error():
    est = memory(net(), batch=64, phase="train", optimizer="sgd", input_shape=(3, 32, 32), capacity_gib=0.01)
    assert est.fits is False and est.total > 0.01 * (1 << 30)


def test_breakdown_sums_to_total():
    est = memory(net(), batch=4, phase="train", optimizer="adamw", input_shape=(3, 32, 32))
    assert sum(est.breakdown.values()) == est.total
    assert est.total == est.peak_reserved + est.context
    assert est.to_dict()["units"] == "bytes"


def test_mig_advice_picks_the_smallest_profile_that_fits():
    src = resolve_model(net(), input_shape=(3, 32, 32))
    trace = trace_model(src, 2, StepConfig(phase="infer"))
    adv = mig_advice(trace, ["a100-40gb"])
    assert adv[0]["device"] == "a100-40gb-sxm" and adv[0]["smallest"] == "1g.5gb"
    huge = mig_advice(trace, ["a100-40gb"], context_mib=6 * 1024)  # a 6 GiB context fits no 5 GB slice
    assert huge[0]["smallest"] == "2g.10gb"


def _relu_chain() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 1024])
    nodes = [helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Relu", ["y1"], ["y2"]),
             helper.make_node("Relu", ["y2"], ["z"])]
    return helper.make_model(helper.make_graph(nodes, "chain", [x], [z]), opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_liveness_by_hand():
    t = liveness_trace(_relu_chain(), batch=2)
    # x (8 KiB) stays; each node holds its input and output: peak x + 2 activations
    assert t.peak()[0] == 3 * 2 * 1024 * 4


def test_onnx_training_is_refused_with_the_fix():
    from perfseer.memory.step import MemoryConfigError

    with pytest.raises(MemoryConfigError, match="--phase infer"):
        memory(_relu_chain(), batch=2, phase="train")
    est = memory(_relu_chain(), batch=2, phase="infer")
    assert est.method == "onnx-liveness" and est.peak_tensor_bytes == 3 * 2 * 1024 * 4


def test_perfseer_memory_is_callable():
    import perfseer

    est = perfseer.memory(net(), batch=2, phase="infer", input_shape=(3, 32, 32))
    assert est.method == "simulation" and est.breakdown["weights"] > 0


def test_onnx_views_share_their_input_buffer():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 1024])
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [-1, 1024])
    nodes = [helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Flatten", ["y1"], ["v"]),
             helper.make_node("Reshape", ["v", "s"], ["w"]), helper.make_node("Relu", ["w"], ["z"])]
    g = helper.make_graph(nodes, "views", [x], [z], initializer=[shape])
    t = liveness_trace(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), batch=2)
    # x, y1 (= v = w) and z: three 8 KiB buffers at the last Relu, the views add nothing;
    # the shape initializer s is 2 int64 = 16 B, and so is the one of the Reshape that the
    # canonical PerfGraph writes for the Flatten (perfseer.graph.canonical)
    assert t.peak()[0] == 3 * 2 * 1024 * 4 + 16 + 16
