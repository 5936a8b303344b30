"""Asking for a phase, device or basis that cannot answer fails before the model is exported."""

import pytest

from perfseer.cli.main import main
from perfseer.errors import PerfseerError
from perfseer.runtime import route


@pytest.fixture
def no_export(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the model was exported before the request was checked")

    monkeypatch.setattr(route, "cached_extract", boom)
    monkeypatch.setattr(route, "extract", boom)


@pytest.mark.parametrize("kw", [
    {"predictor": "nb201-gpus.infer", "phase": "train"},  # a phase the predictor lacks
    {"predictor": "nb201-gpus.infer", "device": "a100-40gb"},  # a device it lacks
    {"device": "a100-40gb", "basis": "measured"},  # no measured card of that device
    {"device": "a100-40gb", "phase": "train", "basis": "transfer"},  # the transfer answers inference only
    {"device": "no-such-gpu", "basis": "spec"},  # an unknown device
])
def test_an_impossible_request_fails_before_exporting(no_export, kw):
    with pytest.raises(PerfseerError):
        route.predict("timm:resnet50", **kw)


def test_the_cli_names_the_problem_and_the_fix_without_exporting(no_export, capsys):
    assert main(["predict", "timm:resnet50", "--predictor", "nb201-gpus.infer", "--phase", "train"]) != 0
    err = capsys.readouterr().err
    assert "train" in err and "fix" in err.lower() and "Traceback" not in err
