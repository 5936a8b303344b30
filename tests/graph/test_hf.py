"""``hf:`` references (perfseer.sources.hf): HuggingFace transformers from their configuration.

Counts are checked against hand computations (written out in ``tests/hf_counts.py``).  Exporting a full-size model
takes tens of seconds, so most tests build the real widths (hidden size, heads, vocabulary) with
one layer, where the graph is exactly the formula; the full model is the same formula with its
real layer count (GPT-2 and the T5-small encoder, extracted at full size, check the repetition), and its parameter count is checked on the model built on the meta device
(nothing exported).  GPT-2 and the T5-small encoder are extracted at full size.

Notation: B batch, S tokens, d hidden size, h heads, f feed-forward width, L layers, V vocabulary,
P positions.  Matmul FLOPs are 2 per MAC; the other FLOPs follow each operator's convention
(``perfseer ops``): LayerNormalization 7 per element (5 + scale and shift), Softmax 5, Gelu 5,
element-wise ops 1 (gelu_new is 8 element-wise ops: x*0.5, x^3, *0.044715, +, *sqrt(2/pi), tanh,
+1, *).  ``F.scaled_dot_product_attention`` is written by the exporter as
``MatMul(q*sqrt(s), k^T*sqrt(s))`` (2 S d scale FLOPs), ``Add(mask)``, ``Softmax``,
``Where(IsNaN)`` (a fully masked row gives 0, not NaN), ``MatMul(., v)``: 8 FLOPs per score
besides the matmuls (mask 1, softmax 5, guard 2).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper

import perfseer
from helpers import make_model
from hf_counts import bert_mlm_counts, gpt2_counts, opt_counts
from perfseer.errors import MissingDependencyError, ModelLoadError, ShapeError, UnsupportedModelError
from perfseer.features.schema import NODE_FEATURES
from perfseer.sources import hf

pytest.importorskip("transformers")

F32 = 4


def local(tmp_path, name: str, **overrides) -> str:
    """``hf:PATH`` of a config.json holding ``name``'s shipped values with ``overrides``."""
    config, _ = hf.resolve_config(name)
    config.update(overrides)
    path = tmp_path / f"{name.replace('/', '_')}.json"
    path.write_text(json.dumps(config))
    return f"hf:{path}"


def col(pg, feature: str) -> np.ndarray:
    return pg.x[:, NODE_FEATURES.index(feature)]


def meta_params(name: str) -> int:
    """Parameters of the model built on the meta device, each tied tensor once."""
    model, _ = hf.build_model(hf.parse_reference(name))
    return sum(p.numel() for p in model.parameters())


# -- hand counts: tests/hf_counts.py -------------------------------------------------------------

@pytest.mark.parametrize("name,layers,counts,full", [
    # GPT-2 large: d 1280, 36 layers, 20 heads, V 50257, P 1024 -> 774,030,080 parameters
    ("gpt2-large", {"n_layer": 1}, lambda L, S, B: gpt2_counts(1280, L, 20, 50257, 1024, S, B),
     (36, 774_030_080)),
    # BERT-large (BertForMaskedLM): d 1024, 24 layers, 16 heads, f 4096, V 30522 -> 335,174,458
    ("bert-large-uncased", {"num_hidden_layers": 1},
     lambda L, S, B: bert_mlm_counts(1024, L, 16, 4096, 30522, 512, S, B), (24, 335_174_458)),
    # OPT-1.3B: d 2048, 24 layers, 32 heads, f 8192, V 50272, P 2048 -> 1,315,758,080
    ("facebook/opt-1.3b", {"num_hidden_layers": 1},
     lambda L, S, B: opt_counts(2048, L, 32, 8192, 50272, 2048, S, B), (24, 1_315_758_080)),
])
def test_params_macs_flops_by_hand(tmp_path, name, layers, counts, full):
    # Real widths, one layer, 16 tokens, batch 3: every count equals the hand formula.
    pg = perfseer.extract(local(tmp_path, name, **layers), seq_len=16, batch=3)
    params, macs, flops = counts(1, 16, 3)
    assert (pg.params, pg.macs, pg.flops) == (params, macs, flops)
    # the same formula at the real depth is the real model's parameter count
    depth, published = full
    assert counts(depth, 16, 1)[0] == published == meta_params(name)
    # and FLOPs re-bind with the batch exactly
    assert pg.with_batch(1).flops == counts(1, 16, 1)[2]


# -- tied weights -----------------------------------------------------------------------------------

