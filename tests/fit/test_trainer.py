"""The trainer: reproducibility, checkpoint resumption, the LR schedule, stopping, multi-task, learning."""

import json

import pytest
import torch
from torch import nn
from train_helpers import TinyConfig, TinyNet, flops_dataset

from perfseer.errors import PerfseerError
from perfseer.fit.trainer import TrainConfig, auto_batch_size, load_checkpoint, train

FAST = dict(batch_size=16, progress=False)


@pytest.fixture(scope="module")
def data():
    return flops_dataset(48, 0), flops_dataset(16, 1), flops_dataset(16, 2)


def run(data, seed=0, model_seed=0, targets=1, **cfg):
    torch.manual_seed(model_seed)
    model = TinyNet(TinyConfig(num_targets=targets, dropout=0.1))
    tr, va, te = data
    return train(model, tr, va, TrainConfig(seed=seed, **{**FAST, **cfg}), test_set=te)


def states_equal(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_same_seed_same_weights(data):
    a, b = run(data, max_epochs=2), run(data, max_epochs=2)
    assert states_equal(a.model.state_dict(), b.model.state_dict())
    assert a.history == [dict(h, seconds=a.history[i]["seconds"]) for i, h in enumerate(b.history)]
    c = run(data, seed=1, max_epochs=2)  # another data order and dropout
    assert not states_equal(a.model.state_dict(), c.model.state_dict())


def test_resume_continues_as_if_never_stopped(data, tmp_path):
    straight = run(data, max_epochs=4, checkpoint_dir=str(tmp_path / "a"), early_stopping_patience=None)
    first = run(data, max_epochs=2, checkpoint_dir=str(tmp_path / "b"), early_stopping_patience=None)
    assert first.epochs_run == 2 and load_checkpoint(tmp_path / "b")[0]["epoch"] == 2
    # another initialisation: the checkpoint's weights, optimizer and RNG state replace it
    resumed = run(data, model_seed=5, max_epochs=4, checkpoint_dir=str(tmp_path / "b"), resume=True,
                  early_stopping_patience=None)
    assert resumed.epochs_run == 4
    assert [h["train_loss"] for h in resumed.history] == [h["train_loss"] for h in straight.history]
    assert states_equal(resumed.model.state_dict(), straight.model.state_dict())
    a, b = load_checkpoint(tmp_path / "a")[1], load_checkpoint(tmp_path / "b")[1]
    assert states_equal(a, b)  # weights, best weights, Adam moments, RNG state
    files = sorted(p.name for p in (tmp_path / "b").iterdir())
    assert files == ["ckpt-4.safetensors", "trainer_state.json"]
    with pytest.raises(PerfseerError, match="other settings \\(lr\\)"):
        run(data, max_epochs=5, lr=0.01, checkpoint_dir=str(tmp_path / "b"), resume=True, early_stopping_patience=None)


class Constant(nn.Module):
    """Output independent of its parameter: the validation loss never improves."""

    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(1))
        self.config = TinyConfig(loss="huber")

    def forward(self, data):
        return data.u[:, :1] * 0 + self.p * 0


def test_lr_halves_on_plateau_down_to_min_and_early_stopping(data):
    tr, va, _ = data
    cfg = TrainConfig(lr=1e-3, lr_patience=1, min_lr=2e-4, early_stopping_patience=8, max_epochs=50, **FAST)
    result = train(Constant(), tr, va, cfg)
    lrs = [h["lr"] for h in result.history]
    # best at epoch 1; the 2nd bad epoch (> patience 1) halves: epochs 3, 5; then the floor
    assert lrs[:6] == pytest.approx([1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4, 2.5e-4])
    assert min(lrs) == pytest.approx(2e-4)
    assert result.stopped == "early_stopping" and result.epochs_run == 9 and result.best_epoch == 1


def test_time_limit_and_huber_from_model_config(data, tmp_path):
    tr, va, _ = data
    result = train(Constant(), tr, va, TrainConfig(time_limit_s=0, checkpoint_dir=str(tmp_path), **FAST))
    assert result.stopped == "time_limit" and result.epochs_run == 1
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    assert state["loss"] == "huber" and state["train_config"]["time_limit_s"] == 0


