"""Every device at every batch size: zoo models (timm, torchvision, ``hf:``) on every device of
``perfseer devices`` at batch 1-1024 in both phases, through ``perfseer.predict`` as a user calls it;
how many answers were refused, fell back to another basis, or broke monotonicity (a latency that
decreases with the batch, i.e. a throughput that grows faster than the batch).

One resumable step per model (``benchmarks/lib/batch_sweep.py`` says what is counted); the models
are ``benchmarks/configs/sweep.json``.  The counts are exact for the code, the cards and the
registry of the run.
"""

from __future__ import annotations

from benchmarks.lib import batch_sweep
from benchmarks.runner import Context, Step, Suite, load_config, md_table, timing_note


def steps(ctx: Context) -> list[Step]:
    cfg = load_config("sweep")  # benchmarks/configs/sweep.json
    models = cfg["quick"]["models"] if ctx.quick else cfg["models"]
    batches = cfg["quick"]["batches"] if ctx.quick else cfg["batches"]
    return [Step(f"model-{i:03d}-{m.replace(':', '-').replace('/', '-')}",
                 lambda m=m: batch_sweep.sweep_model(m, batches=batches, phases=tuple(cfg["phases"]), log=ctx.log))
            for i, m in enumerate(models)]


def render(ctx: Context, res: dict[str, dict]) -> str:
    results = [v for k, v in sorted(res.items()) if k.startswith("model-")]
    tot = batch_sweep.summarise(results)
    kinds = {}
    for r in results:
        kind = r["model"].split(":")[0]
        k = kinds.setdefault(kind, {"models": 0, "rows": 0, "answered": 0, "fell_back": 0, "refused": 0,
                                    "violations": 0, "extract_errors": 0})
        k["models"] += 1
        k["extract_errors"] += 1 if r.get("extract_error") else 0
        for f in ("rows", "answered", "fell_back", "refused"):
            k[f] += r.get(f, 0)
        k["violations"] += len(r.get("violations", []))
    rows = [[kind, k["models"], k["extract_errors"], k["rows"], k["answered"], k["fell_back"], k["refused"],
             k["violations"]] for kind, k in sorted(kinds.items())]
    rows.append(["all", tot["models"], tot["extract_errors"], tot["rows"], tot["answered"], tot["fell_back"],
                 tot["refused"], tot["violations"]])
    n_dev = len(batch_sweep.devices())
    cfg = load_config("sweep")
    batches = cfg["quick"]["batches"] if ctx.quick else cfg["batches"]
    def short(text: str, n: int = 150) -> str:
        return text if len(text) <= n else text[:n - 3].rstrip() + "..."

    reasons = "".join(f"\n- {n:,} x {short(k)}" for k, n in list(tot["refusal_reasons"].items())[:3])
    falls = "".join(f"\n- {n:,} x {short(k)}" for k, n in list(tot["fallback_reasons"].items())[:3])
    top = sorted(tot["bases"].items(), key=lambda kv: -kv[1])
    bases = ", ".join(f"{k} {n:,}" for k, n in top[:4]) + (f" and {len(top) - 4} more" if len(top) > 4 else "")
    viol = [dict(v, model=r["model"]) for r in results for v in r.get("violations", [])]
    listed = "".join(f"\n- {v['model']} on {v['device']} ({v['phase']}): batch {v['batch'][0]} -> {v['batch'][1]}: "
                     f"{v['latency_ms'][0]:.4g} -> {v['latency_ms'][1]:.4g} ms ("
                     + (short(v['basis'][0], 60) if v['basis'][0] == v['basis'][1]
                        else f"{short(v['basis'][0], 60)} / {short(v['basis'][1], 60)}") + ")"
                     for v in viol[:4]) + (f"\n- ... and {len(viol) - 4} more (`.bench-work/sweep/`)" if len(viol) > 4 else "")
    failed = "".join(f"\n- {r['model']}: {r['extract_error']}" for r in results if r.get("extract_error"))
    return ("## Every device at every batch size\n\n"
            f"`python -m benchmarks run sweep{' --quick' if ctx.quick else ''}`: {tot['models']} zoo models "
            f"(`benchmarks/configs/sweep.json`) x {n_dev} devices of `perfseer devices` x "
            f"{len(cfg['phases'])} phases x batch {', '.join(map(str, batches))}, "
            "one `perfseer.predict` call per model, device and phase. Rows are latency rows; a refused call counts "
            "once per batch size. A violation is a latency that decreases from one batch size to the next "
            "(the same as a throughput growing faster than the batch); every basis answers through the batch "
            f"envelope (`perfseer.runtime.monotone`). {timing_note(res)}\n\n"
            + md_table(["models", "count", "not extracted", "rows", "answered", "fell back", "refused", "violations"], rows)
            + f"\n\nAnswered by: {bases}.\n\nRefusals by kind (numbers as N):{reasons or ' none'}\n\n"
            f"Fall-backs by the reason the first basis was passed over:{falls or ' none'}\n\n"
            f"Violations:{listed or ' none'}\n" + (f"\nModels that did not extract:{failed}\n" if failed else ""))


SUITE = Suite(
    name="sweep", kind="accuracy",
    description="zoo models on every device at batch 1-1024, both phases: refusals, fall-backs, monotonicity",
    reads="timm, torchvision and hf: model code (exported once, kept in the graph cache), the bundled cards",
    time_full="~6-20 h here (109 models at 1.5-12 min each with the machine at load 8-10 and nice 15, the export "
              "of an hf: model most of it; resumable per model: stop it and run it again)",
    time_quick="~30 min (3 models, 6 batch sizes)",
    steps=steps, render=render)
