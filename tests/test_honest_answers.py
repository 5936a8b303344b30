"""Issue 39: an answer comes from a basis that covers the model, or is refused with the reason;
precision is explicit and one per comparison."""

import json
import warnings

import pytest

import perfseer
from perfseer.cli.main import main
from perfseer.errors import PerfseerError
from perfseer.runtime import route
from perfseer.runtime.answer import Options, answers_at, canonical_precision
from perfseer.runtime.predictor import Predictor, setting_precision
from perfseer.trust.domain import SPACE_EMBEDDING_FACTOR, space_reasons

NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"
CIFAR = {"inputs": {"channels": [3], "values_per_sample": [3072, 3072]}}


@pytest.fixture(scope="module")
def cell():
    return perfseer.extract(NB201, batch=1)


def _predict(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return perfseer.predict(*args, **kwargs)


# -- item 1: the model space --------------------------------------------------------------------
def test_the_model_space_is_the_training_inputs_and_a_far_embedding():
    assert space_reasons(CIFAR, [(3, 32, 32)], [1.0]) == [[]]
    assert space_reasons(CIFAR, [(3, 64, 64)], [11.0]) == [[]]  # 4x the values, as far as a zoo model gets
    (far,) = space_reasons(CIFAR, [(3, 224, 224)], None)
    assert len(far) == 1 and "49x above" in far[0]
    (gray,) = space_reasons(CIFAR, [(1, 32, 32)], None)
    assert "shape 1x32x32 does not have the 3 channels" in gray[0]
    (other,) = space_reasons({}, None, [SPACE_EMBEDDING_FACTOR * 10])
    assert other == []  # no domain: no space known, nothing outside it
    (other,) = space_reasons({"inputs": None}, None, [SPACE_EMBEDDING_FACTOR * 10])
    assert "distance threshold" in other[0]
    assert space_reasons(None, [(3, 224, 224)], None) == [[]]


def test_a_device_falls_back_from_a_card_whose_space_does_not_hold_the_model(cell):
    # the RTX 4090 card learned 224-class ImageNet models; a 32x32 NAS-Bench-201 cell is not one
    rows = _predict(cell, device="rtx4090", batch=[1, 8])
    assert [r["batch_size"] for r in rows] == [1, 8]
    for r in rows:
        assert r["value"] is not None and "rtx4090-amp-nchw-pt291" not in r["basis"]
        assert "rtx4090-amp-nchw-pt291" in r["fallback_from"]["basis"]
        assert "training inputs" in r["fallback_from"]["reason"]
        assert r["passed_over"][0] == r["fallback_from"]
        assert r["precision"] == "amp-fp16"


def test_a_card_inside_its_space_still_answers(cell):
    rows = _predict(cell, device="1080ti", batch=[1, 16])
    assert all("nb201-gpus.infer" in r["basis"] and not r.get("fallback_from") and r["value"] for r in rows)


def test_a_predictor_asked_for_a_model_far_outside_it_refuses_unless_forced():
    with pytest.raises(PerfseerError, match="outside its model space.*--force"):
        _predict("example:resnet18", predictor="nb201-gpus.infer", device="1080ti")
    with pytest.raises(PerfseerError, match="outside the model space"):
        _predict("example:resnet18", device="1080ti", basis="measured")
    rows = _predict("example:resnet18", predictor="nb201-gpus.infer", device="1080ti", force=True)
    # forced, it answers; a value that hit the sanity ceiling is still not shown
    for r in rows:
        assert r["value"] is None and "sanity" in r["reason"] and r["interval"] is None


def test_a_card_passed_over_with_no_other_basis_is_a_refusal_that_force_answers():
    # the EPYC card learned 32x32 inputs; the spec model does not predict CPUs
    (row,) = _predict("example:resnet18", device="epyc")
    assert row["value"] is None and "49x above" in row["reason"] and "no other basis answers" in row["reason"]
    assert "--force" in row["reason"]
    (row,) = _predict("example:resnet18", device="epyc", force=True)
    assert row["value"] > 0 and "epyc-torch-t1" in row["basis"]


class _Wild(Predictor):
    """A measured card whose every value hits the sanity ceiling."""

    weight_work = False

    def __init__(self):
        self.name = "wild"

    def answer(self, pg, batches, options, graphs=None, family=None):
        return [{"model": "m", "batch_size": b, "metric": "latency_ms", "unit": "ms", "device": options.device,
                 "phase": "infer", "precision": "amp-fp16", "value": 99.0, "interval": [1.0, 99.0],
                 "in_domain": True, "domain_reasons": [], "outside_space": [], "basis": "measured-device predictor wild",
                 "flags": ["predicted 1e+304 ms is above the sanity ceiling 99 ms (x spec); lowered to it"]}
                for b in batches]


def test_a_value_at_a_sanity_bound_is_refused_with_the_fall_back_beside_it(cell):
    unit = route.Unit("device", "a100-40gb", "a100-40gb", "infer", "fp32")
    got = route.answer_units(cell, [(1, unit)], load=lambda name: _Wild())
    rows, _ = got[1, unit]
    refused, answered = rows  # a100 fp32: no measured card, the wild one is forced in below
    assert refused["value"] is None and "sanity" in refused["reason"]
    assert answered["value"] > 0 and answered["fallback_from"]["basis"] == "measured-device predictor wild"


@pytest.fixture(autouse=True)
def _wild_card_covers_a100(monkeypatch, request):
    if request.node.name.startswith("test_a_value_at_a_sanity_bound"):
        monkeypatch.setattr(route, "measured_predictors",
                            lambda device, phase="infer", precision=None, cards=None: [("wild", "a100/fp32")])


def test_the_cli_says_which_basis_answered_and_why_the_first_was_passed_over(capsys):
    assert main(["predict", NB201, "--device", "rtx4090", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["predictions"]
    assert row["fallback_from"]["reason"] and row["precision"] == "amp-fp16"
    assert main(["predict", NB201, "--device", "rtx4090"]) == 0
    out = capsys.readouterr().out
    assert "fell back from measured-device predictor rtx4090-amp-nchw-pt291.infer" in out
    assert main(["predict", "example:resnet18", "--predictor", "nb201-gpus.infer", "--device", "1080ti"]) != 0
    err = capsys.readouterr().err
    assert "model space" in err and "--force" in err and "Traceback" not in err


# -- item 3: precision --------------------------------------------------------------------------
def test_one_precision_vocabulary_with_aliases():
    assert canonical_precision("amp") == "amp-fp16" and canonical_precision("AMP_BF16") == "amp-bf16"
    assert Options(precision="amp").precision == "amp-fp16" and Options(precision="int4").precision == "int4"
    with pytest.raises(PerfseerError, match="unknown precision.*fp32"):
        Options(precision="fp12")
    assert setting_precision("rtx3090/amp-nchw-pt240") == "amp-fp16"
    assert setting_precision("i9_10940x/fp32-nchw-pt240-dynamo") == "fp32" and setting_precision("1080ti") is None
    assert answers_at("fp16", "amp-fp16") and answers_at(None, "fp32") and not answers_at("fp32", "amp-fp16")


def test_every_row_names_its_precision(cell):
    for kwargs in ({"predictor": "nb201-gpus.infer", "device": "1080ti"}, {"device": "a100-40gb"},
                   {"device": "a100-40gb", "precision": "amp"}, {"device": "l4"}):
        rows = _predict(cell, **kwargs)
        assert rows and all(r.get("precision") for r in rows), kwargs
    assert _predict(cell, device="a100-40gb", precision="amp")[0]["precision"] == "amp-fp16"
    assert _predict(cell, device="a100-40gb")[0]["precision"] == "fp32"


def test_a_comparison_uses_one_precision_for_every_device(cell):
    units, _ = route.plan(["rtx3090", "a100-40gb"], phase="train")
    assert {u.precision for u in units} == {"amp-fp16"}  # the RTX 3090 card's AMP setting
    rows = _predict(cell, device=["rtx3090", "a100-40gb"], phase="train", batch=[8])
    assert {r["precision"] for r in rows} == {"amp-fp16"}
    rows = _predict(cell, device=["rtx4090", "a100-40gb"], precision="fp32")
    assert {r["precision"] for r in rows} == {"fp32"}
    assert not any("rtx4090-amp" in r["basis"] for r in rows)  # the AMP card does not answer fp32


def test_a_basis_that_cannot_answer_at_the_precision_says_so_in_the_row(cell):
    rows = _predict(cell, device=["a100-40gb", "h100-sxm"], precision="fp8")
    assert len(rows) == 2 and all(r["value"] is None and "fp8" in r["reason"] for r in rows)
    with pytest.raises(PerfseerError, match="no fp8 kernels"):  # one device: the error itself
        _predict(cell, device="a100-40gb", precision="fp8")


# -- item 2 of the brief (issue item 3): batch re-binding is right or refused ---------------------
def _tiny_onnx(path, baked: bool) -> str:
    """A conv net exported at a fixed batch of 1; ``baked``: its flatten is a Reshape to ``[1, 256]``
    (what ``torch.onnx.export`` writes for ``x.view(1, -1)`` at batch 1, as for torchvision's ResNets)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"])]
    inits = [numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")]
    if baked:
        inits += [numpy_helper.from_array(np.array([1, 256], np.int64), "shape"),
                  numpy_helper.from_array(np.zeros((256, 10), np.float32), "fc")]
        nodes += [helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["y"])]
    else:
        nodes += [helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_a_fixed_batch_graph_is_refused_at_another_batch_with_the_cause_and_the_fix(tmp_path, capsys):
    path = _tiny_onnx(tmp_path / "fixed.onnx", baked=True)
    pg = perfseer.extract(path, batch=1)
    with pytest.raises(PerfseerError, match="fixed at 1.*no tensor.*scales with the batch.*dynamic_axes.*--batch 1"):
        pg.with_batch(64)
    with pytest.raises(PerfseerError, match="fixed at 1"):
        _predict(path, device="a100-40gb", batch=[1, 64])
    assert _predict(path, device="a100-40gb", batch=[1])[0]["value"] > 0  # its own batch is answered
    assert main(["predict", path, "--device", "a100-40gb", "--batch", "1,64"]) != 0
    err = capsys.readouterr().err
    assert "fixed at 1" in err and "dynamic_axes" in err and "Traceback" not in err


def test_a_static_batch_without_baked_shapes_scales_every_tensor(tmp_path):
    pg = perfseer.extract(_tiny_onnx(tmp_path / "static.onnx", baked=False), batch=1)
    big = pg.with_batch(64)
    assert big.flops == pytest.approx(64 * pg.flops) and big.batch_size == 64
    assert all(t.shape[0] == 64 for t in big.graph.tensors.values() if t.depends_on_batch)
    rows = _predict(pg, device="a100-40gb", batch=[1, 64])
    assert rows[1]["value"] > rows[0]["value"]  # latency grows with the batch


# -- issue item 5, in part: the CLI does not export a model again --------------------------------
def test_a_second_prediction_reads_the_export_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_CACHE", str(tmp_path))
    exported = []
    real = route.load_skeleton

    def export(model, **kwargs):  # stands in for the seconds-long timm export
        exported.append((model, kwargs.get("input_shape")))
        return real("example:resnet18")

    monkeypatch.setattr(route, "load_skeleton", export)
    first = _predict("timm:resnet18", device="a100-40gb", batch=[1, 4])
    second = _predict("timm:resnet18", device="a100-40gb", batch=[1, 4])
    assert exported == [("timm:resnet18", None)] and list(tmp_path.glob("skeletons/*.onnx"))
    assert [r["value"] for r in first] == [r["value"] for r in second]
    _predict("timm:resnet18", device="a100-40gb", input_shape=(3, 224, 224))  # another key: exported again
    assert len(exported) == 2
    monkeypatch.setenv("PERFSEER_CACHE", str(tmp_path / "file"))
    (tmp_path / "file").write_text("")  # a cache that cannot be written: answered all the same
    assert _predict("timm:resnet18", device="a100-40gb")[0]["value"] > 0
