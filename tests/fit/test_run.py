"""train_method: every kind of method trained and scored the same way."""

import numpy as np
import pytest
from train_helpers import flops_dataset

from perfseer.errors import PerfseerError
from perfseer.fit.methods import evaluate_method, train_method
from perfseer.fit.trainer import TrainConfig


@pytest.fixture(scope="module")
def split():
    return flops_dataset(40, 0), flops_dataset(10, 1), flops_dataset(10, 2)


@pytest.mark.parametrize("name", ["flops-only", "gbm", "additive"])
def test_baselines(name, split):
    if name == "gbm":
        pytest.importorskip("lightgbm")
    tr, va, te = split
    fitted = train_method(name, tr, va, {"epochs": 5} if name == "additive" else None, targets=["latency_ms"])
    assert not fitted.neural and fitted.predict(te).shape == (10, 1)
    assert set(evaluate_method(fitted, te)["latency_ms"]) >= {"mape", "rmse", "acc10", "kendall"}


def test_neural_model_from_the_registry(split):
    pytest.importorskip("perfseer.models.registry")
    tr, va, te = split
    fitted = train_method("seernet", tr, va, {"hidden_dim": 8, "head_hidden_dim": 8}, targets=["latency_ms"],
                          train_config=TrainConfig(max_epochs=2, batch_size=16, progress=False), test_set=te)
    assert fitted.neural and fitted.train_result.epochs_run == 2 and fitted.config["num_targets"] == 1
    assert np.isfinite(fitted.predict(te)).all()
    assert evaluate_method(fitted, te)["latency_ms"]["n"] == 10


def test_unknown_method_lists_the_choices(split):
    pytest.importorskip("perfseer.models.registry")
    tr, va, _ = split
    with pytest.raises(PerfseerError, match="choose one of additive, gbm, flops, "):
        train_method("seernot", tr, va)
