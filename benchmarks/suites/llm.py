"""LLM inference (``perfseer llm``): the operator time model against Vidur's per-operator CUDA times,
and the serving simulator against ML.ENERGY's vLLM runs.

**Operators** (:mod:`benchmarks.lib.llm_fit`): Vidur's per-operator times of one transformer layer
(A100 80GB SXM and A40; 1-4,096 tokens per step, Llama-3 to 32,768; tensor parallel 1-8).  Models
held out of the fit: Llama-3-8B, CodeLlama-34B, InternLM-20B.  Cross-GPU: fitted on the training
models of one GPU, scored on every model of the other.  The shipped constants are fitted on the
training models of both GPUs.  A layer's error is that of a prefill (or mixed) step of that many
tokens without attention (Vidur's snapshot has no attention kernels).

**Serving** (:mod:`benchmarks.lib.llm_mlenergy`): ML.ENERGY's vLLM 0.4-0.5 runs on A100-SXM4-40GB
(bf16, tensor parallel 1-8, max batch 32-1,536); each configuration simulated with the shipped
constants (``perfseer.llm.serving.simulate``, engine ``vllm``); vLLM's per-step overhead was fitted
on the other models' runs.  Assumed prompt lengths (the data gives none): chat = ShareGPT first
turns, mean 200 (SD 150) tokens; code, mean 150 (SD 100); output lengths normal around the
file's mean (SD 0.8 x mean, at most 1,024).
"""

from __future__ import annotations

import os
import time

from benchmarks.lib import llm_fit, llm_mlenergy
from benchmarks.runner import Context, Step, Suite, f, md_table, timing_note

PEERS = [
    ["Vidur (Agrawal et al., MLSys'24)", "serving metrics from per-operator profiles", "< 9 %"],
    ["LLMCompass (Zhang et al., ISCA'24)", "end-to-end latency", "4.1 %"],
    ["GenZ (Bambhaniya et al., 2024)", "end-to-end latency", "5.8 %"],
    ["BLIS (2025)", "end to end / TTFT over real vLLM runs", "11.8 % / 22.8 %"],
]


def _speed() -> dict:
    from perfseer.llm.serving import simulate

    out = []
    for kw in ({"concurrency": 1000}, {"rate": 5.0}, {"concurrency": 64}, {"concurrency": 1000, "chunked_prefill": True}):
        t_wall, t_cpu = time.perf_counter(), time.process_time()
        r = simulate("llama-3.1-8b", "a100-40gb-sxm", prompt_len="200:150", output_len="400:300", requests=1000,
                     max_model_len=4096, **kw)
        out.append({"setting": ", ".join(f"{k} {v}" for k, v in kw.items()), "cpu_s": time.process_time() - t_cpu,
                    "wall_s": time.perf_counter() - t_wall, "steps": r.steps})
    return {"rows": out, "load": list(os.getloadavg())}


def steps(ctx: Context) -> list[Step]:
    tiles = (64,) if ctx.quick else (0, 64, 128)
    limit = 6 if ctx.quick else None
    train_models = sorted({c["model"] for c in llm_mlenergy.configs()} - set(llm_mlenergy.HELD_OUT))
    out = [
        Step("operators", lambda: llm_fit.run(write=False, tiles=tiles, log=ctx.log)),
        Step("serving-heldout", lambda: llm_mlenergy.evaluate(llm_mlenergy.HELD_OUT, limit=limit, log=ctx.log)),
        Step("speed", _speed),
    ]
    if not ctx.quick:
        out.insert(2, Step("serving-train", lambda: llm_mlenergy.evaluate(tuple(train_models), log=ctx.log)))
    return out


def _op_rows(res: dict) -> list[list]:
    names = [("a100_heldout_models", "A100, held-out models (fit: A100 training models)"),
             ("a40_heldout_models", "A40, held-out models (fit: A40 training models)"),
             ("a100_to_a40_all", "A40, every model (fit: A100 training models)"),
             ("a40_to_a100_all", "A100, every model (fit: A40 training models)"),
             ("shipped_heldout_a100", "A100, held-out models (shipped constants)"),
             ("shipped_heldout_a40", "A40, held-out models (shipped constants)")]
    return [[label, res[k]["rows"], f(res[k]["op_mape"]), f(res[k]["op_median_ape"]), f(res[k]["op_weighted_ape"]),
             f(res[k]["layer_mape"])] for k, label in names]


