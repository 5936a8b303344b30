"""Memory per GPU on several GPUs, on a small GPT-2 simulated once on fake tensors."""

import json

import pytest

from perfseer.cli.main import main
from perfseer.memory.api import memory
from perfseer.memory.parallel import fitting_layouts, memory_parallel
from perfseer.parallel.plan import ParallelError, make_plan

SEQ = 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 256, "n_layer": 4, "n_head": 4,
           "n_positions": 64, "n_ctx": 64, "vocab_size": 8000, "bos_token_id": 0, "eos_token_id": 0}
    p = tmp_path_factory.mktemp("cfg") / "small-gpt2.json"
    p.write_text(json.dumps(cfg))
    ref = f"hf:{p}"
    return ref, memory(ref, batch=2, input_shape=(SEQ,))  # the one simulation: batch 2 per GPU


def test_sharding_divides_the_states(tiny):
    ref, single = tiny
    one = memory_parallel(ref, 2, make_plan(1, "dp"), seq_len=SEQ, _single=single)
    z3 = memory_parallel(ref, 8, make_plan(4, "zero3"), seq_len=SEQ, _single=single)
    assert z3.per_gpu_batch == 2 and z3.gpus == 4 and one.total == pytest.approx(single.total, rel=0.02)
    assert z3.breakdown["optimizer_state"] == pytest.approx(single.breakdown["optimizer_state"] / 4, rel=0.01)
    assert z3.total < one.total
    ck = memory_parallel(ref, 2, make_plan(1, "dp"), seq_len=SEQ, checkpoint=True, _single=single)
    assert ck.total <= one.total


def test_checkpoint_refused_without_layers():
    with pytest.raises(ParallelError, match="known layers"):
        memory_parallel("timm:resnet18", 4, make_plan(1, "dp"), checkpoint=True)


def test_layouts_that_fit(tiny):
    ref, single = tiny
    ctx = single.breakdown["context"]
    cap = ctx + 0.6 * (single.total - ctx)
    fits = fitting_layouts(ref, 2, device="a100-40gb-sxm", seq_len=SEQ, capacity_gib=cap / 2**30, _single=single)
    assert fits and all(f["memory_per_gpu_bytes"] <= cap for f in fits)
    assert {f["strategy"] for f in fits} & {"zero3", "fsdp"}


def test_cli_memory_several(tiny, capsys):
    ref, _ = tiny
    assert main(["memory", ref, "--seq-len", str(SEQ), "--batch", "8", "--gpus", "4", "--parallel", "zero2",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    e = rep["estimates"][0]
    assert e["gpus"] == 4 and e["memory_per_gpu_bytes"] == e["total"] and "ZeRO-2 4" in rep["layout"]
    assert main(["memory", ref, "--seq-len", str(SEQ), "--batch", "2", "--gpus", "4", "--parallel", "dp"]) == 2
    assert "smaller than the data-parallel degree" in capsys.readouterr().err


def test_zero_under_mixed_precision_uses_deepspeeds_layout(tiny):
    """ZeRO with amp: 16-bit parameters and gradients, the fp32 master in the optimizer state."""
    ref, single = tiny
    b = single.breakdown
    z2 = memory_parallel(ref, 8, make_plan(4, "zero2"), seq_len=SEQ, precision="amp-fp16", _single=single)
    assert any("DeepSpeed" in n for n in z2.notes)
    assert z2.breakdown["weights"] == pytest.approx(b["weights"] / 2, rel=0.01)
    assert z2.breakdown["optimizer_state"] == pytest.approx((b["optimizer_state"] + b["weights"]) / 4, rel=0.01)
    ddp = memory_parallel(ref, 8, make_plan(4, "dp"), seq_len=SEQ, precision="amp-fp16", _single=single)
    assert not any("DeepSpeed" in n for n in ddp.notes)  # PyTorch DDP keeps autocast's layout
