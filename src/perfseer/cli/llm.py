"""``perfseer llm``: an LLM's prefill, decode, KV cache and serving throughput on a GPU."""

from __future__ import annotations

import argparse
import json
import math

from perfseer.errors import PerfseerError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "llm", help="LLM inference: time to first token, per output token, KV cache, serving throughput",
        description="A decoder LLM's TTFT, TPOT, latency, throughput and KV-cache capacity (vLLM's rule) for a batch "
                    "on any GPU; with --rate or --concurrency, a simulated vLLM-style serving run. "
                    "See docs/guide/llm.md.")
    p.add_argument("model", nargs="?", default=None, metavar="MODEL",
                   help="a bundled model (--list), its Hugging Face id, or a config.json path")
    p.add_argument("--list", action="store_true", help="list the bundled models and exit")
    p.add_argument("--device", default=None, help="a GPU of 'perfseer devices' (required)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs in tensor parallel (default 1)")
    p.add_argument("--node", default=None, help="node type of the tensor-parallel group (dgx-a100...)")
    p.add_argument("--prompt-len", default="512", metavar="P",
                   help="prompt tokens (default 512); serving: also MEAN:SD or a histogram file")
    p.add_argument("--output-len", default="128", metavar="O",
                   help="output tokens (default 128); serving: also MEAN:SD or a histogram file")
    p.add_argument("--batch", type=int, default=1, help="sequences decoded together (default 1)")
    p.add_argument("--precision", "--dtype", dest="precision", default="bf16",
                   help="weights' format: fp32, fp16, bf16, fp8, int8, int4 (default bf16)")
    p.add_argument("--weights-only", action="store_true", default=None,
                   help="quantize the weights only (W8A16, W4A16); the default for int4")
    p.add_argument("--group-size", type=int, default=None, help="weights per scale of weight-only int4/int8 (default 128)")
    p.add_argument("--kv-precision", default=None, help="KV-cache type (default: the activations')")
    p.add_argument("--engine", choices=("vllm", "none"), default="vllm",
                   help="vllm: add vLLM 0.4-0.5's fitted per-step overhead (default); none: kernels only")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="vLLM's --max-model-len (default: the model's maximum)")
    serve = p.add_argument_group("serving (continuous batching)")
    serve.add_argument("--rate", type=float, default=None, help="requests per second (Poisson arrivals)")
    serve.add_argument("--concurrency", type=int, default=None, help="closed-loop clients")
    serve.add_argument("--requests", type=int, default=1000, help="requests to simulate (default 1000)")
    serve.add_argument("--max-num-seqs", type=int, default=256, help="vLLM's running-batch limit (default 256)")
    serve.add_argument("--max-num-batched-tokens", type=int, default=None, help="vLLM's step token budget")
    serve.add_argument("--chunked-prefill", action="store_true", help="vLLM's --enable-chunked-prefill")
    serve.add_argument("--seed", type=int, default=0, help="seed of the length and arrival draws")
    p.add_argument("--energy", action="store_true", help="also the energy per output token (perfseer.energy's power model)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_llm)


def _int_len(text: str, name: str) -> int:
    try:
        v = float(text)
    except ValueError:
        raise PerfseerError(f"{name} {text!r} is not a number",
                            "a batch answer takes a number; MEAN:SD and files need --rate or --concurrency") from None
    if not math.isfinite(v) or v != int(v):
        raise PerfseerError(f"{name} {text!r} is not a whole number", f"pass {name} as an integer")
    return int(v)


def _ms(v) -> str:
    return "-" if v is None else (f"{v:,.1f} ms" if v >= 1 else f"{v * 1000:,.0f} us")


def _gib(v) -> str:
    return f"{v / 1024 ** 3:,.2f} GiB"


def run_llm(args: argparse.Namespace) -> int:
    from perfseer.llm.config import list_models

    if args.list:
        rows = [m.to_dict() for m in list_models()]
        if args.json:
            print(json.dumps(rows, indent=1))
            return 0
        print(f"{'model':<20} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>3} {'experts':>7} {'context':>8}  source")
        for m in list_models():
            ex = f"{m.experts_per_token}/{m.experts}" if m.experts else "-"
            print(f"{m.name:<20} {m.layers:>6} {m.hidden:>6} {m.heads:>5} {m.kv_heads:>3} {ex:>7} {m.max_context:>8}  "
                  f"{m.source}")
        return 0
    if not args.model:
        raise PerfseerError("no model given", "pass a model (perfseer llm --list shows the bundled ones)")
    if not args.device:
        raise PerfseerError("no device given", "pass --device GPU (perfseer devices --kind gpu lists them)")
    if args.energy and (args.rate is not None or args.concurrency is not None):
        raise PerfseerError("--energy is answered for a batch, not for a serving simulation",
                            "leave out --rate/--concurrency to get energy per token of a batch")
    common = {"gpus": args.gpus, "precision": args.precision, "weights_only": args.weights_only,
              "group_size": args.group_size, "kv_precision": args.kv_precision, "engine": args.engine,
              "max_model_len": args.max_model_len, "node": args.node}
    if args.rate is not None or args.concurrency is not None:
        from perfseer.llm.serving import simulate

        res = simulate(args.model, args.device, prompt_len=args.prompt_len, output_len=args.output_len,
                       rate=args.rate, concurrency=args.concurrency, requests=args.requests,
                       max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                       chunked_prefill=args.chunked_prefill, seed=args.seed, **common)
        d = res.to_dict()
        if args.json:
            print(json.dumps(d, indent=1))
            return 0
        i = d["inputs"]
        print(f"{i['model']} on {i['gpus']} x {i['device']} at {i['precision']}: {d['requests']} requests "
              f"(prompt {i['prompt_len']}, output {i['output_len']}; "
              + (f"{i['rate']:g} req/s" if i["rate"] is not None else f"concurrency {i['concurrency']}") + ")")
        print(f"  throughput     {d['output_tokens_per_s']:,.0f} output tokens/s, {d['requests_per_s']:,.2f} requests/s "
              f"over {d['duration_s']:,.1f} s")
        for k, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("e2e_ms", "end to end")):
            v = d[k]
            print(f"  {name:<14} mean {_ms(v['mean'])}, p50 {_ms(v['p50'])}, p90 {_ms(v['p90'])}, p99 {_ms(v['p99'])}")
        print(f"  GPU busy {d['gpu_busy']:.0%}, mean running batch {d['mean_running_batch']:.1f}, "
              f"KV cache use {d['mean_kv_use']:.0%} of {i['kv_blocks']:,} blocks, {d['preemptions']} preemptions")
        for n in d["notes"]:
            print(f"  note: {n}")
        return 0

    from perfseer.llm.predict import llm

    est = llm(args.model, args.device, prompt_len=_int_len(args.prompt_len, "--prompt-len"),
              output_len=_int_len(args.output_len, "--output-len"), batch=args.batch, energy=args.energy, **common)
    d = est.to_dict()
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    m = d["memory"]
    print(f"{d['model']} on {d['gpus']} x {d['device']} at {d['precision']}"
          + (" (weights only)" if d["weights_only"] and d["precision"] not in ("fp16", "bf16", "fp32") else "")
          + f", KV cache {d['kv_precision']}; batch {d['batch']}, prompt {d['prompt_len']}, output {d['output_len']}"
          + ("" if d["engine"] == "vllm" else " (GPU kernels only)"))
    print(f"  time to first token    {_ms(d['ttft_ms'])}")
    print(f"  time per output token  {_ms(d['tpot_ms'])} mean, {_ms(d['tpot_last_ms'])} at the last token")
    print(f"  end to end             {_ms(d['e2e_ms'])}")
    print(f"  output tokens/s        {d['output_tokens_per_s']:,.0f} for the batch, "
          f"{d['output_tokens_per_s_per_request']:,.1f} per request")
    print(f"  KV cache               {d['kv_bytes_per_token']:,.0f} bytes/token; holds {d['kv_capacity_tokens']:,} tokens = "
          f"{d['max_concurrent_sequences']:,} sequences of {d['prompt_len'] + d['output_len']:,}")
    print(f"    = (0.9 x {_gib(m['gpu_memory_bytes'])} - weights {_gib(m['weights_bytes'])} - profiling activations "
          f"{_gib(m['activation_peak_bytes'])} [{m['profiling_tokens']:,} tokens]) / {m['kv_block_bytes']:,.0f}-byte "
          f"blocks of {m['block_size']}, per GPU")
    if d.get("energy_j_per_token") is not None:
        print(f"  energy per token       {d['energy_j_per_token']:.3g} J (decode, all GPUs)")
    print(f"  peak memory            {_gib(d['peak_memory_bytes'])} per GPU (weights, prefill activations, this "
          f"batch's KV cache)")
    for title, key in (("prefill", "prefill"), (f"one decode step (context {d['breakdown']['decode_step_context']:,})",
                                                "decode_step")):
        rows = sorted(d["breakdown"][key], key=lambda r: -r["ms"])
        total = sum(r["ms"] for r in rows)
        print(f"  {title}: {_ms(total)}")
        for r in rows[:8]:
            print(f"    {r['op']:<20} {_ms(r['ms']):>12} {r['ms'] / total:>6.1%}  x{r['count']}")
    for n in d["notes"]:
        print(f"  note: {n}")
    return 0
