"""Fit vLLM's per-step overhead on ML.ENERGY's serving runs and score TPOT and throughput on held-out
models.

Data: ``../shared/datasets/mlenergy/llm_text_generation/{chat,code}/A100-SXM4-40GB/{org}/{model}/
bs{B}+tp{T}+pp{P}.json`` (ML.ENERGY leaderboard v2, Apache-2.0): vLLM (0.4-0.5) on A100-SXM4-40GB,
bf16, ``max_num_seqs`` = B, T GPUs in tensor parallel; every request of the set sent at once; the
mean time per output token (``Avg TPOT``) and the output-token throughput.  Pipeline-parallel runs
(P > 1) are left out (not modelled).

Each configuration is simulated by :func:`perfseer.llm.serving.simulate` (500 requests arriving
together).  Assumed lengths (the files give only the mean output length):

- prompts: chat = ShareGPT first turns, normal with mean 200 and SD 150 tokens (clipped to
  4-1,024); code = mean 150, SD 100 (clipped to 4-1,024);
- outputs: normal with SD 0.8 x mean, clipped to 1-1,024 (``max_tokens``), its mean set to the
  file's ``Avg Output Tokens``;
- ``max_model_len`` 4,096 (the runs cannot have used Llama-3.1's 131,072 on a 40 GB GPU).

The engine overhead ``a + b x sequences + d x (GPUs - 1)`` per step (scheduling, sampling,
Python; sending each step's inputs to the other tensor-parallel workers) is
linear in the simulated step log, so it is fitted by non-negative least squares on the relative
errors of TPOT and of time per output token (1/throughput) over the *training* models; the scores
are the simulator with the fitted constants on the held-out models.

Run: ``python -m benchmarks.lib.llm_mlenergy [--write]`` (``--write`` updates
``perfseer/llm/data/engine.json``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from perfseer.llm.lengths import Lengths
from perfseer.llm.predict import ENGINE, Engine, engine_constants
from perfseer.llm.serving import simulate

ROOT = Path(__file__).resolve().parents[2]
MLE = ROOT.parent / "shared" / "datasets" / "mlenergy" / "llm_text_generation"
DEVICE = "a100-40gb-sxm"
HELD_OUT = ("meta-llama/Meta-Llama-3.1-8B-Instruct", "mistralai/Mixtral-8x7B-Instruct-v0.1", "google/gemma-2-27b-it",
            "codellama/CodeLlama-34b-hf", "bigcode/starcoder2-15b", "microsoft/Phi-3-medium-4k-instruct")
PROMPTS = {"chat": (200.0, 150.0), "code": (150.0, 100.0)}
N_REQUESTS = 500
MAX_MODEL_LEN = 4096


def _truncnorm(mean: float, sd: float, lo: int, hi: int, target_mean: float | None = None) -> Lengths:
    """A histogram of a normal clipped to [lo, hi]; with ``target_mean`` its location is moved so that
    the clipped mean is the target."""
    x = np.arange(lo, hi + 1, dtype=float)

    def hist(mu):
        w = np.exp(-0.5 * ((x - mu) / max(sd, 1e-9)) ** 2)
        return w / w.sum()

    mu = mean
    if target_mean is not None:
        a, b = -4.0 * hi, 4.0 * hi
        for _ in range(60):
            mu = (a + b) / 2
            if float((hist(mu) * x).sum()) < target_mean:
                a = mu
            else:
                b = mu
    w = hist(mu)
    keep = w > 1e-12
    return Lengths("histogram", float((w * x).sum()), values=tuple(int(v) for v in x[keep]),
                   weights=tuple(float(v) for v in w[keep]), text=f"normal {mean:g}:{sd:g} clipped {lo}-{hi}")


def configs(root: Path = MLE) -> list[dict]:
    out = []
    for f in sorted(root.glob("*/A100-SXM4-40GB/*/*/*.json")):
        m = re.match(r"bs(\d+)\+tp(\d+)\+pp(\d+)\.json", f.name)
        if not m:
            continue
        bs, tp, pp = map(int, m.groups())
        d = json.loads(f.read_text())
        task = f.parts[-5]
        model = d["Model"]
        out.append({"task": task, "model": model, "bs": bs, "tp": tp, "pp": pp, "file": str(f.relative_to(root)),
                    "tpot_ms": d["Avg TPOT (s)"] * 1000.0, "tput": d["Token tput (tok/s)"],
                    "out_mean": d["Avg Output Tokens"], "avg_bs": d["Avg BS (reqs)"]})
    return out


def simulate_config(c: dict, engine: str = "none", keep_trace: bool = True):
    pm, ps = PROMPTS[c["task"]]
    prompts = _truncnorm(pm, ps, 4, 1024)
    outs = _truncnorm(c["out_mean"], 0.8 * c["out_mean"], 1, 1024, target_mean=c["out_mean"])
    eng = Engine(c["model"], DEVICE, gpus=c["tp"], precision="bf16", engine=engine)
    n = max(N_REQUESTS, 3 * c["bs"])  # enough requests to keep the largest batches full
    return simulate(c["model"], DEVICE, prompt_len=prompts, output_len=outs, concurrency=n,
                    requests=n, max_num_seqs=c["bs"], max_model_len=min(MAX_MODEL_LEN, eng.cfg.max_context),
                    keep_trace=keep_trace, eng=eng)


def linear_terms(res) -> tuple[np.ndarray, np.ndarray]:
    """(TPOT, time per output token) as ``base + [a, b, c] @ terms`` (us), from a trace."""
    tr = res.trace
    k, s, t = tr["kernel_us"], tr["seqs"].astype(float), tr["tokens"].astype(float)
    P = [np.concatenate([[0.0], np.cumsum(v)]) for v in (k, np.ones_like(k), s, t)]
    first, last, gen = tr["first_step"], tr["last_step"], tr["generated"]
    ok = gen > 1
    rows = np.array([(p[last[ok] + 1] - p[first[ok] + 1]) / (gen[ok] - 1) for p in P])  # 4 x requests
    tpot = rows.mean(axis=1)
    total = np.array([p[-1] for p in P]) / float(gen.sum())
    return tpot, total


def features(vec: np.ndarray, tp: int) -> np.ndarray:
    """The terms multiplying (a, b, d): steps, sequences over steps, steps x (GPUs - 1)."""
    return np.array([vec[1], vec[2], vec[1] * (tp - 1)])


def run(write: bool = False, log=print) -> dict:
    cfgs = [c for c in configs() if c["pp"] == 1]
    if not cfgs:
        raise SystemExit(f"error: no ML.ENERGY data under {MLE}")
    train = [c for c in cfgs if c["model"] not in HELD_OUT]
    test = [c for c in cfgs if c["model"] in HELD_OUT]
    A, y = [], []
    for c in train:
        tpot, per_tok = linear_terms(simulate_config(c))
        for vec, meas in ((tpot, c["tpot_ms"] * 1000.0), (per_tok, 1e6 / c["tput"])):
            A.append(features(vec, c["tp"]) / meas)
            y.append(1.0 - vec[0] / meas)
    from scipy.optimize import nnls

    A, y = np.asarray(A), np.asarray(y)
    scale = np.abs(A).max(axis=0) + 1e-12
    coef, _ = nnls(A / scale, y)
    a, b, d = (coef / scale).tolist()
    log(f"engine overhead fitted on {len(train)} training configurations: a = {a:.0f} us/step, "
        f"b = {b:.1f} us/sequence, d = {d:.0f} us/step per extra GPU")
    consts = {"a_us": a, "b_us_per_seq": b, "d_us_per_extra_gpu": d}
    if write:
        out = {"format": "perfseer.llm.engine", "format_version": 1,
               "fitted_by": "python -m benchmarks.lib.llm_mlenergy --write",
               "vllm": {**consts, "version": "vLLM 0.4-0.5 (ML.ENERGY leaderboard v2 runs)",
                        "data": "ML.ENERGY leaderboard v2, A100-SXM4-40GB, bf16, pipeline parallel 1",
                        "train_models": sorted({c["model"] for c in train}), "held_out_models": list(HELD_OUT),
                        "assumed": {"prompt_len": PROMPTS, "output_len": "normal, SD 0.8 x mean, clipped 1-1024",
                                    "max_model_len": MAX_MODEL_LEN, "requests": N_REQUESTS}}}
        ENGINE.write_text(json.dumps(out, indent=1) + "\n")
        engine_constants.cache_clear()
        log(f"wrote {ENGINE}")
    rows = []
    for split, group in (("train", train), ("held-out", test)):
        for c in group:
            tpot, per_tok = linear_terms(simulate_config(c))
            w = np.array([a, b, d])
            p_tpot = (tpot[0] + features(tpot, c["tp"]) @ w) / 1000.0
            p_tput = 1e6 / (per_tok[0] + features(per_tok, c["tp"]) @ w)
            rows.append({"split": split, "task": c["task"], "model": c["model"], "bs": c["bs"], "tp": c["tp"],
                         "tpot_ms": c["tpot_ms"], "pred_tpot_ms": p_tpot, "tput": c["tput"], "pred_tput": p_tput,
                         "tpot_err": p_tpot / c["tpot_ms"] - 1, "tput_err": p_tput / c["tput"] - 1})
    summary = {}
    for split in ("train", "held-out"):
        r = [x for x in rows if x["split"] == split]
        summary[split] = {"configs": len(r), "models": len({x["model"] for x in r}),
                          "tpot_mape": float(np.mean([abs(x["tpot_err"]) for x in r]) * 100),
                          "tput_mape": float(np.mean([abs(x["tput_err"]) for x in r]) * 100)}
        log(f"{split:>8}: {summary[split]['configs']} configs of {summary[split]['models']} models: "
            f"TPOT MAPE {summary[split]['tpot_mape']:.1f} %, throughput MAPE {summary[split]['tput_mape']:.1f} %")
    by_model = {}
    for x in rows:
        if x["split"] == "held-out":
            by_model.setdefault(x["model"], []).append(x)
    for m, r in by_model.items():
        log(f"   {m}: TPOT {np.mean([abs(x['tpot_err']) for x in r]) * 100:.1f} %, throughput "
            f"{np.mean([abs(x['tput_err']) for x in r]) * 100:.1f} % ({len(r)} configs)")
    return {"engine": consts, "summary": summary, "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="update perfseer/llm/data/engine.json")
    args = ap.parse_args(argv)
    run(write=args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def evaluate(models=HELD_OUT, limit: int | None = None, log=print) -> dict:
    """The shipped constants through the product path (:func:`simulate` with ``engine="vllm"``) on
    the configurations of ``models``: TPOT and throughput errors per configuration."""
    cfgs = [c for c in configs() if c["pp"] == 1 and c["model"] in models]
    if limit:
        cfgs = cfgs[:limit]
    rows = []
    for c in cfgs:
        res = simulate_config(c, engine="vllm", keep_trace=False)
        rows.append({"task": c["task"], "model": c["model"], "bs": c["bs"], "tp": c["tp"], "tpot_ms": c["tpot_ms"],
                     "pred_tpot_ms": res.tpot_ms["mean"], "tput": c["tput"], "pred_tput": res.output_tokens_per_s,
                     "avg_bs": c["avg_bs"], "pred_avg_bs": res.mean_running_batch,
                     "tpot_err": res.tpot_ms["mean"] / c["tpot_ms"] - 1,
                     "tput_err": res.output_tokens_per_s / c["tput"] - 1})
        log(f"{c['model']} bs{c['bs']} tp{c['tp']}: TPOT {c['tpot_ms']:.1f} -> {res.tpot_ms['mean']:.1f} ms, "
            f"throughput {c['tput']:.0f} -> {res.output_tokens_per_s:.0f} tok/s")
    return {"rows": rows, "configs": len(rows), "models": sorted({r["model"] for r in rows}),
            "tpot_mape": float(np.mean([abs(r["tpot_err"]) for r in rows]) * 100) if rows else None,
            "tput_mape": float(np.mean([abs(r["tput_err"]) for r in rows]) * 100) if rows else None}
