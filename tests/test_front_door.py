"""The front door: ``perfseer.predict`` answers what ``perfseer predict`` prints, through the one
routing policy, and every basis implements the one answering protocol."""

import json
import warnings

import pytest

import perfseer
from perfseer.cli.main import main
from perfseer.errors import PerfseerError
from perfseer.runtime import route
from perfseer.runtime.answer import Answerer, Options
from perfseer.runtime.predictor import load_predictor
from perfseer.runtime.spec import load_spec_model
from perfseer.runtime.transfer import load_transfer

NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def _strip(rows):
    return [{k: v for k, v in r.items() if k != "predictor"} for r in rows]


def test_the_cli_prints_what_perfseer_predict_returns(capsys):
    for argv, kwargs in (
        (["--predictor", "nb201-gpus.infer", "--device", "1080ti"], {"predictor": "nb201-gpus.infer", "device": "1080ti"}),
        (["--device", "a100-40gb", "--phase", "train"], {"device": "a100-40gb", "phase": "train"}),
    ):
        assert main(["predict", NB201, "--batch", "1,16", "--json", *argv]) == 0
        printed = json.loads(capsys.readouterr().out)["predictions"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            direct = perfseer.predict(NB201, batch=[1, 16], **kwargs)
        assert printed == json.loads(json.dumps(_strip(direct)))
        assert all(r["throughput_per_s"] == pytest.approx(r["batch_size"] * 1e3 / r["value"]) for r in direct)


def test_a_device_alone_is_routed_to_the_best_basis():
    units, _ = route.plan(["rtx4090", "l4", "a100-40gb"], phase="infer", precision=None)
    bases = {u.device: route.resolve(u) for u in units}
    assert bases["rtx4090"].measured == "rtx4090/amp-nchw-pt291"  # a bundled measured card covers it
    assert type(bases["l4"].answerer).__name__ == "TransferPredictor"  # AMP inference, no measured card
    # fp32 on an unmeasured GPU: the spec model, at the precision asked for
    (u,) = route.plan(["a100-40gb"], precision="fp32")[0]
    r = route.resolve(u)
    assert type(r.answerer).__name__ == "SpecModel" and r.options.precision == "fp32"
    assert route.extraction(u) is None  # the spec model takes the default extraction


def test_every_basis_implements_the_answering_protocol():
    for basis in (load_predictor("nb201-gpus.infer"), load_spec_model(), load_transfer()):
        assert isinstance(basis, Answerer), type(basis).__name__
    pg = perfseer.extract(NB201, batch=1)
    rows = load_spec_model().answer(pg, [1, 4], Options(device="a100-40gb", phase="infer"))
    assert [r["batch_size"] for r in rows] == [1, 4] and all(r["precision"] == "fp32" for r in rows)


def test_what_no_basis_answers_yet_is_refused_with_the_reason():
    with pytest.raises(PerfseerError, match="smaller than the data-parallel degree 8"):  # several GPUs: a global batch
        perfseer.predict(NB201, device="a100-40gb", gpus=8)
    with pytest.raises(PerfseerError, match="energy"):
        load_spec_model().answer(perfseer.extract(NB201), [1], Options(device="a100-40gb", energy=True))
    with pytest.raises(PerfseerError, match="precision"):
        Options(precision="fp12")
    with pytest.raises(PerfseerError, match="no fp8 kernels"):  # in the vocabulary, not answered by the spec model
        load_spec_model().answer(perfseer.extract(NB201), [1], Options(device="a100-40gb", precision="fp8"))
    with pytest.raises(PerfseerError, match="device or a predictor"):
        perfseer.predict(NB201)
    with pytest.raises(PerfseerError, match="measured at amp-fp16"):  # a card answers at the precision it measured
        perfseer.predict("example:resnet18", predictor="rtx4090-amp-nchw-pt291.infer", precision="fp32")


def test_a_predictor_that_does_not_cover_the_device_names_what_it_covers():
    with pytest.raises(PerfseerError, match="it covers"):
        route.plan(["rtx4090"], ["nb201-gpus.infer"])
    units, notes = route.plan(["rtx4090"], ["nb201-gpus.infer"], strict=False)  # the service's form
    assert units == [] and "covers none" in notes[0]


def test_answer_units_reports_a_failing_predictor_as_its_note_and_a_bad_device_as_the_error():
    pg = perfseer.extract("example:resnet18", batch=1)
    p4090 = "rtx4090-amp-nchw-pt291.infer"
    bad = route.Unit("predictor", p4090, "rtx4090/amp-nchw-pt291", "infer", precision="fp32")
    rows, notes = route.answer_units(pg, [(1, bad)], errors="note")[1, bad]  # the service's form
    assert rows == [] and p4090 in notes[0] and "fp16" in notes[0]
    with pytest.raises(PerfseerError, match="fp16"):
        route.answer_units(pg, [(1, bad)])
    nowhere = route.Unit("device", "no-such-gpu", "no-such-gpu", "infer")
    with pytest.raises(PerfseerError, match="no-such-gpu"):
        route.answer_units(pg, [(1, nowhere)], errors="note")


def test_old_module_paths_still_work_and_say_where_the_name_went():
    with pytest.warns(DeprecationWarning, match="perfseer.runtime.predictor.load_predictor"):
        from perfseer.predictor import load_predictor as old
    assert old is load_predictor
    with pytest.warns(DeprecationWarning, match="perfseer.fit.calibrate"):
        from perfseer.training import calibrate  # noqa: F401
