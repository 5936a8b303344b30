"""Bad input: every user mistake is a one-line PerfseerError naming the problem and the fix, through
the Python API and through ``perfseer graph`` (exit code 2, the message on stderr, no traceback)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import perfseer
from helpers import assert_cli_error, assert_user_error, conv_model, make_model, run_cli
from perfseer.cli.graph import parse_dims, parse_shape
from perfseer.errors import ModelLoadError, PerfseerError, ShapeError, UnsupportedModelError


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _vi(name, shape=None, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


# -- models -----------------------------------------------------------------------------------------

def custom_op_model(declare_domain: bool = True, value_info: dict | None = None, batch="N") -> onnx.ModelProto:
    """``x -> com.example::MyOp -> Relu``: the custom op's output feeds a standard op."""
    nodes = [helper.make_node("MyOp", ["x"], ["h"], domain="com.example", name="my_op"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    m = make_model(nodes, {"x": (batch, 3, 8, 8)}, ["y"], value_info=value_info)
    if declare_domain:
        m.opset_import.append(helper.make_opsetid("com.example", 1))
    return m


def if_model() -> onnx.ModelProto:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [_vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e")])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Cast", ["s"], ["c"], to=TensorProto.BOOL, name="cast"),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, name="branch")]
    return make_model(nodes, {"x": ("N", 4)}, ["y"])


def loop_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Relu", ["v_in"], ["v_out"])],
        "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in")],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out")])
    nodes = [helper.make_node("Loop", ["trip", "", "x"], ["y"], body=body, name="loop")]
    return make_model(nodes, {"x": ("N", 4)}, ["y"], {"trip": np.array(3, np.int64)})


def scan_model() -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "xi"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["o"])],
        "body", [_vi("s_in", [4]), _vi("xi", [4])], [_vi("s_out", [4]), _vi("o", [4])])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["sf", "y"], body=body, num_scan_inputs=1, name="scan")]
    return make_model(nodes, {"x": ("N", 4)}, ["sf", "y"], {"s0": np.zeros(4, np.float32)})


def empty_slice_model() -> onnx.ModelProto:
    """A valid (N, 4, 8) input sliced to ``[2:2]`` on the last axis: a 0-length tensor."""
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["empty_slice"], name="slice"),
             helper.make_node("Relu", ["empty_slice"], ["y"], name="relu")]
    return make_model(nodes, {"x": ("N", 4, 8)}, ["y"], {
        "starts": np.array([2], np.int64), "ends": np.array([2], np.int64), "axes": np.array([2], np.int64)})


def relu_model(shape, name: str = "pixels") -> onnx.ModelProto:
    return make_model([helper.make_node("Relu", [name], ["y"], name="relu")], {name: shape}, ["y"])


def initializers_only_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    return make_model(nodes, {}, ["y"], {"a": np.ones((2, 2), np.float32), "b": np.ones((2, 2), np.float32)})


def constants_only_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Constant", [], ["a"], name="const",
                              value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    return make_model(nodes, {}, ["y"])


