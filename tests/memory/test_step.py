"""The simulated step against the same step on real CPU tensors, and its categories by hand."""

import pytest
import torch
from torch import nn

from perfseer.memory.step import MemoryConfigError, SimulationError, StepConfig, trace_step

from .steps import cpu_step, module


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))


PARAM_BYTES = (64 * 128 + 128 + 128 * 10 + 10) * 4


@pytest.mark.parametrize("phase,optimizer", [("infer", "sgd"), ("train", "sgd-momentum"), ("train", "adamw"),
                                             ("train", "adam")])
@pytest.mark.parametrize("backend", ["meta", "fake"])
def test_simulated_step_matches_real_cpu_step(phase, optimizer, backend):
    cfg = cpu_step(phase, optimizer)
    sim = trace_step(mlp(), (64,), 8, cfg, fake=True, backend=backend)
    real = trace_step(mlp(), (64,), 8, cfg, fake=False)
    assert sim.backend == backend
    assert sim.peak()[0] == real.peak()[0]

    def ops(t):  # weights are materialised (simulated) or registered (real): compare what the step allocates
        return [(a.op, a.nbytes) for a in t.allocations if a.phase != "setup"]

    if backend == "fake":
        assert ops(sim) == ops(real)
    else:  # the meta backend makes its (value-less) labels with empty() rather than randint()
        assert [n for _, n in ops(sim)] == [n for _, n in ops(real)]
        assert {o for o, _ in ops(sim)} ^ {o for o, _ in ops(real)} <= {"empty.memory_format", "randint.low"}


def test_categories_of_an_adamw_step():
    t = trace_step(mlp(), (64,), 8, StepConfig(phase="train", optimizer="adamw"))
    by = {}
    for a in t.allocations:
        if not a.host:
            by.setdefault(a.kind(), 0)
            by[a.kind()] += a.nbytes
    assert by["weights"] == PARAM_BYTES
    assert by["input"] == 8 * 64 * 4
    # exp_avg and exp_avg_sq, once (created in step 1, reused in step 2)
    assert by["optimizer_state"] == 2 * PARAM_BYTES
    # one gradient per parameter per step
    assert by["gradients"] == 2 * PARAM_BYTES
    # Adam's step counters: one host scalar per parameter, not device memory
    assert sorted(a.nbytes for a in t.allocations if a.host) == [4] * 4


def test_cuda_dropout_saves_a_bool_mask():
    t = trace_step(mlp(), (64,), 8, StepConfig(phase="train", optimizer="sgd", target="cuda"))
    masks = [a for a in t.allocations if a.op.startswith("native_dropout")]
    assert masks and {a.nbytes for a in masks} == {8 * 128 * 4, 8 * 128}  # output fp32, mask bool


def test_amp_caches_one_fp16_copy_of_each_weight_per_forward():
    t = trace_step(mlp(), (64,), 8, StepConfig(phase="train", optimizer="sgd", precision="amp-fp16"))
    casts = sorted(a.nbytes for a in t.allocations if a.kind() == "weight_casts")
    per_step = sorted([64 * 128 * 2, 128 * 2, 128 * 10 * 2, 10 * 2])
    assert casts == sorted(per_step * 2)  # two steps


def test_data_dependent_model_is_a_clear_error():
    def masked(self, x):
        y = self.fc(x)
        return y[y > 0].sum().reshape(1, 1).expand(x.shape[0], 2)

    with pytest.raises(SimulationError, match="could not be simulated"):
        trace_step(module(masked, fc=nn.Linear(4, 4)), (4,), 2, StepConfig(phase="train", optimizer="sgd"))


def test_bad_config_names_the_choices():
    with pytest.raises(MemoryConfigError, match="use one of: sgd, sgd-momentum, adam, adamw"):
        trace_step(mlp(), (64,), 2, StepConfig(optimizer="lion"))
    with pytest.raises(MemoryConfigError, match="batch size"):
        trace_step(mlp(), (64,), 0, StepConfig())
