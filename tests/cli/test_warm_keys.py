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
