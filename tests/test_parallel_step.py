"""Several-GPU step time and memory: hand-computed cases, layouts refused, the CLI options."""

import pytest

from perfseer.cli.main import main
from perfseer.parallel.collectives import collective_time_ms, volume_factor
from perfseer.parallel.plan import ModelFacts, ParallelError, bubble_fraction, make_plan
from perfseer.parallel.sharding import factors, shard
from perfseer.parallel.step import overlap, step_time


def gpt2_params() -> int:
    """GPT-2 small's parameters from its configuration, by hand (tied embedding)."""
    h, L, V, P, ff = 768, 12, 50257, 1024, 3072
    layer = (2 * h) + (h * 3 * h + 3 * h) + (h * h + h) + (2 * h) + (h * ff + ff) + (ff * h + h)
    return V * h + P * h + L * layer + 2 * h


GPT2 = ModelFacts(name="hf:gpt2", params=gpt2_params(), param_bytes=4 * gpt2_params(), layers=12, hidden=768,
                  heads=12, seq_len=1024, vocab=50257, split_fraction=0.96, act_bytes=2)


def test_gpt2_params_by_hand():
    assert gpt2_params() == 124_439_808  # what perfseer.extract("hf:gpt2").params gives


def test_dp_all_reduce_volume_of_one_gpt2_step():
    n = 8
    st = step_time(make_plan(n, "dp"), GPT2, 64, lambda b: 100.0, gpu="a100-80gb-sxm")
    sent = volume_factor("all_reduce", n) * st.comm["dp"]["bytes_per_gpu"]
    assert st.comm["dp"]["bytes_per_gpu"] == 4 * 124_439_808
    assert sent == pytest.approx(2 * (n - 1) / n * 4 * 124_439_808)  # ring: 871,079,424 bytes each GPU sends
    assert st.comm["dp"]["total_ms"] > st.comm["dp"]["exposed_ms"] > 0  # buckets overlap the backward pass
    assert st.per_gpu_batch == 8 and st.compute_ms == 100.0


def test_1f1b_bubble_four_stages_eight_microbatches():
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    plan = make_plan(4, "pp", microbatches=8)
    st = step_time(plan, GPT2.with_(layers=12), 64, lambda b: 40.0, gpu="a100-80gb-sxm")
    assert st.bubble_ms / st.value == pytest.approx(3 / 11)
    assert st.compute_ms == pytest.approx(8 * 40.0 / 4)


def test_zero3_bytes_per_gpu_for_a_known_param_count():
    p = 1_000_000_000  # 1 B parameters, fp32 weights and grads, AdamW's two fp32 moments
    one = {"weights": 4 * p, "gradients": 4 * p, "optimizer_state": 8 * p, "activations": 0, "context": 0}
    facts = GPT2.with_(layers=48)
    got = shard(one, make_plan(8, "zero3"), facts)
    assert got["weights"] == round(4 * p / 8 + 4 * p * 2 / 48)  # the shard, plus two layers gathered
    assert got["gradients"] == 4 * p // 8 and got["optimizer_state"] == 8 * p // 8
    z1 = shard(one, make_plan(8, "zero1"), facts)
    assert z1["weights"] == 4 * p and z1["gradients"] == 4 * p and z1["optimizer_state"] == p
    ddp = shard(one, make_plan(8, "dp"), facts)
    assert ddp["gradients"] == 8 * p  # DDP's bucket copy


def test_activation_shares_tp_sp_checkpoint():
    f = factors(make_plan(4, "tp"), GPT2)
    assert f["activations"] == pytest.approx((10 + 24 / 4) / 34)
    assert factors(make_plan(4, "tp", sequence_parallel=True), GPT2)["activations"] == pytest.approx(1 / 4)
    assert factors(make_plan(1, "dp"), GPT2, checkpoint=True)["activations"] == pytest.approx(2 / 34 + 1 / 12)
    assert factors(make_plan(4, "pp", microbatches=8, schedule="gpipe"), GPT2)["activations"] == pytest.approx(2.0)


def test_tp_adds_per_layer_all_reduces():
    st = step_time(make_plan(4, "tp"), GPT2, 8, lambda b: 100.0, gpu="a100-80gb-sxm")
    one = collective_time_ms("all_reduce", 8 * 1024 * 768 * 2, 4, gpu="a100-80gb-sxm")
    assert st.comm["tp"]["total_ms"] == pytest.approx(4 * 12 * one)
    assert st.compute_ms == pytest.approx(100.0 * (0.96 / 4 + 0.04))