def test_gpt2_full_size_tied_head_counted_once_read_twice():
    pg = perfseer.extract("hf:gpt2", seq_len=8)
    # 124,439,808 = the hand formula; the LM head is the token embedding (V d = 38,597,376) once
    assert pg.params == gpt2_counts(768, 12, 12, 50257, 1024, 8)[0] == 124_439_808
    names = [n.name for n in pg.graph.nodes]
    head = names.index("lm_head/MatMul")
    gather = names.index("transformer.wte/Gather")
    read = col(pg, "memory_access_bytes") - col(pg, "input_bytes") - col(pg, "output_bytes")
    # the embedding lookup reads the 8 gathered rows; the LM head reads the whole matrix again
    assert read[gather] == 8 * 768 * F32
    assert read[head] == 50257 * 768 * F32
    assert col(pg, "params")[gather] == 50257 * 768 and col(pg, "params")[head] == 0


def test_t5_small_encoder_full_size():
    # T5EncoderModel: shared embedding 32128 x 512 (= encoder.embed_tokens, once), 6 blocks of
    # q,k,v,o 4 d^2 + wi, wo 2 d f + 2 RMS-norm scales 2d, relative position bias 32 x 8,
    # final norm d: 16,449,536 + 6 * 3,146,752 + 256 + 512 = 35,330,816
    pg = perfseer.extract("hf:t5-small@encoder", seq_len=8)
    d, f = 512, 2048
    assert pg.params == 32128 * d + 6 * (4 * d * d + 2 * d * f + 2 * d) + 32 * 8 + d == 35_330_816
    assert pg.graph.inputs == ("input_ids",)


def test_albert_shared_layers_counted_once_read_per_layer(tmp_path):
    # ALBERT runs one set of layer weights 3 times: parameters once, weight reads 3 times.
    ref = local(tmp_path, "albert-base-v2", num_hidden_layers=3, hidden_size=64, num_attention_heads=4,
                intermediate_size=128, embedding_size=32, vocab_size=1000)
    pg = perfseer.extract(ref, seq_len=8)
    d, f, e = 64, 128, 32
    layer = 4 * (d * d + d) + 2 * d + d * f + f + f * d + d + 2 * d
    embeddings = 1000 * e + 512 * e + 2 * e + 2 * e + e * d + d  # word, position, type, LN, projection
    head = e * d + e + 2 * e + 1000  # MLM head: dense to e, LN, decoder bias (decoder tied)
    assert pg.params == embeddings + layer + head
    qkv = [i for i, n in enumerate(pg.graph.nodes) if "attention.query/MatMul" in n.name]
    assert len(qkv) == 3
    read = col(pg, "memory_access_bytes") - col(pg, "input_bytes") - col(pg, "output_bytes")
    assert [read[i] for i in qkv] == [d * d * F32] * 3


def test_untied_head_when_config_says_so():
    # FLAN-T5 ships its own LM head (tie_word_embeddings: false); transformers 5 would tie it.
    # t5-base and flan-t5-base have equal feed-forward sizes (2 * 768 * 3072 = 3 * 768 * 2048),
    # so the difference is the head: 32128 * 768 = 24,674,304.
    assert meta_params("flan-t5-base") - meta_params("t5-base") == 32128 * 768
    assert meta_params("flan-t5-base") == 247_577_856


# -- attention forms --------------------------------------------------------------------------------

