"""``perfseer memory hf:NAME``: HuggingFace language models simulated in training, with the
token-level loss and attention dropout as CUDA runs them (small configurations: seconds)."""

from __future__ import annotations

import json

import pytest
import torch

from perfseer.sources import hf
from perfseer.memory.api import memory, resolve_model
from perfseer.memory.emulate import _cuda_dropout_sdpa

pytest.importorskip("transformers")

B, T, L, D, H = 2, 32, 2, 64, 4  # batch, tokens, layers, width, heads


def gpt2(tmp_path, **overrides) -> str:
    config, _ = hf.resolve_config("gpt2")
    config.update({"n_layer": L, "n_embd": D, "n_head": H, "n_positions": 64, "vocab_size": 1000,
                   "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, **overrides})
    path = tmp_path / f"gpt2_{abs(hash(json.dumps(overrides, sort_keys=True)))}.json"
    path.write_text(json.dumps(config))
    return f"hf:{path}"


def test_hf_training_is_simulated_with_ids_and_tied_weights_once(tmp_path):
    ref = gpt2(tmp_path)
    src = resolve_model(ref, (T,))
    assert src.input_shape == (T,) and src.input_dtype == "int64" and src.loss == "tokens"
    model, _ = hf.build_model(hf.parse_reference(ref[3:]))
    params = sum(p.numel() for p in model.parameters())  # the tied LM head once
    est = memory(ref, batch=B, phase="train", optimizer="adamw", input_shape=(T,))
    assert est.method == "simulation"
    assert est.breakdown["weights"] == pytest.approx(params * 4, rel=0.01)
    assert est.breakdown["optimizer_state"] == pytest.approx(2 * params * 4, rel=0.01)
    inf = memory(ref, batch=B, phase="infer", input_shape=(T,))
    assert inf.method == "simulation" and inf.total < est.total


def test_the_language_model_loss_holds_fp32_log_probabilities(tmp_path):
    # a larger vocabulary adds at least its fp32 logits and log-probabilities at the loss
    small = memory(gpt2(tmp_path), batch=B, phase="train", input_shape=(T,))
    large = memory(gpt2(tmp_path, vocab_size=5000), batch=B, phase="train", input_shape=(T,))
    grown = large.peak_tensor_bytes - small.peak_tensor_bytes
    assert grown >= 2 * B * T * 4000 * 4


def test_attention_dropout_saves_no_attention_matrix_on_cuda(tmp_path):
    # CUDA's memory-efficient kernel: dropout in attention keeps only the output and a log-sum-exp
    # per query, not the B x H x T x T probabilities and mask the CPU's math kernel saves
    plain = memory(gpt2(tmp_path), batch=B, phase="train", input_shape=(T,))
    drop = memory(gpt2(tmp_path, attn_pdrop=0.1), batch=B, phase="train", input_shape=(T,))
    matrices = L * B * H * T * T * 4
    assert drop.breakdown["activations"] - plain.breakdown["activations"] < matrices / 2


def test_cuda_dropout_sdpa_choice():
    q = torch.empty(2, 4, 16, 64, device="meta", requires_grad=True)
    assert _cuda_dropout_sdpa(q, q, q, dropout_p=0.0) is None  # no dropout: the usual choice
    assert _cuda_dropout_sdpa(q, q, q, dropout_p=0.1, enable_gqa=True) is None  # math on CUDA too
    out = _cuda_dropout_sdpa(q, q, q, dropout_p=0.1, is_causal=True)
    assert out.shape == q.shape
    mask = torch.ones(2, 1, 16, 16, dtype=torch.bool, device="meta")
    assert _cuda_dropout_sdpa(q, q, q, attn_mask=mask, dropout_p=0.1).shape == q.shape


def test_a_transformers_model_object_is_simulated_like_its_reference(tmp_path):
    import transformers

    ref = gpt2(tmp_path)
    config = transformers.GPT2Config(**json.loads(open(ref[3:]).read()))
    config.use_cache = True
    model = transformers.GPT2LMHeadModel(config)
    forward = model.forward
    est = memory(model, batch=B, phase="train", input_shape=(T,))
    by_ref = memory(ref, batch=B, phase="train", input_shape=(T,))
    assert est.method == "simulation" and est.model == "GPT2LMHeadModel"
    assert est.breakdown["weights"] == by_ref.breakdown["weights"]
    assert est.total == pytest.approx(by_ref.total, rel=0.05)
    assert model.config.use_cache is True and model.forward == forward  # the user's model untouched
    assert next(model.parameters()).device.type == "cpu"
    with pytest.raises(Exception, match="token ids"):
        resolve_model(model, (3, 32))


def test_cli_seq_len_gives_the_tokens(tmp_path, capsys):
    from perfseer.cli.main import main

    assert main(["memory", gpt2(tmp_path), "--seq-len", str(T), "--batch", str(B), "--phase", "infer",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["input_shape"] == [T]
