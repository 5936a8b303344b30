"""perfseer.llm: model shapes, KV-cache bytes, hand-checked FLOPs, answers, bad input, serving, CLI."""

import json

import pytest

import perfseer
from perfseer.errors import PerfseerError
from perfseer.llm import cost
from perfseer.llm.config import LLMConfigError, from_hf_config, list_models, load_config
from perfseer.llm.lengths import LengthsError, parse_lengths
from perfseer.llm.precision import make_quant
from perfseer.llm.predict import LLMInputError, llm
from perfseer.llm.serving import simulate

A100 = "a100-80gb-sxm"


def test_kv_bytes_per_token_of_llama2_7b_fp16_and_llama3_8b():
    # 2 (K and V) x layers x KV heads x head width x 2 bytes
    assert cost.kv_bytes_per_token(load_config("llama-2-7b"), make_quant("fp16")) == 2 * 32 * 32 * 128 * 2 == 524_288
    assert cost.kv_bytes_per_token(load_config("llama-3-8b"), make_quant("bf16")) == 2 * 32 * 8 * 128 * 2 == 131_072
    est = llm("meta-llama/Llama-2-7b-hf", A100, prompt_len=128, output_len=8, precision="fp16")
    assert est.kv_bytes_per_token == 524_288


def test_kv_bytes_follow_the_kv_precision_and_mla():
    q8 = make_quant("bf16", kv_precision="fp8")
    assert cost.kv_bytes_per_token(load_config("llama-3-8b"), q8) == 65_536
    # DeepSeek-V2-Lite caches the 512-wide latent plus the 64-wide rotary key per layer
    assert cost.kv_bytes_per_token(load_config("deepseek-v2-lite"), make_quant("bf16")) == 27 * (512 + 64) * 2


def test_one_decode_step_flops_by_hand():
    # Llama-2-7B, one sequence, one new token over a context of 1,024 (1,023 before it)
    cfg, q = load_config("llama-2-7b"), make_quant("fp16")
    ops = cost.step_ops(cfg, q, cost.StepShape.decode(1, 1023))
    h, f, c = 4096, 11008, 1024
    per_layer = (2 * h * 3 * h          # QKV
                 + 2 * h * h            # output projection
                 + 2 * h * 2 * f        # gate and up
                 + 2 * f * h            # down
                 + 2 * c * 32 * 2 * 128)  # q.k and p.v over 1,024 keys, 32 heads of 128
    expected = 32 * per_layer + 2 * h * 32000  # + LM head for one row
    matmul = sum(o.flops * o.count for o in ops if o.kind in ("gemm", "attn_decode"))
    assert matmul == expected == 32 * (404_750_336 + 16_777_216) + 262_144_000
    # element-wise kernels are a rounding error next to them
    assert cost.step_flops(ops) == pytest.approx(expected, rel=1e-3)


def test_decode_step_reads_the_weights_once():
    cfg, q = load_config("llama-3-8b"), make_quant("bf16")
    ops = cost.step_ops(cfg, q, cost.StepShape.decode(4, 100))
    w = sum(o.weight_bytes * o.count for o in ops if o.kind == "gemm")
    p = cfg.params()
    assert w == pytest.approx((p["total"] - p["embedding"]) * 2, rel=0.001)  # everything but the embedding gather


def test_bundled_models_are_sourced_and_parameter_counts_are_right():
    models = {m.name: m for m in list_models()}
    assert len(models) >= 30 and all(m.source.startswith("https://huggingface.co/") for m in models.values())
    # published sizes (billions): total and, for MoE, active
    for name, total, active in (("llama-2-7b", 6.74, None), ("llama-3-8b", 8.03, None), ("llama-2-70b", 68.98, None),
                                ("mixtral-8x7b", 46.7, 12.9), ("llama-3.1-405b", 405.9, None), ("phi-2", 2.78, None)):
        pc = models[name].params()
        assert pc["total"] / 1e9 == pytest.approx(total, rel=0.02), name
        if active:
            assert pc["active"] / 1e9 == pytest.approx(active, rel=0.03), name