def old_style_initializer_input_model() -> onnx.ModelProto:
    """IR-3 style: the only graph input is also an initializer, so nothing is fed at run time."""
    a = onnx.numpy_helper.from_array(np.ones(2, np.float32), "a")
    g = helper.make_graph([helper.make_node("Relu", ["a"], ["y"], name="relu")], "t", [_vi("a", [2])], [_vi("y")],
                          initializer=[a])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def seq_model() -> onnx.ModelProto:
    """``x (N, seq, 16) @ w (16, 32)``: MACs = N * seq * 16 * 32."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
    return make_model(nodes, {"x": ("N", "seq", 16)}, ["y"], {"w": np.ones((16, 32), np.float32)})


# -- the cases ---------------------------------------------------------------------------------------

@dataclass
class Case:
    """A bad input: ``make(tmp_path)`` returns the model path; the API call gets ``kwargs``, the
    CLI ``args``; the message must name each of ``names`` (``{path}``: the model path)."""

    make: Callable[[Path], Path]
    error: type[PerfseerError]
    names: tuple[str, ...]
    kwargs: dict = field(default_factory=dict)
    args: tuple[str, ...] = ()


def _bytes_file(data: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        p = tmp / "model.onnx"
        p.write_bytes(data)
        return p
    return make


def _truncated(cut: Callable[[int], int]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        data = conv_model(with_fc=True).SerializeToString()
        return _bytes_file(data[:cut(len(data))])(tmp)
    return make


def _model_file(build: Callable[[], onnx.ModelProto]) -> Callable[[Path], Path]:
    return lambda tmp: _save(build(), tmp / "model.onnx")


def _directory(tmp: Path) -> Path:
    d = tmp / "exported_model"
    d.mkdir()
    _save(conv_model(), d / "model.onnx")
    return d


CASES = {
    # files
    "truncated-half": Case(_truncated(lambda n: n // 2), ModelLoadError, ("{path}", "truncated")),
    "truncated-last-byte": Case(_truncated(lambda n: n - 1), ModelLoadError, ("{path}", "truncated")),
    "text-file": Case(_bytes_file(b"this is not a model\nsecond line\n"), ModelLoadError, ("{path}",)),
    "json-file": Case(_bytes_file(b'{"model": "resnet50"}\n'), ModelLoadError, ("{path}",)),
    "random-bytes": Case(_bytes_file(np.random.default_rng(0).bytes(4096)), ModelLoadError, ("{path}",)),
    "empty-file": Case(_bytes_file(b""), ModelLoadError, ("{path}", "empty")),
    "missing-file": Case(lambda tmp: tmp / "no_such_model.onnx", ModelLoadError, ("{path}", "does not exist")),
    "directory": Case(_directory, ModelLoadError, ("{path}", "directory")),
    # graphs perfseer cannot represent
    "custom-domain-op": Case(_model_file(custom_op_model), UnsupportedModelError, ("MyOp", "com.example")),
    "control-flow-Loop": Case(_model_file(loop_model), UnsupportedModelError, ("Loop", "'loop'")),
    "control-flow-If": Case(_model_file(if_model), UnsupportedModelError, ("If", "'branch'")),
    "control-flow-Scan": Case(_model_file(scan_model), UnsupportedModelError, ("Scan", "'scan'")),
    "no-inputs-initializers": Case(_model_file(initializers_only_model), UnsupportedModelError, ("no graph inputs",)),
    "no-inputs-constants": Case(_model_file(constants_only_model), UnsupportedModelError, ("no graph inputs",)),
    "no-inputs-old-style": Case(_model_file(old_style_initializer_input_model), UnsupportedModelError,
                                ("no graph inputs",)),
    # shapes
    "zero-size-slice": Case(_model_file(empty_slice_model), ShapeError, ("'empty_slice'", "Slice", "zero-size")),
    "zero-dim-input": Case(_model_file(lambda: relu_model(("N", 0, 8))), ShapeError, ("'pixels'", "zero-size")),
    "unbound-symbolic-dim": Case(_model_file(seq_model), ShapeError, ("'seq'", "--dim seq=")),
    "batch-0": Case(_model_file(conv_model), ShapeError, ("batch",), {"batch": 0}, ("--batch", "0")),
    "batch-negative": Case(_model_file(conv_model), ShapeError, ("batch",), {"batch": -2}, ("--batch", "-2")),
    "input-shape-wrong-rank": Case(_model_file(conv_model), ShapeError, ("input-shape", "'x'"),
                                   {"input_shape": (3, 8)}, ("--input-shape", "3x8")),
    "input-shape-zero": Case(_model_file(conv_model), ShapeError, ("zero-size",),
                             {"input_shape": (3, 0, 8)}, ()),
}


def _names(case: Case, path: Path) -> list[str]:
    return [n.replace("{path}", str(path)) for n in case.names]


@pytest.mark.parametrize("case_id", list(CASES))
def test_api_error(case_id, tmp_path):
    case = CASES[case_id]
    path = case.make(tmp_path)
    with pytest.raises(case.error) as info:
        perfseer.extract(str(path), **case.kwargs)
    assert_user_error(str(info.value), *_names(case, path))
    # the structured parts agree with the text
    assert info.value.fix and str(info.value).endswith(info.value.fix)


@pytest.mark.parametrize("case_id", [c for c, case in CASES.items() if not case.kwargs or case.args])
def test_cli_error(case_id, tmp_path, capsys):
    case = CASES[case_id]
    path = case.make(tmp_path)
    assert_cli_error(capsys, ["graph", str(path), *case.args], *_names(case, path))


def test_truncation_anywhere_is_a_load_error(tmp_path):
    """Cutting a valid model anywhere gives ModelLoadError, never a protobuf/IndexError traceback:
    every cut in the header and the tail, and every 13th byte in between."""
    data = conv_model(with_fc=True).SerializeToString()
    path = tmp_path / "cut.onnx"
    cuts = sorted({*range(24), *range(24, len(data) - 24, 13), *range(len(data) - 24, len(data))})
    for cut in cuts:
        path.write_bytes(data[:cut])
        with pytest.raises(ModelLoadError) as info:
            perfseer.extract(path)
        assert_user_error(str(info.value), str(path))


def test_path_object_and_str_give_the_same_error(tmp_path):
    path = tmp_path / "missing.onnx"
    with pytest.raises(ModelLoadError) as a:
        perfseer.extract(path)
    with pytest.raises(ModelLoadError) as b:
        perfseer.extract(str(path))
    assert str(a.value) == str(b.value)


# -- a symbolic dimension that cannot be bound, then bound -------------------------------------------

def test_symbolic_dim_bound_by_dims(tmp_path):
    m = seq_model()
    with pytest.raises(ShapeError, match="seq"):
        perfseer.extract(m)
    pg = perfseer.extract(m, dims={"seq": 8})
    assert pg.macs == 1 * 8 * 16 * 32
    assert perfseer.extract(m, dims={"seq": 8}, batch=4).macs == 4 * 8 * 16 * 32


def test_symbolic_dim_bound_by_cli(tmp_path, capsys):
    path = _save(seq_model(), tmp_path / "seq.onnx")
    assert_cli_error(capsys, ["graph", str(path)], "'seq'", "--dim seq=")
    code, out, err = run_cli(capsys, "graph", str(path), "--dim", "seq=8", "--json", "-")
    assert code == 0, err
    import json

    assert json.loads(out)["macs"] == 8 * 16 * 32


@pytest.mark.parametrize("value", [0, -3])
def test_symbolic_dim_bound_to_non_positive(value):
    with pytest.raises(ShapeError) as info:
        perfseer.extract(seq_model(), dims={"seq": value})
    assert_user_error(str(info.value), "seq")


@pytest.mark.parametrize("item", ["seq", "seq=", "seq=abc", "seq=0", "seq=-4", "seq=1.5"])
def test_bad_dim_string(item, tmp_path, capsys):
    with pytest.raises(ShapeError) as info:
        parse_dims([item])
    assert_user_error(str(info.value), item)
    path = _save(seq_model(), tmp_path / "seq.onnx")
    assert_cli_error(capsys, ["graph", str(path), "--dim", item], item)


# -- bad --input-shape strings -----------------------------------------------------------------------

@pytest.mark.parametrize("text", ["3xabc", "axb", "0x8x8", "3x-8x8", "3x8.5x8", "x", "3;8;8"])
def test_bad_input_shape_string(text, tmp_path, capsys):
    with pytest.raises(ShapeError) as info:
        parse_shape(text)
    assert_user_error(str(info.value), text)
    path = _save(conv_model(), tmp_path / "model.onnx")
    assert_cli_error(capsys, ["graph", str(path), f"--input-shape={text}"], text)


def test_good_input_shape_string_is_applied(tmp_path, capsys):
    assert parse_shape("3x16x16") == parse_shape("3,16,16") == (3, 16, 16)
    path = _save(conv_model(), tmp_path / "model.onnx")
    code, out, err = run_cli(capsys, "graph", str(path), "--input-shape", "3x16x16", "--json", "-")
    assert code == 0, err
    import json

    assert json.loads(out)["macs"] == 4 * 16 * 16 * 27


def test_batch_not_an_integer_is_a_usage_error(tmp_path, capsys):
    path = _save(conv_model(), tmp_path / "model.onnx")
    code, out, err = run_cli(capsys, "graph", str(path), "--batch", "four")
    assert code == 2 and "Traceback" not in err and "--batch" in err


# -- cases that do not behave as specified (see the report) ------------------------------------------

def test_custom_op_without_opset_import():
    with pytest.raises(UnsupportedModelError) as info:
        perfseer.extract(custom_op_model(declare_domain=False))
    assert_user_error(str(info.value), "MyOp", "com.example")


@pytest.mark.parametrize("declared", [("N", 3, 8, 8), (1, 3, 8, 8)], ids=["symbolic-batch", "static"])
def test_custom_op_with_declared_output_shape_extracts(declared):
    m = custom_op_model(value_info={"h": declared}, batch=declared[0])
    pg = perfseer.extract(m)
    assert pg.op_types == ("MyOp", "Relu")
    assert pg.uncovered_ops == {"MyOp": 1}
    assert perfseer.extract(m, batch=2).flops == 2 * pg.flops


def test_zero_size_message_shows_the_users_batch():
    with pytest.raises(ShapeError) as info:
        perfseer.extract(empty_slice_model())
    assert "[1, 4, 0]" in str(info.value) and "7919" not in str(info.value)


def test_zero_batch_dim_input():
    m = relu_model((0, 3, 8))
    try:
        pg = perfseer.extract(m)
    except ShapeError as e:
        assert_user_error(str(e), "'pixels'")
    else:
        assert pg.batch_size == 1 and pg.flops == 3 * 8


def test_binding_the_batch_name_through_dims():
    m = conv_model()
    try:
        pg = perfseer.extract(m, dims={"N": 4})
    except ShapeError as e:
        assert_user_error(str(e), "N", "--batch")
    else:
        assert pg.batch_size == 4 and pg.macs == 4 * 4 * 64 * 27


def test_empty_piece_inside_a_model_is_not_an_error():
    """A zero-length slice concatenated back (zero prefix tokens in a ViT) costs nothing."""
    nodes = [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["empty"], name="slice"),
             helper.make_node("Relu", ["empty"], ["empty_relu"], name="relu"),
             helper.make_node("Concat", ["empty_relu", "x"], ["y"], name="concat", axis=2)]
    m = make_model(nodes, {"x": ("N", 4, 8)}, ["y"], {
        "starts": np.array([2], np.int64), "ends": np.array([2], np.int64), "axes": np.array([2], np.int64)})
    pg = perfseer.extract(m, batch=2)
    assert pg.op_types == ("Slice", "Relu", "Concat")
    assert pg.graph.tensors["empty"].shape == (2, 4, 0)
    from helpers import feature

    assert feature(pg, "flops", node=1) == 0  # the Relu of an empty tensor does nothing


def test_contrib_shape_preserving_op_extracts():
    """A com.microsoft FastGelu has no ONNX shape inference; it keeps its input's shape."""
    nodes = [helper.make_node("FastGelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    m = make_model(nodes, {"x": ("N", 4, 8)}, ["y"])
    pg = perfseer.extract(m, batch=2)
    assert pg.graph.tensors["y"].shape == (2, 4, 8)
    assert pg.uncovered_ops == {"FastGelu": 1}
