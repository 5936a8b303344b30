"""The batch ratio of the spec model on held-out multi-batch measurements: anchored against plain.

Outside a measured training card's step domain the routing answers ``card(b*) x spec(b) /
spec(b*)`` (:mod:`perfseer.runtime.anchor`) or, plain, ``spec(b)``.  Which is closer is measured
here on every step measured at two or more batch sizes on one GPU (same model, phase and
precision) in the any-GPU model's leave-one-GPU-out (``python -m benchmarks run any-gpu``: each
GPU's rows predicted by the any-GPU model fitted on the other GPUs only, and by the zero-shot
kernel spec model), with the measured time at ``b*`` standing for the card:

    anchored error = |t(b*) x p(b) / p(b*) - t(b)| / t(b),   plain error = |p(b) - t(b)| / t(b)

over every ordered pair ``(b*, b)``, ``b* != b``; NAS-Bench-201's 32x32 cells (inference at batch 1, 32
and 256; outside the timm cards' model space, where the routing passes a card over anyway) apart.  The
timm benchmark's rows are left out: it measured one batch per model and resolution, and a model's rows
at two batch sizes there are two resolutions.  A card's own error at ``b*`` adds to the
anchored one (the RTX 3090 training card: 6.1 % k-fold MAPE at its measured batch), so the table
also gives the plain error of the RTX 3090's own training rows (held out in the leave-one-GPU-out).

    python -m benchmarks.lib.step_anchor .bench-work/any-gpu/logo.json [--write]

``--write``: store the 90 % quantile of the training pairs' |log ratio error| (any-GPU model) as the
anchored interval's widening, ``src/perfseer/runtime/data/anchor.json`` (:mod:`perfseer.runtime.anchor`).
"""

from __future__ import annotations

import json
import re
import sys
from itertools import permutations
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]

BASES = {"anygpu": "any-GPU operator model (the route's spec basis)", "spec": "kernel spec model (zero-shot)"}


def base_model(r) -> str:
    return re.sub(r"-\d+$", "", r["model"]) if r["source"] == "neusight" else r["model"]


def pairs(pred: pd.DataFrame) -> pd.DataFrame:
    """One row per ordered pair ``(b*, b)`` of one GPU, model, phase and precision."""
    d = pred[pred["source"] != "timm"].copy()  # timm: one batch per (model, resolution); its rows carry no shape
    d["base"] = [base_model(r) for _, r in d.iterrows()]
    d["phase"] = d["cell"].str.split("/").str[1]
    out = []
    for (src, gpu, base, cell), g in d.groupby(["source", "gpu", "base", "cell"]):
        g = g.groupby("batch", as_index=False).first()  # one row per batch
        if len(g) < 2:
            continue
        for (_, a), (_, b) in permutations(g.iterrows(), 2):
            row = {"source": src, "gpu": gpu, "model": base, "cell": cell, "phase": a["phase"], "b_star": int(a["batch"]),
                   "b": int(b["batch"]), "t_star": a["measured_ms"], "t": b["measured_ms"]}
            for k in BASES:
                row[f"{k}_plain"] = abs(b[f"{k}_ms"] - b["measured_ms"]) / b["measured_ms"] * 100
                row[f"{k}_anchored"] = abs(a["measured_ms"] * b[f"{k}_ms"] / a[f"{k}_ms"] - b["measured_ms"]) \
                    / b["measured_ms"] * 100
                row[f"{k}_logratio"] = float(np.log((b["measured_ms"] / a["measured_ms"]) / (b[f"{k}_ms"] / a[f"{k}_ms"])))
            out.append(row)
    return pd.DataFrame(out)


def summary(logo: dict) -> dict:
    pred = pd.DataFrame(logo["predictions"])
    pred = pred[pred["anygpu_ms"].notna() & pred["spec_ms"].notna() & (pred["measured_ms"] > 0)]
    p = pairs(pred)
    groups = {}
    cells = p["source"] == "nb201"  # NAS-Bench-201's 32x32 cells: outside the timm cards' model space
    for name, part in (("train", p[p["phase"] == "train"]), ("infer", p[(p["phase"] == "infer") & ~cells]),
                       ("infer-nb201", p[(p["phase"] == "infer") & cells]), ("all", p)):
        if not len(part):
            continue
        g = {"pairs": len(part), "gpus": sorted(part["gpu"].unique()), "steps": int(part.groupby(
            ["gpu", "model", "cell"]).ngroups)}
        for k in BASES:
            g[k] = {"plain_mape": float(part[f"{k}_plain"].mean()), "anchored_mape": float(part[f"{k}_anchored"].mean()),
                    "ratio_q90": float(np.quantile(np.abs(part[f"{k}_logratio"]), 0.9))}
        groups[name] = g
    per_gpu = []
    for (gpu, phase), part in p.groupby(["gpu", "phase"]):
        per_gpu.append({"gpu": gpu, "phase": phase, "pairs": len(part),
                        **{f"{k}_{m}": float(part[f"{k}_{m}"].mean()) for k in BASES for m in ("plain", "anchored")}})
    own = pred[(pred["gpu"] == "rtx3090") & pred["cell"].str.contains("/train/")]
    rtx = {"rows": len(own), **{f"{k}_plain_mape": float((np.abs(own[f"{k}_ms"] - own["measured_ms"])
                                                                / own["measured_ms"]).mean() * 100) for k in BASES}}
    return {"logo_command": logo.get("command"), "logo_meta": logo.get("_meta"), "groups": groups, "per_gpu": per_gpu,
            "rtx3090_train": rtx, "train_pairs": p[p["phase"] == "train"].to_dict(orient="records")}


WIDENING = ROOT / "src" / "perfseer" / "runtime" / "data" / "anchor.json"


def widening(s: dict, logo_path: str) -> dict:
    """The anchored interval's widening from a :func:`summary`: the training pairs, any-GPU model."""
    g = s["groups"]["train"]
    return {"ratio_q90": round(g["anygpu"]["ratio_q90"], 4), "pairs": g["pairs"], "gpus": g["gpus"],
            "basis": "any-GPU model, each GPU held out", "logo": str(logo_path),
            "command": f"python -m benchmarks.lib.step_anchor {logo_path} --write"}


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    write = "--write" in args
    paths = [a for a in args if a != "--write"]
    path = paths[0] if paths else ".bench-work/any-gpu/logo.json"
    s = summary(json.loads(Path(path).read_text()))
    print(json.dumps({k: v for k, v in s.items() if k != "train_pairs"}, indent=1))
    if write:
        tmp = WIDENING.with_suffix(".tmp")
        tmp.write_text(json.dumps(widening(s, path), indent=1) + "\n")
        tmp.replace(WIDENING)
        print(f"wrote {WIDENING}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