def test_reads_a_local_config_json(tmp_path):
    cfg = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
           "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
           "vocab_size": 32000, "max_position_embeddings": 32768, "sliding_window": 4096, "hidden_act": "silu"}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = load_config(str(p))
    assert (m.kv_heads, m.head_dim, m.sliding_window, m.gated_mlp) == (8, 128, 4096, True)
    assert load_config(str(tmp_path)).hidden == 4096  # a folder holding config.json
    est = llm(str(p), A100, prompt_len=100, output_len=10)
    assert est.kv_bytes_per_token == 131_072
    moe = from_hf_config({**cfg, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert moe.experts == 8 and moe.params()["active"] < moe.params()["total"]


def test_configs_without_a_decoder_or_unknown_names_are_refused(tmp_path):
    with pytest.raises(LLMConfigError, match="without a decoder"):
        from_hf_config({"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 768})
    with pytest.raises(LLMConfigError, match="without a decoder"):
        from_hf_config({"model_type": "t5", "is_encoder_decoder": True})
    with pytest.raises(LLMConfigError, match="close matches: .*llama-3-8b"):
        load_config("llama-3-8")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(LLMConfigError, match="not readable JSON"):
        load_config(str(tmp_path / "bad.json"))
    with pytest.raises(LLMConfigError, match="positive integer"):
        from_hf_config({"model_type": "llama", "hidden_size": -1, "num_hidden_layers": 2, "num_attention_heads": 2,
                        "vocab_size": 10})


def test_answer_is_consistent():
    est = perfseer.llm("llama-3-8b", device=A100, prompt_len=512, output_len=64, batch=4)
    d = est.to_dict()
    for k in ("ttft_ms", "tpot_ms", "tpot_last_ms", "e2e_ms", "output_tokens_per_s", "kv_bytes_per_token",
              "kv_capacity_tokens", "max_concurrent_sequences", "peak_memory_bytes", "breakdown"):
        assert d[k] is not None and (not isinstance(d[k], float) or d[k] > 0), k
    assert est.e2e_ms == pytest.approx(est.ttft_ms + est.tpot_ms * 63, rel=1e-6)
    assert est.tpot_last_ms >= est.tpot_ms
    assert est.output_tokens_per_s == pytest.approx(4 * 64 / est.e2e_ms * 1000)
    m = est.memory
    assert m["kv_capacity_tokens"] == m["kv_blocks"] * 16
    assert m["kv_cache_bytes"] <= 0.9 * m["gpu_memory_bytes"] - m["weights_bytes"] - m["activation_peak_bytes"]
    assert est.max_concurrent_sequences == m["kv_blocks"] // 36  # 576 tokens = 36 blocks
    names = {r["op"] for r in est.breakdown["decode_step"]}
    assert {"qkv_proj", "attn_decode", "mlp_up", "mlp_down", "lm_head", "engine_overhead"} <= names
    kern = llm("llama-3-8b", A100, prompt_len=512, output_len=64, batch=4, engine="none")
    assert kern.tpot_ms < est.tpot_ms


def test_time_grows_the_right_way():
    a = llm("llama-2-7b", A100, prompt_len=256, output_len=32, engine="none")
    slow = llm("llama-2-7b", "a100-40gb-sxm", prompt_len=256, output_len=32, engine="none")
    assert slow.tpot_ms > a.tpot_ms  # 1,555 vs 2,039 GB/s: decode is memory-bound
    q4 = llm("llama-2-7b", A100, prompt_len=256, output_len=32, precision="int4", engine="none")
    assert q4.tpot_ms < 0.5 * a.tpot_ms and q4.weights_only and q4.group_size == 128
    long = llm("llama-2-7b", A100, prompt_len=2048, output_len=32, engine="none")
    assert long.ttft_ms > 6 * a.ttft_ms and long.tpot_ms > a.tpot_ms


def test_mixture_of_experts_mla_and_sliding_window_models_answer():
    for name in ("mixtral-8x7b", "deepseek-v2-lite", "gemma-2-9b", "qwen1.5-moe-a2.7b", "starcoder2-7b"):
        est = llm(name, "h100-sxm", gpus=2 if name == "mixtral-8x7b" else 1, prompt_len=256, output_len=16,
                  max_model_len=4096)
        assert est.ttft_ms > 0 and est.tpot_ms > 0, name
        assert any("none of its layers" in n for n in est.notes)


def test_tensor_parallel_adds_all_reduces():
    est = llm("llama-3-70b", A100, gpus=4, prompt_len=256, output_len=16, batch=2)
    ar = [r for r in est.breakdown["decode_step"] if r["op"] == "allreduce"]
    assert ar and ar[0]["count"] == 160 and ar[0]["ms"] > 0
    with pytest.raises(LLMInputError, match="cannot split evenly"):
        llm("llama-3-8b", A100, gpus=3)


def test_bad_input_is_refused_with_a_fix():
    with pytest.raises(LLMInputError, match="longer than llama-2-7b's maximum context of 4,096"):
        llm("llama-2-7b", A100, prompt_len=4000, output_len=200)
    with pytest.raises(LLMInputError, match=r"use a batch of at most [\d,]+"):
        llm("llama-2-7b", A100, prompt_len=2000, output_len=2000, batch=4096)
    with pytest.raises(PerfseerError, match="unknown precision 'fp7'"):
        llm("llama-2-7b", A100, precision="fp7")
    with pytest.raises(PerfseerError, match="not one an LLM is served at"):
        llm("llama-2-7b", A100, precision="amp-fp16")
    with pytest.raises(LLMInputError, match="does not fit on 1 x a100-80gb-sxm"):
        llm("llama-2-70b", A100)
    with pytest.raises(LLMInputError, match="whole number"):
        llm("llama-2-7b", A100, batch=1.5)
    with pytest.raises(PerfseerError, match="unknown device"):
        llm("llama-2-7b", "a100-90gb")


def test_lengths():
    import numpy as np

    rng = np.random.default_rng(0)
    assert parse_lengths("300").sample(3, rng).tolist() == [300, 300, 300]
    x = parse_lengths("200:50").sample(4000, rng)
    assert abs(x.mean() - 200) < 5 and x.min() >= 1
    for bad in ("0", "-3", "abc", "10:x", "1.5"):
        with pytest.raises(LengthsError):
            parse_lengths(bad)


def test_length_histogram_file(tmp_path):
    import numpy as np

    f = tmp_path / "h.csv"
    f.write_text("length,count\n100,3\n300,1\n")
    x = parse_lengths(str(f)).sample(4000, np.random.default_rng(1))
    assert set(x.tolist()) == {100, 300} and abs(x.mean() - 150) < 10
    (tmp_path / "z.csv").write_text("length,count\n100,0\n")
    with pytest.raises(LengthsError, match="add up to 0"):
        parse_lengths(str(tmp_path / "z.csv"))


def test_serving_simulation():
    r = simulate("llama-3-8b", A100, prompt_len="300:100", output_len="200:100", rate=4.0, requests=300)
    assert r.requests == 300 and r.output_tokens_per_s > 0 and r.steps > 0
    assert r.ttft_ms["p50"] <= r.ttft_ms["p90"] <= r.ttft_ms["p99"]
    assert 0 < r.gpu_busy <= 1.0 + 1e-9
    # the throughput of a light load is the offered load
    assert r.requests_per_s == pytest.approx(4.0, rel=0.2)
    burst = simulate("llama-3-8b", A100, prompt_len=300, output_len=200, concurrency=64, requests=300)
    assert burst.mean_running_batch > 30 and burst.tpot_ms["mean"] > r.tpot_ms["mean"]
    chunked = simulate("llama-3-8b", A100, prompt_len=300, output_len=200, concurrency=64, requests=300,
                       chunked_prefill=True)
    assert chunked.output_tokens_per_s > 0


def test_serving_preempts_when_the_kv_cache_is_full():
    r = simulate("llama-2-7b", "rtx4090", prompt_len=1000, output_len=1000, concurrency=64, requests=80,
                 max_model_len=2048)
    assert r.preemptions > 0 and r.requests == 80 and r.e2e_ms["p99"] > 0


def test_serving_bad_input():
    with pytest.raises(LLMInputError, match="either a request rate or a concurrency"):
        simulate("llama-3-8b", A100)
    with pytest.raises(LLMInputError, match="longer than the maximum model length"):
        simulate("llama-2-7b", A100, prompt_len=4000, output_len=500, rate=1.0)


def test_cli(capsys):
    from perfseer.cli.main import main

    assert main(["llm", "llama-3-8b", "--device", A100, "--batch", "2", "--dtype", "bf16", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kv_bytes_per_token"] == 131072 and d["batch"] == 2
    assert main(["llm", "llama-3-8b", "--device", A100]) == 0
    assert "time to first token" in capsys.readouterr().out
    assert main(["llm", "llama-3-8b", "--device", A100, "--rate", "2", "--requests", "50",
                 "--prompt-len", "200:50"]) == 0
    assert "throughput" in capsys.readouterr().out
    assert main(["llm", "llama-3-8b", "--device", A100, "--precision", "fp7"]) == 2
    assert "unknown precision" in capsys.readouterr().err
    assert main(["llm", "llama-3-8b", "--device", A100, "--energy", "--rate", "1"]) == 2
    assert "not for a serving simulation" in capsys.readouterr().err
    assert main(["llm", "--list"]) == 0
    assert "mixtral-8x7b" in capsys.readouterr().out


def test_energy_per_token_comes_from_the_power_model():
    est = llm("llama-3.1-8b", "a100-40gb-sxm", prompt_len=200, output_len=400, batch=64, energy=True)
    assert 0.01 < est.energy_j_per_token < 10
    assert any("perfseer.energy" in n for n in est.notes)
    with pytest.raises(LLMInputError, match="needs decode steps"):
        llm("llama-3.1-8b", "a100-40gb-sxm", output_len=1, energy=True)


def test_the_projects_hf_configuration_table_is_read_and_encoders_refused():
    assert load_config("hf:gpt2").name == "openai-community/gpt2"
    assert cost.kv_bytes_per_token(load_config("Qwen/Qwen2.5-0.5B"), make_quant("bf16")) == 2 * 24 * 2 * 64 * 2
    with pytest.raises(LLMConfigError, match="without a decoder"):
        load_config("hf:bert-base-uncased")


def test_int4_weights_are_counted_alike_in_memory_and_in_the_decode_step():
    cfg, q = load_config("llama-3-8b"), make_quant("int4")
    ops = cost.step_ops(cfg, q, cost.StepShape.decode(1, 100))
    read = sum(o.weight_bytes * o.count for o in ops if o.kind == "gemm")
    p = cfg.params()
    assert read == pytest.approx(cost.weight_bytes(cfg, q) - p["embedding"] * 2, rel=0.001)