def test_overlap_of_chunks():
    assert overlap([1, 1, 1], [0, 0, 0], [0.5, 0.5, 0.5]) == pytest.approx(3.5)  # the last reduction sticks out
    assert overlap([1, 1], [3, 0], [0, 0]) == pytest.approx(5.0)  # waits for the first gather


@pytest.mark.parametrize("kw, words", [
    (dict(gpus=8, parallel="tp"), "does not divide the 12 attention heads"),
    (dict(gpus=5, parallel="pp"), "does not divide the 12 layers"),
    (dict(gpus=8, tp=3, pp=2), "not a multiple"),
    (dict(gpus=8, parallel="dp", batch=4), "smaller than the data-parallel degree"),
    (dict(gpus=8, parallel="dp", batch=12), "does not split evenly"),
])
def test_layouts_refused(kw, words):
    batch = kw.pop("batch", 64)
    with pytest.raises(ParallelError, match=words):
        step_time(make_plan(**kw), GPT2, batch, lambda b: 1.0, gpu="a100-80gb-sxm")


def test_cnn_refuses_tp():
    cnn = ModelFacts(name="timm:resnet50", params=25_557_032, param_bytes=4 * 25_557_032)
    with pytest.raises(ParallelError, match="transformers"):
        step_time(make_plan(2, "tp"), cnn, 8, lambda b: 1.0)


@pytest.mark.parametrize("argv, words", [
    (["--gpus", "16", "--parallel", "dp", "--device", "a100-80gb-sxm"], "--nodes 2"),
    (["--gpus", "4", "--microbatches", "4", "--device", "a100-80gb-sxm"], "microbatches without pipeline"),
    (["--gpus", "2", "--parallel", "dp", "--interconnect", "nvlink", "--device", "rtx4090"], "no NVLink"),
    (["--gpus", "2", "--parallel", "dp"], "one --device"),
])
def test_cli_refuses_with_the_fix(capsys, argv, words):
    assert main(["predict", "example:resnet50", "--batch", "8", *argv]) == 2
    assert words in capsys.readouterr().err


def test_cli_bad_option_values_are_parse_errors():
    for argv in (["--gpus", "0"], ["--parallel", "megatron"], ["--interconnect", "carrier-pigeon"]):
        with pytest.raises(SystemExit) as e:
            main(["predict", "example:resnet50", "--device", "a100-80gb-sxm", *argv])
        assert e.value.code == 2


def test_cli_dp_answers_with_the_split(capsys):
    assert main(["predict", "example:resnet50", "--device", "a100-80gb-sxm", "--batch", "64", "--gpus", "4",
                 "--parallel", "dp", "--json"]) == 0
    import json

    row = json.loads(capsys.readouterr().out)["predictions"][0]
    assert row["gpus"] == 4 and row["per_gpu_batch"] == 16 and row["batch_size"] == 64
    assert row["value"] == pytest.approx(row["compute_ms"] + row["comm_ms"] + row["bubble_ms"])
    assert row["comm_ms"] > 0 and row["bubble_ms"] == 0


def test_optimizer_runs_once_on_the_shard():
    plan = make_plan(4, "pp", microbatches=8)
    st = step_time(plan, GPT2, 64, lambda b: 40.0, gpu="a100-80gb-sxm", optimizer_ms=8.0)
    assert st.compute_ms == pytest.approx(8 * (40.0 - 8.0) / 4 + 8.0 / 4)
    z = step_time(make_plan(8, "zero1"), GPT2, 64, lambda b: 40.0, gpu="a100-80gb-sxm", optimizer_ms=8.0)
    assert z.compute_ms == pytest.approx(32.0 + 8.0 / 8)


def test_zero_under_mixed_precision_moves_16_bit_gradients():
    """DeepSpeed's 16-bit model reduces 2 bytes a parameter; PyTorch DDP under autocast fp32 ones."""
    z = step_time(make_plan(8, "zero2"), GPT2, 64, lambda b: 40.0, gpu="a100-80gb-sxm")
    assert z.comm["dp"]["bytes_per_gpu"] == 2 * GPT2.params
    ddp = step_time(make_plan(8, "dp"), GPT2, 64, lambda b: 40.0, gpu="a100-80gb-sxm")
    assert ddp.comm["dp"]["bytes_per_gpu"] == GPT2.param_bytes == 4 * GPT2.params
    fp32 = step_time(make_plan(8, "zero2"), GPT2.with_(act_bytes=4), 64, lambda b: 40.0, gpu="a100-80gb-sxm")
    assert fp32.comm["dp"]["bytes_per_gpu"] == 4 * GPT2.params