def test_learns_flops_proportional_latency():
    tr, va, te = flops_dataset(120, 0), flops_dataset(30, 1), flops_dataset(30, 2)
    torch.manual_seed(0)
    result = train(TinyNet(), tr, va, TrainConfig(max_epochs=100, lr=3e-3, batch_size=32, progress=False),
                   targets=["latency_ms"], test_set=te)
    assert result.metrics["test"]["latency_ms"]["mape"] < 10
    assert result.metrics["test"]["latency_ms"]["spearman"] > 0.95
    assert result.predict(te).shape == (30, 1)


@pytest.mark.parametrize("pcgrad", [True, False])
def test_multi_task(pcgrad):
    tr, va = flops_dataset(64, 0, targets=2), flops_dataset(16, 1, targets=2)
    torch.manual_seed(0)
    result = train(TinyNet(TinyConfig(num_targets=2)), tr, va,
                   TrainConfig(max_epochs=8, lr=3e-3, pcgrad=pcgrad, **FAST), targets=["latency_ms", "memory_mb"])
    assert set(result.metrics["val"]) == {"latency_ms", "memory_mb"}
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    for h in result.history:  # PCGrad records how often the two tasks' gradients conflicted
        assert ("conflict_share" in h) == pcgrad
        if pcgrad:
            assert 0.0 <= h["conflict_share"] <= 1.0 and -1.0 <= h["mean_cos"] <= 1.0


def test_bad_input_is_refused(data):
    tr, va, _ = data
    with pytest.raises(PerfseerError, match="non-empty train and val"):
        train(TinyNet(), tr, [], TrainConfig(**FAST))
    with pytest.raises(PerfseerError, match="num_targets"):
        train(TinyNet(TinyConfig(num_targets=2)), tr, va, TrainConfig(max_epochs=1, **FAST))
    with pytest.raises(PerfseerError, match="batch_size"):
        TrainConfig(batch_size=0)
    with pytest.raises(PerfseerError, match="checkpoint_dir"):
        TrainConfig(resume=True)
    if not torch.cuda.is_available():
        with pytest.raises(PerfseerError, match="CUDA is not available"):
            train(TinyNet(), tr, va, TrainConfig(device="cuda", **FAST))
    assert TrainConfig.from_dict(TrainConfig(feature_mask=("edge",)).to_dict()) == TrainConfig(feature_mask=("edge",))


def test_auto_batch_size_gives_about_32_steps_per_epoch(data):
    assert [auto_batch_size(n) for n in (1, 100, 501, 1000, 2000, 4000, 50_000)] == [16, 16, 16, 32, 64, 128, 128]
    result = run(data, max_epochs=1, batch_size=None)  # 48 training graphs: the floor of 16
    assert TrainConfig().batch_size is None and result.config.batch_size == 16
    assert run(data, max_epochs=1, batch_size=8).config.batch_size == 8  # an explicit size is kept


def test_sum_readout_receives_the_target_scaling_and_learns(data):
    # SeerNet-Sum composes costs in milliseconds: the trainer hands it the log-target mean and std,
    # and its first batch sets the offset, so training starts from the right scale
    from perfseer.models.registry import build_model

    torch.manual_seed(0)
    model = build_model("seernet", hidden_dim=16, head_hidden_dim=16, readout="sum")
    tr, va, te = data
    res = train(model, tr, va, TrainConfig(max_epochs=30, lr=3e-3, **FAST), test_set=te)
    ts = res.predictor.target_scaler
    torch.testing.assert_close(model.head.target_mean.double(), torch.as_tensor(ts.mean_), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(model.head.target_std.double(), torch.as_tensor(ts.std_), rtol=1e-6, atol=1e-6)
    assert bool(model.head.initialised)
    assert res.metrics["test"]["target0"]["mape"] < 50  # latency ~ FLOPs is learnt through the sum
