"""The published formulas the several-GPU memory model follows, on hand-computed cases: ZeRO's
model-state bytes per GPU (Rajbhandari et al. 2020, its 7.5 B / 64-GPU example) and Megatron's
activation bytes per layer (Korthikanti et al. 2022), and the sharding reproducing them."""

import pytest

from perfseer.parallel.plan import ModelFacts, make_plan
from perfseer.parallel.sharding import (deepspeed_mixed_precision, factors, megatron_activation_bytes, shard,
                                        zero_model_state_bytes)

# the 7.5 B GPT of Narayanan et al. (SC21): h 4096, 36 layers, 32 heads; sequence 2048
GPT75 = ModelFacts(name="gpt-7.5b", params=7_500_000_000, param_bytes=4 * 7_500_000_000, layers=36, hidden=4096,
                   heads=32, seq_len=2048, vocab=51200, attention_scores=True)


def test_zero_paper_example_7_5b_on_64_gpus():
    """ZeRO, Figure 1: psi = 7.5 B, Nd = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB."""
    psi, nd = 7.5e9, 64
    assert zero_model_state_bytes(psi, nd, 0) == pytest.approx(120e9)
    assert zero_model_state_bytes(psi, nd, 1) == pytest.approx(30e9 + 90e9 / 64)  # 31.4 GB
    assert zero_model_state_bytes(psi, nd, 2) == pytest.approx(15e9 + 105e9 / 64)  # 16.6 GB
    assert zero_model_state_bytes(psi, nd, 3) == pytest.approx(120e9 / 64)  # 1.875 GB
    assert round(zero_model_state_bytes(psi, nd, 1) / 1e9, 1) == 31.4
    assert round(zero_model_state_bytes(psi, nd, 2) / 1e9, 1) == 16.6
    with pytest.raises(ValueError):
        zero_model_state_bytes(psi, nd, 4)


def test_deepspeed_layout_of_an_autocast_step():
    """PyTorch autocast keeps fp32 parameters (4 psi), fp16 casts (2 psi), fp32 gradients (4 psi) and
    Adam's moments (8 psi); DeepSpeed keeps 2 psi, 2 psi and 12 psi (master + moments)."""
    p = 1000
    amp = {"weights": 4 * p, "weight_casts": 2 * p, "gradients": 4 * p, "optimizer_state": 8 * p, "activations": 7}
    ds = deepspeed_mixed_precision(amp)
    assert ds == {"weights": 2 * p, "weight_casts": 0, "gradients": 2 * p, "optimizer_state": 12 * p,
                  "activations": 7}


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_sharding_reproduces_zero_per_gpu_bytes(stage):
    """The DeepSpeed layout sharded over 64 GPUs is the paper's formula; ZeRO-3 adds the two layers
    it keeps gathered (its prefetch), which the formula leaves out."""
    psi, nd = 7_500_000_000, 64
    states = {"weights": 2 * psi, "gradients": 2 * psi, "optimizer_state": 12 * psi}
    got = shard(states, make_plan(nd, f"zero{stage}"), GPT75)
    extra = 2 * psi * 2 / GPT75.layers if stage == 3 else 0
    assert sum(got.values()) == pytest.approx(zero_model_state_bytes(psi, nd, stage) + extra, rel=1e-9)


def test_megatron_activation_bytes_by_hand():
    s, b, h, a = 2048, 1, 4096, 32
    r = 5 * a * s / h  # 80: the score matrices
    assert megatron_activation_bytes(s, b, h, a, 1) == s * b * h * (34 + r)
    assert megatron_activation_bytes(s, b, h, a, 36, t=8) == pytest.approx(36 * s * b * h * (10 + 24 / 8 + r / 8))
    assert megatron_activation_bytes(s, b, h, a, 1, t=8, sequence_parallel=True) == s * b * h * (34 + r) / 8
    assert megatron_activation_bytes(s, b, h, a, 1, recompute=True) == 2 * s * b * h
    assert megatron_activation_bytes(s, b, h, a, 1, scores=False) == 34 * s * b * h


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tp_activation_share_is_megatron_ratio(t):
    """The share of a single GPU's activations one TP rank keeps is the formula's ratio, with the
    score matrices split too when the attention keeps them."""
    s, b, h, a, L = 2048, 1, 4096, 32, 36
    for facts, scores in ((GPT75, True), (GPT75.with_(attention_scores=False), False)):
        one = megatron_activation_bytes(s, b, h, a, L, scores=scores)
        f = factors(make_plan(t, "tp"), facts)["activations"]
        assert f == pytest.approx(megatron_activation_bytes(s, b, h, a, L, t=t, scores=scores) / one)
        sp = factors(make_plan(t, "tp", sequence_parallel=True), facts)["activations"]
        assert sp == pytest.approx(megatron_activation_bytes(s, b, h, a, L, t=t, sequence_parallel=True,
                                                             scores=scores) / one)
    # full recomputation keeps each layer's input, 2 s b h of 34 + 80, plus one layer recomputed
    ck = factors(make_plan(1, "dp"), GPT75, checkpoint=True)["activations"]
    assert ck == pytest.approx(2 / (34 + 80) + 1 / 36)


@pytest.mark.parametrize("t", [2, 8])
def test_checkpointed_layer_inputs_under_tp(t):
    """Full recomputation keeps each layer's input, 2 s b h: whole on every TP rank (Korthikanti's
    ``2 s b h``), split along the sequence with sequence parallelism (``2 s b h / t``); the layer
    being recomputed is the TP rank's share of one layer."""
    r = 80.0
    a_tp = (10 + (24 + r) / t) / (34 + r)
    ck = factors(make_plan(t, "tp"), GPT75, checkpoint=True)["activations"]
    assert ck == pytest.approx(2 / (34 + r) + a_tp / 36)
    ck_sp = factors(make_plan(t, "tp", sequence_parallel=True), GPT75, checkpoint=True)["activations"]
    assert ck_sp == pytest.approx(2 / (34 + r) / t + (1 / t) / 36)
