"""A PerfGraph re-bound to another batch size equals a fresh extraction at that batch."""

import numpy as np
import pytest
from onnx import helper

import perfseer
from helpers import make_model


def _assert_same(a, b):
    assert a.batch_size == b.batch_size
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    np.testing.assert_array_equal(a.edge_attr, b.edge_attr)
    np.testing.assert_array_equal(a.u, b.u)
    assert a.op_types == b.op_types


def _dynamic_reshape_model():
    """Conv -> Flatten via Shape/Gather/Concat/Reshape on a symbolic batch -> MatMul -> Softmax."""
    c = helper.make_node
    nodes = [
        c("Conv", ["x", "w"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        c("Relu", ["conv"], ["act"]),
        c("Shape", ["act"], ["shape"]),
        c("Gather", ["shape", "zero"], ["n"], axis=0),
        c("Unsqueeze", ["n", "axes0"], ["n1"]),
        c("Concat", ["n1", "minus1"], ["target"], axis=0),
        c("Reshape", ["act", "target"], ["flat"]),
        c("MatMul", ["flat", "fc"], ["logits"]),
        c("Softmax", ["logits"], ["prob"], axis=-1),
    ]
    init = {"w": np.zeros((8, 3, 3, 3), np.float32), "zero": np.array(0, np.int64),
            "axes0": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
            "fc": np.zeros((8 * 4 * 4, 10), np.float32)}
    return make_model(nodes, {"x": ("N", 3, 8, 8)}, ["prob"], init)


@pytest.mark.parametrize("batch", [1, 2, 7, 64])
def test_dynamic_reshape_model(batch):
    fresh = perfseer.extract(_dynamic_reshape_model(), batch=batch)
    rebound = perfseer.extract(_dynamic_reshape_model(), batch=3).with_batch(batch)
    _assert_same(fresh, rebound)
    # the folded shape sub-graph leaves the device operators only
    assert fresh.op_types == ("Conv", "Relu", "Reshape", "MatMul", "Softmax")
    assert fresh.macs == batch * (8 * 4 * 4 * 27 + 128 * 10)


@pytest.mark.parametrize("name", ["resnet18", "vit_b_16"])
@pytest.mark.parametrize("batch", [2, 16])
def test_bundled_examples(name, batch):
    fresh = perfseer.extract(f"example:{name}", batch=batch)
    rebound = perfseer.extract(f"example:{name}").with_batch(batch)
    _assert_same(fresh, rebound)
    one = perfseer.extract(f"example:{name}")
    assert rebound.macs == pytest.approx(batch * one.macs)
    assert rebound.params == one.params


def test_rebinding_rejects_bad_batch():
    pg = perfseer.extract("example:resnet18")
    with pytest.raises(perfseer.PerfseerError, match="positive integer"):
        pg.with_batch(0)
