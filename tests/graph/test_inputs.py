"""Input formats: ONNX files with external data, in-memory protos, torch modules, symbolic and
static batch dimensions."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import perfseer
from helpers import assert_user_error, conv_model, make_model
from perfseer.errors import PerfseerError, ShapeError

CONV_MACS = 4 * 8 * 8 * 27  # conv_model(): per sample
FC_MACS = 4 * 10


def _save_external(model: onnx.ModelProto, folder, name: str = "model"):
    """Save with every initializer in one external data file; returns (model path, data path)."""
    folder.mkdir(exist_ok=True)
    path, data = folder / f"{name}.onnx", folder / f"{name}.data"
    onnx.save_model(copy.deepcopy(model), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=0)
    return path, data


def _same_graph(a, b) -> None:
    assert a.params == b.params and a.macs == b.macs and a.flops == b.flops
    assert a.memory_access_bytes == b.memory_access_bytes
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.edge_index, b.edge_index)
    np.testing.assert_array_equal(a.edge_attr, b.edge_attr)


def reshape_model(batch="N", shape=(0, -1), as_constant_node: bool = False) -> onnx.ModelProto:
    """``Conv (4x3x3x3, pad 1) -> Reshape(shape) -> MatMul (256 -> 10)`` on x (batch, 3, 8, 8)."""
    inits = {"w": np.ones((4, 3, 3, 3), np.float32), "fc": np.ones((256, 10), np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv")]
    if as_constant_node:
        nodes.append(helper.make_node("Constant", [], ["shape"], name="shape_const",
                                      value=helper.make_tensor("v", TensorProto.INT64, [len(shape)], list(shape))))
    else:
        inits["shape"] = np.array(shape, np.int64)
    nodes += [helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
              helper.make_node("MatMul", ["r", "fc"], ["y"], name="fc")]
    return make_model(nodes, {"x": (batch, 3, 8, 8)}, ["y"], inits)


RESHAPE_PARAMS = 4 * 27 + 256 * 10
RESHAPE_MACS = CONV_MACS + 256 * 10  # per sample


# -- (a) external data -------------------------------------------------------------------------------

def test_external_data_matches_in_memory_and_is_never_read(tmp_path):
    m = conv_model(with_fc=True)
    ref = perfseer.extract(m, batch=2)
    assert ref.params == 4 * 27 + 4 + 40 + 10 and ref.macs == 2 * (CONV_MACS + FC_MACS)
    path, data = _save_external(m, tmp_path / "ext")
    assert data.exists() and data.stat().st_size == 4 * ref.params
    ext = onnx.load(str(path), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in ext.graph.initializer)

    _same_graph(perfseer.extract(path, batch=2), ref)
    data.unlink()  # weights were never read: the graph extracts without them
    _same_graph(perfseer.extract(path, batch=2), ref)
    _same_graph(perfseer.extract(str(path), batch=2), ref)
    # an in-memory proto whose external data was not loaded
    _same_graph(perfseer.extract(onnx.load(str(path), load_external_data=False), batch=2), ref)


def test_external_data_default_threshold_keeps_shape_vectors_inline(tmp_path):
    """onnx's default size_threshold (1 KiB) keeps the Reshape shape inline: extraction works, with
    and without the external weight file."""
    m = reshape_model()
    ref = perfseer.extract(m, batch=2)
    path, data = tmp_path / "m.onnx", tmp_path / "m.data"
    onnx.save_model(copy.deepcopy(m), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name)
    assert data.exists()
    _same_graph(perfseer.extract(path, batch=2), ref)
    data.unlink()
    _same_graph(perfseer.extract(path, batch=2), ref)


def test_external_data_small_shape_tensor_is_read(tmp_path):
    m = reshape_model()
    ref = perfseer.extract(m, batch=2)
    assert ref.params == RESHAPE_PARAMS and ref.macs == 2 * RESHAPE_MACS
    path, _ = _save_external(m, tmp_path / "ext")
    _same_graph(perfseer.extract(path, batch=2), ref)


def test_external_shape_tensor_missing_is_a_clear_error(tmp_path):
    """Without its data file, a model whose shapes depend on an external shape vector cannot be
    extracted: that is a one-line PerfseerError, not a traceback."""
    path, data = _save_external(reshape_model(), tmp_path / "ext")
    data.unlink()
    with pytest.raises(PerfseerError) as info:
        perfseer.extract(path, batch=2)
    assert_user_error(str(info.value))


# -- (b) an in-memory proto is not modified ----------------------------------------------------------

def _rich_model() -> onnx.ModelProto:
    """Symbolic batch and seq dims, declared value_info, a large (stripped) weight, a small shape
    initializer, a Constant node and metadata: everything extraction rewrites in its own copy."""
    big = np.arange(64 * 80, dtype=np.float32).reshape(64, 80)  # > SMALL_VALUE_ELEMENTS: stripped
    nodes = [helper.make_node("MatMul", ["x", "big"], ["h"], name="mm"),
             helper.make_node("Constant", [], ["axes"], name="axes",
                              value=helper.make_tensor("a", TensorProto.INT64, [1], [1])),
             helper.make_node("ReduceMean", ["h", "axes"], ["m"], keepdims=0, name="mean"),
             helper.make_node("Reshape", ["m", "shape"], ["y"], name="reshape")]
    m = make_model(nodes, {"x": ("N", "seq", 64)}, ["y"], {"big": big, "shape": np.array([0, -1], np.int64)},
                   value_info={"h": ("N", "seq", 80)})
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    m.graph.output[0].type.tensor_type.shape.dim.add().dim_param = "N"
    m.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 80
    onnx.helper.set_model_props(m, {"author": "test"})
    return m


@pytest.mark.parametrize("kwargs", [dict(dims={"seq": 5}), dict(dims={"seq": 5}, batch=3), dict()],
                         ids=["batch1", "batch3", "error-unbound-seq"])
def test_in_memory_proto_is_not_modified(kwargs):
    m = _rich_model()
    before = m.SerializeToString()
    if "dims" in kwargs:
        pg = perfseer.extract(m, **kwargs)
        assert pg.macs == kwargs.get("batch", 1) * 5 * 64 * 80
        assert pg.params == 64 * 80
    else:
        with pytest.raises(ShapeError):
            perfseer.extract(m, **kwargs)
    assert m.SerializeToString() == before


def test_in_memory_proto_with_static_batch_fallback_is_not_modified():
    m = reshape_model(batch=1, shape=(1, -1))
    before = m.SerializeToString()
    perfseer.extract(m)
    with pytest.raises(ShapeError):
        perfseer.extract(m, batch=4)
    assert m.SerializeToString() == before


# -- (c) a torch.nn.Module ---------------------------------------------------------------------------

def test_torch_module():
    torch = pytest.importorskip("torch")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8 * 16 * 16, 10)

        def forward(self, x):
            return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))

    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # non-trivial running statistics, to see that they are not touched
        net.bn.running_mean.uniform_()
        net.bn.running_var.uniform_(0.5, 2.0)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    training = net.training

    pg = perfseer.extract(net, input_shape=(3, 16, 16))

    assert pg.params == sum(p.numel() for p in net.parameters()) == (8 * 27 + 8) + (8 + 8) + (2048 * 10 + 10)
    conv_macs = 8 * 16 * 16 * 3 * 3 * 3
    fc_macs = 8 * 16 * 16 * 10
    assert pg.macs == conv_macs + fc_macs
    assert pg.batch_size == 1
    assert {"Conv", "BatchNormalization", "Relu", "Gemm"} <= set(pg.op_types)
    # the module is untouched: same weights and buffers, still on the CPU, same mode
    after = net.state_dict()
    assert after.keys() == before.keys()
    for k, v in before.items():
        assert after[k].device.type == "cpu", k
        assert torch.equal(after[k], v), k
    assert all(p.device.type == "cpu" for p in net.parameters())
    assert net.training == training
    # the exported graph re-binds to other batch sizes
    assert pg.with_batch(4).macs == 4 * pg.macs


# -- (d) a symbolic batch dimension ------------------------------------------------------------------

@pytest.mark.parametrize("batch_dim", ["N", "batch_size"])
def test_symbolic_batch_is_bound(batch_dim):
    m = conv_model(batch=batch_dim, with_fc=True)
    pg1 = perfseer.extract(m)
    pg4 = perfseer.extract(m, batch=4)
    assert pg1.batch_size == 1 and pg4.batch_size == 4
    assert pg1.macs == CONV_MACS + FC_MACS
    assert pg4.macs == 4 * pg1.macs
    assert pg4.params == pg1.params
    _same_graph(pg1.with_batch(4), pg4)


def test_unnamed_dynamic_batch_is_bound():
    m = conv_model()
    m.graph.input[0].type.tensor_type.shape.dim[0].Clear()  # neither dim_value nor dim_param
    assert perfseer.extract(m, batch=3).macs == 3 * CONV_MACS


def test_symbolic_batch_through_reshape():
    m = reshape_model(batch="N", shape=(0, -1))
    assert perfseer.extract(m).macs == RESHAPE_MACS
    assert perfseer.extract(m, batch=4).macs == 4 * RESHAPE_MACS


# -- (e) a static batch of 1 baked into a Reshape constant -------------------------------------------

@pytest.mark.parametrize("as_constant_node", [False, True], ids=["initializer", "Constant-node"])
def test_static_batch_baked_into_reshape(as_constant_node):
    m = reshape_model(batch=1, shape=(1, -1), as_constant_node=as_constant_node)
    for batch in (None, 1):
        pg = perfseer.extract(m, batch=batch)
        assert pg.batch_size == 1
        assert pg.params == RESHAPE_PARAMS
        assert pg.macs == RESHAPE_MACS
    # What the code does at another batch: a clear ShapeError, since the Reshape pins the batch.
    with pytest.raises(ShapeError) as info:
        perfseer.extract(m, batch=4)
    assert_user_error(str(info.value), "fixed at 1", "dynamic batch")


def test_static_batch_without_baked_constants_rebinds():
    """A static batch that no constant depends on is re-bound like a symbolic one."""
    m = conv_model(batch=2)
    assert perfseer.extract(m).batch_size == 2
    assert perfseer.extract(m).macs == 2 * CONV_MACS
    assert perfseer.extract(m, batch=1).macs == CONV_MACS
    assert perfseer.extract(m, batch=4).macs == 4 * CONV_MACS


def test_zoo_reference_without_the_package(monkeypatch):
    """timm:/torchvision: without the optional package: an ImportError naming the pip install."""
    import importlib.util

    from perfseer.errors import MissingDependencyError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "timm" else real(name, *a))
    with pytest.raises(MissingDependencyError, match=r"pip install 'perfseer\[zoo\]'") as info:
        perfseer.extract("timm:resnet50")
    assert isinstance(info.value, ImportError) and "\n" not in str(info.value)


def test_unknown_zoo_model_names_close_matches():
    import importlib.util

    from perfseer.errors import ModelLoadError

    if importlib.util.find_spec("timm") is None:  # importing timm directly would need zoo's torchvision fix
        pytest.skip("timm is not installed")

    with pytest.raises(ModelLoadError, match="resnet50") as info:
        perfseer.extract("timm:resnet50x")
    assert "fix:" in str(info.value)
