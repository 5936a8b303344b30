"""Absurd answers are refused, not shown: a non-finite, zero or sub-microsecond latency, and a
memory estimate that is non-finite, zero, or beyond the device's or the per-sample ceiling."""

import dataclasses
import math

import pytest
from onnx import TensorProto, helper

from perfseer.errors import AbsurdAnswerError
from perfseer.trust import bounds as bnd


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_latency_is_refused(value):
    with pytest.raises(AbsurdAnswerError, match="no answer"):
        bnd.check(value, 1.0, 2.0, 1.0, 100.0, "ms", "spec")


@pytest.mark.parametrize("value", [0.0, -3.0, 1e-5])
def test_a_zero_or_sub_microsecond_latency_is_refused(value):
    # without a spec the floor is 0: nothing raises the value to a physical floor
    with pytest.raises(AbsurdAnswerError, match="zero or negative|under 1 us"):
        bnd.check(value, 0.0, 1.0, 0.0, math.inf, "ms", "no device spec: training range")


def test_a_plausible_latency_and_a_zero_utilisation_pass():
    assert bnd.check(5.0, 4.0, 6.0, 1.0, 100.0, "ms", "spec") == (5.0, 4.0, 6.0, [])
    assert bnd.check(0.0, 0.0, 1.0, 0.0, 100.0, "%", "bounds")[0] == 0.0


GIB = 2**30
SANE = {"weights": GIB, "activations": 2 * GIB, "context": 0.5 * GIB}


def test_a_plausible_memory_estimate_passes():
    bnd.check_memory(3.5 * GIB, SANE, 8, 80 * GIB, "m")
    bnd.check_memory(3.5 * GIB, SANE, 8, None, "m")


@pytest.mark.parametrize("total, breakdown, batch, capacity, words", [
    (5.5e19, {**SANE, "activations": 5.5e19}, 1, None, "sanity ceiling"),
    (float("nan"), SANE, 1, None, "not finite"),
    (float("inf"), SANE, 1, 80 * GIB, "not finite"),
    (0, {}, 1, None, "zero or negative"),
    (-GIB, SANE, 1, None, "zero or negative"),
    (0.1 * GIB, SANE, 1, None, "less than its own weights"),
    (80 * GIB * 20_000, {**SANE, "activations": 80 * GIB * 20_000}, 10**6, 80 * GIB, "device's memory"),
    (2**45, {"activations": 2**45}, 2, None, "per sample"),
])
def test_an_absurd_memory_estimate_is_refused(total, breakdown, batch, capacity, words):
    with pytest.raises(AbsurdAnswerError, match=words):
        bnd.check_memory(total, breakdown, batch, capacity, "m")


def _relu_model():
    node = helper.make_node("Relu", ["x"], ["y"])
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_perfseer_memory_refuses_an_absurd_estimate(monkeypatch):
    from perfseer.memory import api

    est = api.memory(_relu_model(), batch=2, phase="infer")
    assert est.total > 0  # a plausible one passes

    real = api.estimate_from_trace

    def absurd(*args, **kwargs):
        e = real(*args, **kwargs)
        return dataclasses.replace(e, total=5.5e19, breakdown={**e.breakdown, "activations": 5.5e19})

    monkeypatch.setattr(api, "estimate_from_trace", absurd)
    with pytest.raises(AbsurdAnswerError, match="sanity ceiling"):
        api.memory(_relu_model(), batch=2, phase="infer")
