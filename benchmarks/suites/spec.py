"""GPUs without a measured predictor: the spec model and the spec transfer on held-out GPUs.

* **NeuSight, leave-one-GPU-out** (five NVIDIA GPUs; BERT-large, GPT-2 large, GPT-3 XL / 2.7B,
  OPT-1.3B, inference and training, from NeuSight's per-operator traces): the kernel model
  trained on the other four GPUs' kernels, the bundled recipe (``full-ood50``).  From the committed
  per-run predictions (``benchmarks/data/spec/spec_neusight.json``); re-training the five fits:
  ``python -m benchmarks.lib.spec_neusight --configs full-ood50``.
* **An unseen vendor**: the bundled spec card on NeuSight's AMD MI100 / MI210 runs (run now).
* **perfseer's own graph** of each NeuSight model (``hf:`` + its config) against the trace path,
  same card (run now; ``--quick``: the P4 only).
* **timm on four RTX GPUs, leave-one-GPU-out**: the spec model zero-shot and calibrated (run now).
* **The spec transfer**, leave-one-GPU-out over the same four GPUs, from measured source GPUs and
  from their bundled SeerNets (run now).
"""

from __future__ import annotations

import json

import numpy as np

from benchmarks.lib import spec_neusight_amd, spec_neusight_graph, spec_timm_logo, spec_transfer_logo
from benchmarks.runner import DATA, ROOT, BenchError, Context, Step, Suite, f, load_config, md_table, run_main

NEUSIGHT = ROOT.parent / "shared" / "datasets" / "neusight"
CFG = load_config("spec")  # benchmarks/configs/spec.json


def _logo_committed() -> dict:
    d = json.loads((DATA / CFG["neusight_logo"]["file"]).read_text())
    if set(d["chosen"].values()) != {CFG["neusight_logo"]["config"]}:
        raise BenchError(f"{CFG['neusight_logo']['file']} is not of the adopted recipe {CFG['neusight_logo']['config']}")
    return {"config": d["chosen"], "workloads": d["workloads"], "coverage": d["coverage"]["all"]}


def steps(ctx: Context) -> list[Step]:
    w = ctx.work
    out = [Step("neusight-logo", _logo_committed),
           Step("amd", lambda: run_main(spec_neusight_amd.main, ["--data", str(NEUSIGHT)], w / "amd.json")),
           Step("transfer", lambda: run_main(spec_transfer_logo.main, [], w / "transfer.json")),
           Step("timm", lambda: run_main(spec_timm_logo.main, ["--calib-models", str(CFG["timm_calib_models"])], w / "timm.json"))]
    graph = ["--data", str(NEUSIGHT), "--cache", str(w / "graph-cache"), "--attention", CFG["graph_attention"]]
    graph += ["--gpus", ",".join(CFG["quick"]["graph_gpus"])] if ctx.quick else []
    out.append(Step("graph", lambda: run_main(spec_neusight_graph.main, graph, w / "graph.json")))
    return out


def _mape(rows, key):
    return float(np.mean([abs(r[key]) for r in rows])) if rows else None


def render(ctx: Context, res: dict[str, dict]) -> str:
    wl = res["neusight-logo"]["workloads"]
    t1 = []
    for gpu in sorted({r["gpu"] for r in wl}):
        for ph in ("infer", "train"):
            s = [r for r in wl if r["gpu"] == gpu and r["phase"] == ph]
            if s:
                t1.append([gpu, ph, len(s), f(_mape(s, "spec_err_pct")), f(_mape(s, "roofline_err_pct"))])
    for ph in ("infer", "train"):
        s = [r for r in wl if r["phase"] == ph]
        t1.append([f"**all**", ph, len(s), f"**{f(_mape(s, 'spec_err_pct'))}**", f(_mape(s, "roofline_err_pct"))])
    amd = [r for r in res["amd"]["workloads"] if r.get("variant") == CFG["amd_variant"]]
    t2 = [[g, len([r for r in amd if r["gpu"] == g]), f(_mape([r for r in amd if r["gpu"] == g], "spec_err_pct")),
           f(_mape([r for r in amd if r["gpu"] == g], "roofline_err_pct"))] for g in sorted({r["gpu"] for r in amd})]
    t2.append(["**both**", len(amd), f"**{f(_mape(amd, 'spec_err_pct'))}**", f(_mape(amd, "roofline_err_pct"))])
    gw = [r for r in res["graph"]["workloads"] if r.get("graph_over_trace") == r.get("graph_over_trace")]
    ratio = {ph: [r["graph_over_trace"] for r in gw if r["phase"] == ph] for ph in ("infer", "train")}
    ginf = ratio["infer"]
    graph_line = (f"perfseer's own graph against NeuSight's trace, same card: inference within "
                  f"{100 * max(abs(x - 1) for x in ginf):.1f} % on all {len(ginf)} runs"
                  + (f", training steps {min(ratio['train']):.3f}-{max(ratio['train']):.3f} of it ({len(ratio['train'])} runs)"
                     if ratio["train"] else "") + "; the graph path's error against the measurements: "
                  + ", ".join(f"{ph} {_mape([r for r in gw if r['phase'] == ph], 'graph_err_pct'):.1f} %"
                              for ph in ("infer", "train") if ratio[ph]) + ".") if ginf else "no graph run."
    tm = res["timm"]["rows"]
    t3 = [[r["gpu"], r["test_rows"], f(r["zero_shot_mape"]), f(r["calibrated_mape"]), f(r["seernet_mape"])] for r in tm]
    tr = res["transfer"]["rows"]
    t4 = [[r["gpu"], r["test_rows"], f(r.get("from_measured_mape")), f(r.get("from_seernet_mape")), r.get("choice")]
          for r in tr]
    return ("## GPUs without a measured predictor\n\n"
            "**The spec model on NeuSight's workloads, leave-one-GPU-out** (the kernel model trained on the other "
            "four GPUs; MAPE %, per run). From the committed per-run predictions "
            "(`benchmarks/data/spec/spec_neusight.json`, the bundled recipe `full-ood50`), exact.\n\n"
            + md_table(["held-out GPU", "phase", "runs", "spec model MAPE %", "roofline MAPE %"], t1)
            + "\n\n**An unseen vendor**: the bundled spec card (NVIDIA kernels only) on NeuSight's AMD runs, "
            "GEMMs at the FP32 vector peak (run now).\n\n"
            + md_table(["GPU", "runs", "spec model MAPE %", "roofline MAPE %"], t2)
            + f"\n\n{graph_line}\n\n"
            "**timm on RTX GPUs, leave-one-GPU-out** (AMP inference, test-split models; calibrated: a whole-model "
            "correction fitted on the other three GPUs' train/validation models; run now):\n\n"
            + md_table(["held-out GPU", "test rows", "zero-shot MAPE %", "calibrated MAPE %",
                        "SeerNet trained on it (card)"], t3)
            + "\n\n**The spec transfer, leave-one-GPU-out** (AMP inference; from the other GPUs' measurements, and "
            "from their bundled SeerNets; the rule chosen on the training GPUs; run now):\n\n"
            + md_table(["held-out GPU", "test rows", "from measured MAPE %", "from SeerNets MAPE %", "inner choice"], t4))


SUITE = Suite(
    name="spec",
    description="spec model and spec transfer on held-out GPUs (NeuSight LOGO, AMD, own graphs, timm RTX LOGO)",
    reads="../shared/datasets/neusight, datasets/timm, benchmarks/data/spec/spec_neusight.json, the spec cards",
    time_full="~15 min", time_quick="~6 min (graph path on the P4 only)",
    steps=steps, render=render)
