"""Computation on weights at every forward (weight standardisation, a bias-table gather) is device
work in the PerfGraph; views of weights and computation on small constants stay folded."""

import numpy as np
import pytest
import torch
from onnx import helper

import perfseer
from helpers import load_script, make_model

W_BIG = np.ones((32, 3, 3, 3), np.float32)  # 864 elements: a weight even when its values are stored


@pytest.fixture(autouse=True)
def weight_work(monkeypatch):
    monkeypatch.setenv("PERFSEER_WEIGHT_WORK", "1")


def test_weight_work_is_off_by_default(monkeypatch):
    monkeypatch.delenv("PERFSEER_WEIGHT_WORK")
    nodes = [helper.make_node("Mul", ["w", "gain"], ["ws"], name="scale_w"),
             helper.make_node("Conv", ["x", "ws"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    pg = perfseer.extract(make_model(nodes, {"x": (1, 3, 16, 16)}, ["y"],
                                     {"w": W_BIG, "gain": np.full((32, 1, 1, 1), 2.0, np.float32)}))
    assert pg.op_types == ("Conv",)  # folded, as the bundled predictors were trained


def test_arithmetic_on_a_weight_is_a_device_operator():
    nodes = [helper.make_node("Mul", ["w", "gain"], ["ws"], name="scale_w"),
             helper.make_node("Conv", ["x", "ws"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    pg = perfseer.extract(make_model(nodes, {"x": (1, 3, 16, 16)}, ["y"],
                                     {"w": W_BIG, "gain": np.full((32, 1, 1, 1), 2.0, np.float32)}))
    assert pg.op_types == ("Mul", "Conv")
    assert pg.params == W_BIG.size + 32  # both still counted once as parameters
    plain = perfseer.extract(make_model([nodes[1]], {"x": (1, 3, 16, 16)}, ["y"], {"ws": W_BIG}))
    assert pg.flops - plain.flops == W_BIG.size  # one multiply per weight
    # the multiply reads the weight and the gain, and writes the scaled weight
    assert pg.memory_access_bytes - plain.memory_access_bytes == pytest.approx(4 * (2 * W_BIG.size + 32))


def test_views_of_weights_and_small_constants_stay_folded():
    nodes = [helper.make_node("Transpose", ["w2"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"], name="mm"),
             helper.make_node("Mul", ["half", "two"], ["one"]),  # stored scalars: constants
             helper.make_node("Mul", ["y", "one"], ["z"], name="scale")]
    inits = {"w2": np.ones((300, 64), np.float32), "half": np.array(0.5, np.float32),
             "two": np.array(2.0, np.float32)}
    pg = perfseer.extract(make_model(nodes, {"x": (4, 64)}, ["z"], inits))
    assert pg.op_types == ("MatMul", "Mul")
    assert pg.params == 300 * 64


def test_scalar_index_gather_of_a_weight_is_a_view():
    nodes = [helper.make_node("Gather", ["table", "i"], ["row"], axis=0),
             helper.make_node("Add", ["x", "row"], ["y"], name="add")]
    inits = {"table": np.ones((10, 300), np.float32), "i": np.array(3, np.int64)}
    pg = perfseer.extract(make_model(nodes, {"x": (2, 300)}, ["y"], inits))
    assert pg.op_types == ("Add",)


def test_bias_table_gather_is_device_work():
    nodes = [helper.make_node("Gather", ["table", "idx"], ["bias"], axis=0),
             helper.make_node("Add", ["x", "bias"], ["y"], name="add")]
    inits = {"table": np.ones((169, 300), np.float32), "idx": np.zeros((49,), np.int64)}
    pg = perfseer.extract(make_model(nodes, {"x": (2, 49, 300)}, ["y"], inits))
    assert pg.op_types == ("Gather", "Add")


class _StdConv(torch.nn.Conv2d):
    """Weight standardisation as timm's StdConv2d computes it at every forward."""

    def forward(self, x):
        w = torch.nn.functional.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                                           training=True, momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return torch.nn.functional.conv2d(x, w, self.bias, self.stride, self.padding)


def test_weight_standardisation_is_one_batch_statistics_batchnorm():
    std = torch.nn.Sequential(_StdConv(3, 16, 3, padding=1), torch.nn.ReLU())
    plain = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU())
    a = perfseer.extract(std, input_shape=(3, 32, 32))
    b = perfseer.extract(plain, input_shape=(3, 32, 32))
    assert a.params == b.params == 16 * 27 + 16
    # the exporter's mean / centre / square / variance chain is folded into one BatchNorm
    assert "ReduceMean" not in a.op_types and "Sub" not in a.op_types
    assert a.op_types.count("BatchNormalization") == 1 and "Conv" in a.op_types
    weight = 16 * 27
    assert a.flops - b.flops == pytest.approx(7 * weight, rel=0.01)  # a training-mode BatchNorm: 7 E
    assert a.memory_access_bytes > b.memory_access_bytes + 2 * 4 * weight  # it reads and writes the weight


def test_screen_finds_weight_standardisation_and_nothing_in_a_plain_net():
    screen = load_script("screen_weight_compute")
    with torch.device("meta"):
        std = torch.nn.Sequential(_StdConv(3, 16, 3, padding=1), torch.nn.ReLU())
        plain = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16).eval())
    assert screen.weight_compute(std, (3, 8, 8)) == {"aten.native_batch_norm": 1}
    assert screen.weight_compute(plain.eval(), (3, 8, 8)) == {}


def test_refresh_stores_rebuilt_graphs_exactly(tmp_path):
    refresh = load_script("refresh_graphs")
    arrays = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "op_type": np.array([1, 2], np.int64)}
    path = refresh._key_file(tmp_path, "timm:x", "3x8x8")
    refresh._save(path, [(1, arrays), (4, {k: v * 2 for k, v in arrays.items()})])
    back = refresh._read(path)
    assert sorted(back) == [1, 4]
    np.testing.assert_array_equal(back[4]["x"], arrays["x"] * 2)
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically

def test_the_argument_overrides_the_environment_and_the_graph_records_it(monkeypatch):
    nodes = [helper.make_node("Mul", ["w", "gain"], ["ws"], name="scale_w"),
             helper.make_node("Conv", ["x", "ws"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": (1, 3, 16, 16)}, ["y"], {"w": W_BIG, "gain": np.full((32, 1, 1, 1), 2.0, np.float32)})
    kept = perfseer.extract(model)  # PERFSEER_WEIGHT_WORK=1 (the fixture)
    folded = perfseer.extract(model, weight_work=False)
    assert (kept.op_types, kept.graph.weight_work) == (("Mul", "Conv"), True)
    assert (folded.op_types, folded.graph.weight_work) == (("Conv",), False)
    assert kept.with_batch(4).graph.weight_work is True  # re-binding keeps it
    monkeypatch.delenv("PERFSEER_WEIGHT_WORK")
    assert perfseer.extract(model, weight_work=True).op_types == ("Mul", "Conv")
    assert perfseer.extract(model).graph.weight_work is False


def test_a_dataset_says_how_its_graphs_were_extracted():
    from perfseer.data.dataset import dataset_extraction

    assert dataset_extraction({"extraction": {"weight_work": True}}) == {"weight_work": True}
    assert dataset_extraction({}) == {"weight_work": False}  # built before it was recorded: folded
    refreshed = {"refreshed": [{"why": "weight computation kept as device operators (perfseer.graph.extract, round 7)"}]}
    assert dataset_extraction(refreshed) == {"weight_work": True}  # scripts/refresh_graphs.py before it wrote the field
