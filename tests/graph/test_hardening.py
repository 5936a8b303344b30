"""Malformed graphs are refused naming the node and the cause; old opsets and sequence ops extract."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import perfseer
from helpers import make_model
from perfseer.errors import ModelLoadError, ShapeError, UnsupportedModelError

from benchmarks.lib import fuzz_corpus  # noqa: E402

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def _conv(**attrs):
    defaults = dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    defaults.update(attrs)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **defaults)
    return make_model([node], {"x": ("N", 3, 8, 8)}, ["y"], {"w": np.zeros((4, 3, 3, 3), np.float32)})


# -- validation ------------------------------------------------------------------------------------

@pytest.mark.parametrize("attrs, text", [
    (dict(strides=[-1, 1]), "strides [-1, 1] is out of range"),
    (dict(strides=[0, 1]), "strides [0, 1] is out of range"),
    (dict(kernel_shape=[2 ** 40, 3]), "kernel_shape"),
    (dict(pads=[2 ** 62, 0, 0, 0]), "pads"),
    (dict(group=0), "group [0] is out of range"),
])
def test_absurd_geometry_names_node_and_attribute(attrs, text):
    with pytest.raises(ShapeError, match="Conv node 'conv'") as e:
        perfseer.extract(_conv(**attrs))
    assert text in str(e.value)


def test_cycle_is_named():
    nodes = [helper.make_node("Relu", ["x", ], ["a"], name="first"),
             helper.make_node("Add", ["a", "c"], ["b"], name="second"),
             helper.make_node("Relu", ["b"], ["c"], name="third")]
    with pytest.raises(ShapeError, match="has a cycle through Add node 'second'"):
        perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["c"]))


def test_nodes_out_of_order_are_sorted():
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"), helper.make_node("Neg", ["x"], ["a"], name="first")]
    pg = perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["y"]), batch=2)
    assert pg.op_types == ("Neg", "Relu")


def test_dangling_input_is_named():
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    with pytest.raises(ShapeError, match="Add node 'add' .* reads 'ghost', which no node"):
        perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["y"]))


def test_duplicate_output_is_named():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="a"), helper.make_node("Neg", ["x"], ["y"], name="b")]
    with pytest.raises(ShapeError, match="tensor 'y' .* is produced twice, by Relu node 'a' and Neg node 'b'"):
        perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["y"]))


@pytest.mark.parametrize("version", [0, -5, 10 ** 6])
def test_opset_that_does_not_exist(version):
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": ("N", 4)}, ["y"])
    m.opset_import[0].version = version
    with pytest.raises(ModelLoadError, match=f"declares default-domain opset {version}, which does not exist"):
        perfseer.extract(m)


def test_unknown_operator_and_wrong_attribute_type():
    m = make_model([helper.make_node("Frobnicate", ["x"], ["y"], name="f")], {"x": ("N", 4)}, ["y"])
    with pytest.raises(UnsupportedModelError, match="no operator 'Frobnicate' in ONNX opset 20"):
        perfseer.extract(m)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", group=[1, 2])
    m = make_model([node], {"x": ("N", 3, 8, 8)}, ["y"], {"w": np.zeros((4, 3, 3, 3), np.float32)})
    with pytest.raises(ShapeError, match="attribute 'group' is of type INTS, expected INT"):
        perfseer.extract(m)


def test_wrong_dtypes_and_bad_constants():
    m = make_model([helper.make_node("Cast", ["x"], ["y"], name="cast", to=99)], {"x": ("N", 4)}, ["y"])
    with pytest.raises(ShapeError, match="Cast node 'cast' .* 'to' is 99, not an ONNX element type"):
        perfseer.extract(m)
    m = make_model([helper.make_node("Add", ["x", "b"], ["y"], name="add")], {"x": ("N", 4)}, ["y"],
                   {"b": np.zeros(4, np.float32)})
    m.graph.initializer[0].dims[0] = 6
    with pytest.raises(ShapeError, match=r"initializer 'b' .* has dims \[6\] \(6 values\) but 16 bytes"):
        perfseer.extract(m)
    m.graph.initializer[0].dims[0] = 4
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 2 ** 40
    with pytest.raises(ShapeError, match="input 'x' .* has a dimension 1099511627776"):
        perfseer.extract(m)


def test_range_with_step_zero_is_named():
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"], name="rng"),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "rf"], ["y"], name="add")]
    inits = {"s": np.asarray(0, np.int64), "l": np.asarray(4, np.int64), "d": np.asarray(0, np.int64)}
    with pytest.raises(ShapeError, match="Range node 'rng' .* its step \\(delta\\) is 0"):
        perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["y"], inits))


def test_folding_is_bounded_by_the_broadcast_output():
    """[60000, 1] + [60000] is 3.6e9 elements: its shape is kept, its value is never computed."""
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["r"], name="rng"),
             helper.make_node("Unsqueeze", ["r", "ax"], ["c"], name="col"),
             helper.make_node("Add", ["c", "r"], ["outer"], name="outer"),
             helper.make_node("ReduceMax", ["outer"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "mf"], ["y"], name="add")]
    inits = {"s": np.asarray(0, np.int64), "l": np.asarray(60000, np.int64), "d": np.asarray(1, np.int64),
             "ax": np.asarray([1], np.int64)}
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    pg = perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["y"], inits), batch=2)
    assert pg.op_types == ("Add",)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 500_000  # KiB: far below 3.6e9 x 8 B


# -- old opsets ------------------------------------------------------------------------------------

# conv1: 16 filters x 3x3x3 at 16x16 outputs; fc: 1024 -> 10 (an independent count by hand)
LEGACY_MACS = 16 * 3 * 3 * 3 * 16 * 16 + 1024 * 10


@pytest.mark.parametrize("opset", [3, 5, 6, 7, 8, 9])
def test_old_opset_files_extract_with_correct_macs(opset, tmp_path):
    m = fuzz_corpus.legacy_model(opset)
    path = tmp_path / f"legacy{opset}.onnx"
    path.write_bytes(m.SerializeToString())
    pg = perfseer.extract(str(path))
    assert abs(pg.macs - LEGACY_MACS) <= 0.03 * LEGACY_MACS
    assert pg.macs == LEGACY_MACS
    assert "Mul" in pg.op_types and "Dropout" in pg.op_types


def test_legacy_broadcast_axis_aligns_the_scale():
    """Mul-6 with broadcast=1, axis=1 scales channels: [N, 4, 5, 5] x [4] must not broadcast over W."""
    nodes = [helper.make_node("Mul", ["x", "s"], ["y"], name="scale", broadcast=1, axis=1)]
    m = make_model(nodes, {"x": ("N", 4, 5, 5)}, ["y"], {"s": np.ones(4, np.float32)}, opset=6)
    pg = perfseer.extract(m, batch=1)
    assert pg.graph.tensors["y"].shape == (1, 4, 5, 5)


@pytest.mark.parametrize("name", ["light_bvlc_alexnet", "light_squeezenet", "light_vgg19", "light_inception_v1"])
def test_onnx_model_zoo_files_with_dropout_ratio(name):
    pg = perfseer.extract(str(ONNX_DATA / "light" / f"{name}.onnx"))
    assert pg.macs > 1e8 and "Dropout" in pg.op_types


# -- sequences -------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, ops", [(1, ("Identity",)), (2, ("Identity",)), (4, ("Concat",)),
                                    (5, ("Unsqueeze", "Unsqueeze", "Unsqueeze", "Concat")), (6, ("Split",))])
def test_onnx_sequence_models(k, ops):
    pg = perfseer.extract(str(ONNX_DATA / "simple" / f"test_sequence_model{k}" / "model.onnx"))
    assert pg.op_types == ops


def test_sequence_model1_picks_the_right_element():
    # Seq = [X(2,3,4), Y(1,3,4)], Z(3,3,4) inserted at pos (-2 in onnx's test data) -> SequenceAt(pos_at)
    pg = perfseer.extract(str(ONNX_DATA / "simple" / "test_sequence_model1" / "model.onnx"))
    m = onnx.load(str(ONNX_DATA / "simple" / "test_sequence_model1" / "model.onnx"))
    vals = {t.name: int(numpy_helper.to_array(t)) for t in m.graph.initializer}
    seq = ["X", "Y"]
    seq.insert(vals["pos"] if vals["pos"] >= 0 else vals["pos"] + 2, "Z")
    src = seq[vals["pos_at"]]
    expected = {"X": 2, "Y": 1, "Z": 3}[src]
    assert pg.graph.tensors["out"].shape[0] == (pg.batch_size if src == "X" else expected)


def test_sequence_position_out_of_range():
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="mk"),
             helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")]
    with pytest.raises(ShapeError, match="SequenceAt node 'at' .* reads position 5 of a sequence of 2"):
        perfseer.extract(make_model(nodes, {"x": ("N", 4)}, ["y"], {"p": np.asarray(5, np.int64)}))


def test_sequence_with_runtime_position_is_named():
    nodes = [helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="mk"),
             helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")]
    m = make_model(nodes, {"x": ("N", 4), "p": ((), np.int64)}, ["y"])
    with pytest.raises(UnsupportedModelError, match="node .* works on a tensor sequence whose positions"):
        perfseer.extract(m)


# -- shape inference in a helper process -----------------------------------------------------------

def test_a_crash_inside_shape_inference_is_an_error_not_a_dead_caller(monkeypatch):
    from perfseer.graph import safe_infer

    crashing = safe_infer._Helper("import os, sys; sys.stdin.buffer.read(13); os.abort()")
    monkeypatch.setattr(safe_infer, "_helper", crashing)
    m = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], {"x": ("N", 4)}, ["y"])
    with pytest.raises(ShapeError, match="ONNX shape inference crashed .* on <in-memory model>"):
        perfseer.extract(m)
    monkeypatch.setattr(safe_infer, "_helper", safe_infer._Helper())
    assert perfseer.extract(m, batch=3).graph.tensors["y"].shape == (3, 4)


def test_in_process_inference_gives_the_same_graph(monkeypatch):
    a = perfseer.extract("example:resnet18", batch=4)
    monkeypatch.setenv("PERFSEER_SHAPE_INFERENCE", "inprocess")
    b = perfseer.extract("example:resnet18", batch=4)
    assert a.macs == b.macs and a.op_types == b.op_types and np.array_equal(a.x, b.x)
