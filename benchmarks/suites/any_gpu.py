"""Any GPU: every GPU with labels held out in turn, every cell (model kind, phase, precision).

The any-GPU operator model (:mod:`perfseer.specmodel.anygpu`) fitted on the other GPUs' rows,
against the bundled spec model (kernel networks, zero-shot) and the roofline; the route's choice
per cell made on the other GPUs' leave-one-out scores only.  Data: ``benchmarks/lib/anygpu_data.py``
(gpu-benchmark torchvision CNNs, the timm benchmark's RTX GPUs, HELP's NAS-Bench-201 GPUs,
perfseer's H200 collection, NeuSight's transformer runs, Vidur's LLM operators); kernel tables cached under
``.bench-work/anygpu-cache`` (resumable).  ``--quick``: a quarter of the models.
"""

from __future__ import annotations

import json

import pandas as pd

from benchmarks.lib import anygpu_logo
from benchmarks.runner import ROOT, Context, Step, Suite, f, md_table, run_main

CARD = ROOT / "src" / "perfseer" / "predictors" / "spec-anygpu.json"
AIMS = {"transformer": 10.0, "cnn": 15.0}
BASES = anygpu_logo.BASES


def steps(ctx: Context) -> list[Step]:
    argv = ["--cache", str(ROOT / ".bench-work" / "anygpu-cache")] + (["--quick"] if ctx.quick else [])
    return [Step("logo", lambda: run_main(anygpu_logo.main, argv, ctx.work / "logo.json"))]


def render(ctx: Context, res: dict[str, dict]) -> str:
    r = res["logo"]
    per_df, route = anygpu_logo.route_facts(pd.DataFrame(r["per_gpu"]))  # the current rule, nested
    per = per_df.to_dict(orient="records")
    cells = sorted({x["cell"] for x in per})
    by = {(x["gpu"], x["cell"]): x for x in per}

    def pair(x) -> str:
        mark = "*" if x["route_choice"] != "anygpu" else ""
        return f"{f(x['route_mape'])}{mark} ({f(x['roofline_mape'])})"

    t1 = [[gpu, *(pair(by[gpu, c]) if (gpu, c) in by else "" for c in cells)]
          for gpu in sorted({x["gpu"] for x in per})]
    summary = {c: {"gpus": len(p), **{b: float(p[f"{b}_mape"].mean()) for b in (*BASES, "route")}}
               for c, p in per_df.groupby("cell")}
    t2 = []
    for cell, s in sorted(summary.items()):
        kind = cell.split("/")[0]
        gpus = [x for x in per if x["cell"] == cell]
        aim = AIMS.get(kind)  # none for Vidur's single operators (llm-op): no aim in the issue
        within = sum(1 for x in gpus if aim is not None and x["route_mape"] <= aim)
        t2.append([cell, s["gpus"], *(f(s[b]) for b in BASES), f"**{f(s['route'])}**",
                   f"{within} of {len(gpus)} (≤ {aim:g} %)" if aim is not None else "", route[cell]["choice"]])
    card_note = ""
    if CARD.exists():
        card = json.loads(CARD.read_text())
        same = all(card.get("route", {}).get(c, {}).get("choice") == v["choice"] for c, v in route.items())
        card_note = (f"The bundled card's route facts ("
                     f"`python -m benchmarks.lib.anygpu_logo --fit-all CARD --from-logo .bench-work/any-gpu/logo.json`) "
                     f"{'agree with' if same else 'DIFFER from'} the last column.")
    return ("## Any GPU: every GPU held out in turn\n\n"
            f"`python -m benchmarks run any-gpu{' --quick' if ctx.quick else ''}` "
            f"({r['rows']} steps on {len(r['gpus'])} GPUs; {r['cpu_s']:.0f} s CPU).  Each GPU's any-GPU "
            "constants are fitted on the other GPUs; spec model: the kernel networks, zero-shot "
            "(`seen`: trained on its kernels); roofline: sum of max(FLOPs / peak, bytes / bandwidth); blend: "
            "their geometric mean.  Route: any-GPU unless another basis is 20 % better on 3+ *other* GPUs "
            "of the vendor (fewer: kind and phase).  Per held-out GPU and cell (kind/phase/precision, the cells it "
            "has labels for): the route's MAPE % and, in brackets, the roofline's; `*`: the route took another "
            "basis than the any-GPU model there (sources: `benchmarks/lib/anygpu_data.py`; every basis per GPU in "
            "`.bench-work/any-gpu/logo.txt` after a run).\n\n"
            + md_table(["held-out GPU", *cells], t1)
            + "\n\n**Per cell**: mean over held-out GPUs of the per-GPU MAPE % (aims: ≤ 10 % transformers, ≤ 15 % "
              "CNNs per GPU and phase); the card's choice: the rule on every NVIDIA GPU, what the spec basis "
              "answers with.\n\n"
            + md_table(["cell", "GPUs", "any-GPU", "spec model", "roofline", "blend", "route", "GPUs within the aim",
                        "card's choice"], t2)
            + (f"\n\n{card_note}" if card_note else ""))


SUITE = Suite(
    name="any-gpu",
    description="any-GPU operator model vs spec model vs roofline, every GPU held out in turn, every labelled cell",
    reads="../shared/datasets (gpu-benchmark, neusight), datasets/timm, datasets/nb201, datasets/h200, the spec card",
    time_full="~10 min once the kernel tables are cached (building them: ~40 min, exporting torchvision and H200 models)",
    time_quick="~4 min once cached",
    steps=steps, render=render)