def test_attention_forms_same_matmuls_fused_reads_less(tmp_path):
    # GPT-2, d 64, 4 heads, S 32: SDPA (exported as its math), HF's eager attention and the fused
    # ONNX Attention node compute the same MACs; the fused node never writes the h S^2 scores.
    ref = local(tmp_path, "gpt2", n_layer=1, n_embd=64, n_head=4, vocab_size=1000)
    S, h, d = 32, 4, 64
    graphs = {a: perfseer.extract(f"{ref}@{a}", seq_len=S) for a in ("sdpa", "eager", "fused")}
    macs = {a: pg.macs for a, pg in graphs.items()}
    assert macs["sdpa"] == macs["eager"] == macs["fused"] == gpt2_counts(d, 1, h, 1000, 1024, S)[1]
    fused = graphs["fused"]
    att = [i for i, op in enumerate(fused.op_types) if op == "Attention"]
    assert len(att) == 1
    # one Attention: QK^T and PV 2 h S^2 (d/h) MACs; 7 FLOPs per score (scale, causal mask, softmax)
    assert col(fused, "macs")[att[0]] == 2 * h * S * S * (d // h)
    assert col(fused, "flops")[att[0]] == 2 * 2 * h * S * S * (d // h) + 7 * h * S * S
    # it reads q, k, v (3 S d floats) and the S x S boolean causal mask, writes S d floats
    assert col(fused, "memory_access_bytes")[att[0]] == 4 * S * d * F32 + S * S
    scores = h * S * S * F32
    assert graphs["sdpa"].memory_access_bytes - fused.memory_access_bytes > 4 * scores


# -- encoder-decoder and decoder models export with caches off --------------------------------------

@pytest.mark.parametrize("name,overrides,inputs", [
    ("t5-small", dict(num_layers=1, num_decoder_layers=1, d_model=64, d_ff=128, d_kv=16, num_heads=4,
                      vocab_size=1000), ("input_ids", "decoder_input_ids")),
    ("whisper-tiny", dict(encoder_layers=1, decoder_layers=1, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
                          encoder_attention_heads=4, decoder_attention_heads=4, num_mel_bins=8,
                          max_source_positions=50), ("input_features", "decoder_input_ids")),
])
def test_decoders_export_without_cache(tmp_path, name, overrides, inputs):
    pg = perfseer.extract(local(tmp_path, name, **overrides), seq_len=8, batch=2)
    assert pg.graph.inputs == inputs
    assert len(pg.graph.outputs) == 1  # logits only: no present key/value outputs
    assert pg.uncovered_ops == {}
    logits = pg.graph.tensors[pg.graph.outputs[0]]
    assert logits.shape[:2] == (2, 8)


def test_llama_grouped_query_without_cache(tmp_path):
    # Llama: q, o d x d; k, v d x (d kv/h); gate, up, down 3 d f; no biases; head untied.
    d, f, h, kv, V, S = 64, 128, 4, 2, 1000, 8
    pg = perfseer.extract(local(tmp_path, "llama-3-8b", num_hidden_layers=1, hidden_size=d, intermediate_size=f,
                                num_attention_heads=h, num_key_value_heads=kv, vocab_size=V), seq_len=S)
    assert pg.graph.inputs == ("input_ids",) and len(pg.graph.outputs) == 1 and pg.uncovered_ops == {}
    dkv = d * kv // h
    assert pg.params == V * d + (2 * d * d + 2 * d * dkv + 3 * d * f + 2 * d) + d + V * d
    assert pg.macs == S * (2 * d * d + 2 * d * dkv + 3 * d * f) + 2 * S * S * d + S * d * V


# -- sequence length --------------------------------------------------------------------------------

def test_seq_len_input_shape_and_limit(tmp_path):
    ref = local(tmp_path, "gpt2", n_layer=1, n_embd=64, n_head=4, vocab_size=1000)
    parsed = hf.parse_reference(ref[3:])
    # a measurement table's input_shape column (24,) is the sequence length; seq_len wins over it
    assert hf._seq_len(parsed, (24,), None) == 24 and hf._seq_len(parsed, (24,), 12) == 12
    assert hf._seq_len(parsed, None, None) == hf.DEFAULT_SEQ_LEN == 128
    by_shape = perfseer.extract(ref, input_shape=(24,))
    assert by_shape.flops == gpt2_counts(64, 1, 4, 1000, 1024, 24)[2]
    with pytest.raises(ShapeError, match="at most 1024 tokens.*n_positions"):
        perfseer.extract(ref, seq_len=2048)
    with pytest.raises(ShapeError, match="one dimension besides the batch"):
        perfseer.extract(ref, input_shape=(3, 224, 224))


def test_seq_len_binds_symbolic_sequence_dims_of_onnx():
    # x (batch, sequence_length, 16) @ w (16, 32): --seq-len binds the symbolic sequence dim
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    model = make_model([node], {"x": ("N", "sequence_length", 16)}, ["y"],
                       {"w": np.zeros((16, 32), np.float32)})
    pg = perfseer.extract(model, batch=2, seq_len=10)
    assert pg.macs == 2 * 10 * 16 * 32
    plain = make_model([node], {"x": ("N", 5, 16)}, ["y"], {"w": np.zeros((16, 32), np.float32)})
    with pytest.raises(ShapeError, match="no.*symbolic input dimensions: none|has none"):
        perfseer.extract(plain, seq_len=10)


# -- bad input --------------------------------------------------------------------------------------

def test_unknown_name_suggests_close_matches_and_local_config():
    with pytest.raises(ModelLoadError) as e:
        hf.parse_reference("gpt2-larg")
    assert "gpt2-large" in str(e.value) and "config.json" in str(e.value)


def test_bad_option_and_bad_local_config(tmp_path):
    with pytest.raises(ModelLoadError, match="unknown option '@flash'"):
        hf.parse_reference("gpt2@flash")
    with pytest.raises(ModelLoadError, match="does not exist"):
        hf.parse_reference(str(tmp_path / "config.json"))
    (tmp_path / "x.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ModelLoadError, match="no 'model_type'"):
        hf.parse_reference(str(tmp_path / "x.json"))
    with pytest.raises(ModelLoadError, match="not an encoder-decoder"):
        hf.build_model(hf.parse_reference("gpt2@encoder"))


def test_neusight_configs_by_label_stem():
    # NeuSight's gpt2_large is GPT-2 large; its label files are named gpt2_large-inf-1024-4.json...
    assert hf.parse_reference("neusight/gpt2_large").config["n_layer"] == 36
    assert {"neusight/bert_large", "neusight/gpt3_xl", "neusight/opt_13"} <= set(hf.known_models())


def test_missing_transformers_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    with pytest.raises(MissingDependencyError, match=r"pip install 'perfseer\[hf\]'"):
        hf.build_model(hf.parse_reference("gpt2"))


def test_export_failure_names_the_cause_without_colour_codes(tmp_path):
    # Switch Transformers' router casts its classifier inside forward (module.to()), which
    # torch.export cannot trace: the message says so and where, as plain text.
    ref = local(tmp_path, "neusight/switchxl4", num_layers=2, num_decoder_layers=2, num_sparse_encoder_layers=1,
                num_sparse_decoder_layers=1, d_model=32, d_ff=64, d_kv=8, num_heads=4, vocab_size=100)
    with pytest.raises(UnsupportedModelError) as e:
        perfseer.extract(ref, seq_len=4)
    msg = str(e.value)
    assert "\x1b[" not in msg
    assert "Couldn't swap Linear.weight" in msg and "modeling_switch_transformers.py" in msg


@pytest.mark.parametrize("name,published", [
    # parameter counts of the released checkpoints (each tied tensor once)
    ("t5-small", 60_506_624), ("meta-llama/Llama-2-7b-hf", 6_738_415_616), ("mistral-7b", 7_241_732_096),
    ("openai/whisper-tiny", 37_760_640), ("Qwen/Qwen2.5-0.5B", 494_032_768), ("bert-base-uncased", 109_514_298),
    ("facebook/opt-125m", 125_239_296), ("bloom-560m", 559_214_592),
])
def test_shipped_configs_give_the_released_parameter_counts(name, published):
    assert meta_params(name) == published


def test_half_precision_option(tmp_path):
    # @fp16: the same graph with 2-byte weights and activations
    ref = local(tmp_path, "gpt2", n_layer=1, n_embd=64, n_head=4, vocab_size=1000)
    pg = perfseer.extract(f"{ref}@fp16", seq_len=8)
    assert pg.params == gpt2_counts(64, 1, 4, 1000, 1024, 8)[0]
    assert pg.graph.tensors[pg.graph.outputs[0]].dtype == "float16"
    qkv = [n.name for n in pg.graph.nodes].index("transformer.h.0.attn.c_attn/Gemm")
    assert col(pg, "weight_bytes")[qkv] == (64 * 192 + 192) * 2


def test_transformers_module_objects_export_without_cache():
    # A user's own transformers model object: cache off in a copy (the user's config keeps its
    # setting), inputs by name from its forward signature, encoder and decoder lengths apart.
    transformers = pytest.importorskip("transformers")
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=64, n_head=4, vocab_size=1000))
    pg = perfseer.extract(gpt2, input_shape=(16,))
    assert pg.params == gpt2_counts(64, 1, 4, 1000, 1024, 16)[0] and pg.graph.inputs == ("input_ids",)
    assert len(pg.graph.outputs) == 1 and gpt2.config.use_cache is True
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(num_layers=1, d_model=64, d_ff=128, d_kv=16,
                                                                       num_heads=4, vocab_size=1000))
    pg = perfseer.extract(t5, input_shape=[(16,), (8,)])
    assert pg.graph.inputs == ("input_ids", "decoder_input_ids")
    assert [pg.graph.tensors[i].shape for i in pg.graph.inputs] == [(1, 16), (1, 8)]
    assert pg.graph.tensors[pg.graph.outputs[0]].shape == (1, 8, 1000)  # logits: no cache outputs


def test_root_cause_is_plain_text_with_the_model_line():
    # The exporter's wrapper messages are coloured and generic; the cause is the innermost one.
    from perfseer.graph.torch_export import root_cause

    def model_forward():
        raise RuntimeError("Cannot swap t1 because it has weakref associated with it")

    try:
        try:
            try:
                model_forward()
            except RuntimeError as inner:
                raise RuntimeError("_apply(): Couldn't swap Linear.weight") from inner
        except RuntimeError as middle:
            raise ValueError("Failed to export the model. \x1b[96mThis is step 1/3\x1b[0m of exporting") from middle
    except ValueError as outer:
        text = root_cause(outer)
    assert text.startswith("RuntimeError: Cannot swap t1") and "(in: _apply(): Couldn't swap Linear.weight)" in text
    assert "\x1b" not in text and "step 1/3" not in text
    # this test file is model code as far as the filter knows: its raising line is named
    assert "test_hf.py:" in text and "raise RuntimeError(\"Cannot swap" in text
