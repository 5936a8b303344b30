"""The warm process forwards exactly what the CLI passes to perfseer.predict."""

import argparse
import inspect

from perfseer.api import predict
from perfseer.cli.several import add_arguments, parallel_kwargs
from perfseer.cli.warm import PREDICT_KEYS


def test_warm_keys_are_predict_parameters():
    params = set(inspect.signature(predict).parameters)
    assert set(PREDICT_KEYS) <= params, set(PREDICT_KEYS) - params


def test_several_gpu_options_pass_through_the_warm_process():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--gpus", "4", "--parallel", "dp"])
    kwargs = parallel_kwargs(args)
    assert kwargs["gpus"] == 4 and kwargs["parallel"] == "dp"
    assert set(kwargs) <= set(PREDICT_KEYS), set(kwargs) - set(PREDICT_KEYS)


def test_the_key_is_the_same_for_perfseer_and_python_m(monkeypatch, tmp_path):
    """``perfseer`` (its script's folder first on the import path, started as ``python3``) and
    ``python -m perfseer.cli.warm stop`` (the working folder first, as ``python``) reach the same
    warm process."""
    import os
    import sys

    from perfseer.cli import warm

    here = warm.key()
    alias = tmp_path / "python3"
    os.symlink(os.path.realpath(sys.executable), alias)
    monkeypatch.setattr(sys, "executable", str(alias))
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path[1:])
    assert warm.key() == here
    monkeypatch.setattr(sys, "path", sys.path + ["/somewhere/else"])
    assert warm.key() != here  # the rest of the import path still counts
