"""The Python front door on several GPUs: ``perfseer.predict(..., gpus=, parallel=, memory=True)``
puts the memory per GPU on the rows, ``perfseer.memory(..., gpus=, parallel=)`` answers one GPU's
share, both the same numbers as :func:`perfseer.memory.parallel.memory_parallel`."""

import inspect

import pytest

import perfseer
from perfseer.errors import PerfseerError
from perfseer.memory.parallel import ParallelMemory, memory_parallel
from perfseer.parallel.plan import ParallelError, make_plan

GPU = "a100-40gb"


def test_predict_with_memory_puts_the_memory_per_gpu_on_the_rows():
    rows = perfseer.predict("example:resnet18", device=GPU, batch=[16], gpus=2, parallel="zero3", phase="infer",
                            memory=True)
    (row,) = rows
    pm = perfseer.memory("example:resnet18", batch=16, phase="infer", gpus=2, parallel="zero3", device=GPU)
    assert isinstance(pm, ParallelMemory) and pm.per_gpu_batch == 8 and pm.layout == "2 GPUs: ZeRO-3 2"
    assert row["memory_per_gpu_bytes"] == pm.total > 0 and row["memory_fits"] is pm.fits is True
    same = memory_parallel("example:resnet18", 16, make_plan(2, "zero3"), phase="infer", device=GPU)
    assert same.total == pm.total
    assert row["value"] == pytest.approx(row["compute_ms"] + row["comm_ms"] + row["bubble_ms"])


def test_memory_and_checkpoint_are_documented_keywords_of_predict():
    params = inspect.signature(perfseer.predict).parameters
    assert params["memory"].default is False and params["checkpoint"].default is False
    assert "memory_per_gpu_bytes" in perfseer.predict.__doc__
    assert {"gpus", "parallel", "tp", "pp", "dp", "checkpoint"} <= set(inspect.signature(perfseer.memory.memory).parameters)


def test_refusals():
    with pytest.raises(PerfseerError, match="add memory=True"):
        perfseer.predict("example:resnet18", device=GPU, batch=[16], gpus=2, parallel="dp", checkpoint=True)
    with pytest.raises(ParallelError, match="smaller than the data-parallel degree 4"):
        perfseer.memory("example:resnet18", batch=2, phase="infer", gpus=4, parallel="dp")
    with pytest.raises(ParallelError, match="answer one GPU"):
        perfseer.memory("example:resnet18", batch=8, phase="infer", gpus=2, parallel="dp", mig=True)
