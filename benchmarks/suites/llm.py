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
    names = [("a100_heldout_models", "A100, held-out models"), ("a40_heldout_models", "A40, held-out models"),
             ("a100_to_a40_all", "A40 from an A100 fit, all models"), ("a40_to_a100_all", "A100 from an A40 fit, all models"),
             ("shipped_heldout_a100", "shipped, A100 held-out"), ("shipped_heldout_a40", "shipped, A40 held-out")]
    return [[label, f(res[k]["op_mape"]), f(res[k]["op_median_ape"]), f(res[k]["layer_mape"])]
            for k, label in names]


def _by_model(rows: list[dict]) -> list[list]:
    out = {}
    for r in rows:
        out.setdefault(r["model"].split("/")[-1], []).append(r)
    return [[m, len(v), ", ".join(sorted({str(r["tp"]) for r in v})),
             f(100 * sum(abs(r["tpot_err"]) for r in v) / len(v)), f(100 * sum(abs(r["tput_err"]) for r in v) / len(v))]
            for m, v in sorted(out.items())]


def render(ctx: Context, res: dict[str, dict]) -> str:
    op = res["operators"]
    ops = md_table(["scored on", "operator MAPE %", "median %", "layer MAPE %"], _op_rows(op))
    worst = sorted(op["a100_heldout_models"]["by_op"].items(), key=lambda kv: -kv[1])[:3]
    xw = sorted(op["a100_to_a40_all"]["by_op"].items(), key=lambda kv: -kv[1])[:3]
    h = res["serving-heldout"]
    serving = md_table(["held-out model", "configs", "GPUs", "TPOT MAPE %", "throughput MAPE %"], _by_model(h["rows"]))
    train = res.get("serving-train")
    train_line = (f" Training models ({train['configs']} configurations): TPOT {f(train['tpot_mape'])} %, "
                  f"throughput {f(train['tput_mape'])} %.") if train else ""
    sp = res["speed"]["rows"]
    quick = " (quick: a subset)" if ctx.quick else ""
    return (
        "## LLM inference (`perfseer llm`)\n\n"
        "**Operators** (`python -m benchmarks.lib.llm_fit`): Vidur's per-operator CUDA times of one layer "
        "(A100 80GB, A40); held out: Llama-3-8B, CodeLlama-34B, InternLM-20B; cross-GPU: fitted on one GPU, scored "
        "on the other. Layer = a prefill step without attention (not in the data). Largest errors (A100 held-out): "
        f"{', '.join(f'{k} {v:.0f} %' for k, v in worst)}; across GPUs: {', '.join(f'{k} {v:.0f} %' for k, v in xw)} "
        "(small element-wise kernels).\n\n"
        f"{ops}\n\n"
        f"**Serving{quick}** (`python -m benchmarks.lib.llm_mlenergy`): ML.ENERGY's vLLM 0.4-0.5 runs on "
        "A100-SXM4-40GB, bf16, simulated with the shipped constants; the per-step overhead was fitted on the other "
        f"models. Held out: {h['configs']} configurations, TPOT MAPE **{f(h['tpot_mape'])} %**, throughput "
        f"**{f(h['tput_mape'])} %**.{train_line} Assumed: chat prompts (ShareGPT first turns) 200 +- 150 tokens, "
        "code 150 +- 100; outputs SD 0.8 x the file's mean, <= 1,024; max model length 4,096.\n\n"
        f"{serving}\n\n"
        "TTFT: no measurement to check it against. Aims: operators, TPOT, throughput <= 10 %, TTFT <= 15 %. "
        "Peers (published, their data): Vidur < 9 %, LLMCompass 4.1 %, GenZ 5.8 %, BLIS 11.8 % e2e / 22.8 % TTFT."
        "\n\n"
        f"Simulator: 1,000 requests (Llama-3.1-8B, A100-40GB) in {f(min(r['cpu_s'] for r in sp), 2)}-"
        f"{f(max(r['cpu_s'] for r in sp), 2)} s of CPU (burst, rate 5/s, 64 clients, chunked). "
        f"{timing_note(res)}")


SUITE = Suite(
    name="llm",
    description="LLM operators vs Vidur (held-out models, A100<->A40) and serving vs ML.ENERGY vLLM runs",
    reads="../shared/datasets/vidur/profiling/compute, ../shared/datasets/mlenergy/llm_text_generation",
    time_full="~15 min (three tile fits, 146 serving configurations simulated)",
    time_quick="~4 min (one tile, 6 held-out serving configurations)",
    steps=steps, render=render)