def render(ctx: Context, res: dict[str, dict]) -> str:
    op = res["operators"]
    ops = md_table(["scored on", "operator rows", "per-operator MAPE %", "median %", "time-weighted %",
                    "layer (prefill step w/o attention) MAPE %"], _op_rows(op))
    by_op = op["a100_heldout_models"]["by_op"]
    x40 = op["a100_to_a40_all"]["by_op"]
    per_op = md_table(["operator", "A100 held-out models %", "A40 from A100 fit %"],
                      [[k, f(by_op[k]), f(x40.get(k))] for k in sorted(by_op)])
    h = res["serving-heldout"]
    rows = [[r["model"].split("/")[-1], r["tp"], r["bs"], f(r["tpot_ms"]), f(r["pred_tpot_ms"]),
             f"{100 * r['tpot_err']:+.0f}", f(r["tput"], 0), f(r["pred_tput"], 0), f"{100 * r['tput_err']:+.0f}"]
            for r in h["rows"]]
    serving = md_table(["held-out model", "GPUs", "max batch", "TPOT ms", "predicted", "err %", "tokens/s",
                        "predicted", "err %"], rows)
    train = res.get("serving-train")
    train_line = (f"On the {train['configs']} configurations of the {len(train['models'])} training models: TPOT "
                  f"MAPE {f(train['tpot_mape'])} %, throughput {f(train['tput_mape'])} %.\n\n") if train else ""
    sp = res["speed"]
    speed = md_table(["1,000 requests, Llama-3.1-8B, A100-40GB", "steps", "CPU s", "wall s"],
                     [[r["setting"], r["steps"], f(r["cpu_s"], 2), f(r["wall_s"], 2)] for r in sp["rows"]])
    peers = md_table(["peer (published)", "what", "error"], PEERS)
    quick = " (quick: a subset)" if ctx.quick else ""
    return (
        "## LLM inference (`perfseer llm`)\n\n"
        "Suite `llm` (`python -m benchmarks run llm`): the per-operator time model (roofline with constants fitted "
        "on Vidur's per-operator CUDA times, `python -m benchmarks.lib.llm_fit`) and the serving simulator "
        "(vLLM-style continuous batching, per-step overhead fitted on ML.ENERGY runs of other models, "
        "`python -m benchmarks.lib.llm_mlenergy`).\n\n"
        "**Operators**: Vidur `profiling/compute/{a100,a40}`, models held out of the fit: Llama-3-8B, CodeLlama-34B, "
        "InternLM-20B (A40: CodeLlama-34B, InternLM-20B). Absolute percentage error of each operator's median "
        "CUDA time.\n\n"
        f"{ops}\n\nBy operator:\n\n{per_op}\n\n"
        f"**Serving, held-out models{quick}**: ML.ENERGY leaderboard v2, vLLM 0.4-0.5 on A100-SXM4-40GB, bf16; "
        f"{h['configs']} configurations of {len(h['models'])} models kept out of the overhead fit; TPOT MAPE "
        f"**{f(h['tpot_mape'])} %**, throughput MAPE **{f(h['tput_mape'])} %**. Assumed prompt lengths (not in the "
        "data): chat = ShareGPT first turns, mean 200 (SD 150) tokens; code, mean 150 (SD 100); outputs around the "
        "file's mean (SD 0.8 x mean, at most 1,024); max model length 4,096.\n\n"
        f"{serving}\n\n{train_line}"
        "TTFT has no end-to-end measurement here: it is the prefill step's operators (the layer rows above) plus "
        "attention from the roofline and the fitted per-step overhead; not validated against a measured TTFT.\n\n"
        f"Aims: per-operator <= 10 %, TPOT and throughput <= 10 %, TTFT <= 15 %. Published figures of peers, for "
        f"reference (their data, not ours):\n\n{peers}\n\n"
        f"Simulator speed:\n\n{speed}\n\n"
        f"{timing_note(res)}")


SUITE = Suite(
    name="llm",
    description="LLM operators vs Vidur (held-out models, A100<->A40) and serving vs ML.ENERGY vLLM runs",
    reads="../shared/datasets/vidur/profiling/compute, ../shared/datasets/mlenergy/llm_text_generation",
    time_full="~15 min (three tile fits, 146 serving configurations simulated)",
    time_quick="~4 min (one tile, 6 held-out serving configurations)",
    steps=steps, render=render)
