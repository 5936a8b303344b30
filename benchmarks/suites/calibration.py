"""Calibrating a bundled predictor to a new device from K measured rows.

* **sweeps** (exact, from the committed sweep files ``benchmarks/data/calibration/*.json.gz``:
  every calibration's held-out scores, written by ``benchmarks.lib.calibration_sweep sweep`` from
  cached source outputs): the default correction (``auto``: per calibration the variant of lowest
  nested leave-one-model-out error) on HELP's six NAS-Bench-201 test devices and from the RTX
  3090 / 4090 sources (trained without the targets' test models) to the next GPU, K = 10/20/50
  by K-centre and random picks, with the 90 % interval's coverage under the shipped ``scaled``
  rule; and across device kinds (GPU sources to the validation CPUs): ``auto`` against a fit of
  the K rows on their own FLOPs and memory access (``cost``).
* **new devices** (run now, ``perfseer calibrate`` end to end): the RTX 4090 card calibrated on an
  NVIDIA H200's 20 calibration-set rows (``datasets/h200``), the i9-10940X card on this VM's EPYC
  under PyTorch and under ONNX Runtime (``datasets/cpu_timm224``), each scored on 97 timm models
  of 97 families, none of them calibration models (``-o zero_shot=1``: the H200 also with no
  measurement, by the spec transfer and the spec model).  ``--quick``: the EPYC only, 10 held-out
  models.
"""

from __future__ import annotations

import numpy as np

from perfseer.fit import calibrate as C

from benchmarks.lib import calibration_sweep as cs
from benchmarks.lib import new_device
from benchmarks.runner import DATA, ROOT, Context, Step, Suite, atomic_write, f, load_config, md_table, run_main

SWEEPS = DATA / "calibration"
HELD_OUT = ROOT / "benchmarks" / "gpu" / "heldout-families.txt"
CFG = load_config("calibration")  # benchmarks/configs/calibration.json: the adopted study


def _device_frame(files: list[str]):
    df = cs._frame([SWEEPS / x for x in files])
    df["vs"] = df["role"].where(df["role"] == "test", "validation")
    scale = [C.scale_factor(int(k), 0.9, cs.SELECTION_GROUP.get(sel, "random")) for k, sel in zip(df["k"], df["selection"])]
    df["cov"] = [cs.coverage_at(r, c) if c else np.nan for r, c in zip(df["ratio_q"], scale)]
    return df.groupby(["setting", "live", "vs", "target", "selection", "variant", "k"]).agg(
        mape=("mape", "mean"), rho=("spearman", "mean"), cov=("cov", "mean"), draws=("draw", "count")).reset_index()


def _sweeps() -> dict:
    out = {}
    for name, files in CFG["sweeps"].items():
        dev = _device_frame(files)
        t = dev[(dev["vs"] == "test") & (dev["variant"] == "auto") & (dev["live"] == "none")
                & dev["selection"].isin(CFG["selections"])]
        out[name] = [{"setting": s, "selection": sel, "k": int(k), "devices": int(len(p)), "rho": float(p["rho"].mean()),
                      "mape": float(p["mape"].mean()), "cov": float(p["cov"].mean()), "targets": sorted(p["target"])}
                     for (s, sel, k), p in t.groupby(["setting", "selection", "k"])]
        if name.startswith("NAS"):
            k10 = t[(t["k"] == 10) & (t["selection"] == "kcentre-glob")]
            out["nb201_k10_per_device"] = [{"target": r.target, "rho": r.rho, "mape": r.mape} for r in k10.itertuples()]
    dev = _device_frame(CFG["cross_kind"])
    cpu = dev[(dev["vs"] == "validation") & dev["target"].str.contains("fp32") & dev["variant"].isin(["auto", "cost"])]
    out["cross_kind"] = [{"variant": v, "mape": float(p.groupby(["setting", "target"])["mape"].mean().mean()),
                          "rho": float(p.groupby(["setting", "target"])["rho"].mean().mean()),
                          "cells": int(p.groupby(["setting", "target"]).ngroups)} for v, p in cpu.groupby("variant")]
    return out


def _new_device(ctx: Context, name: str) -> dict:
    run = CFG["new_devices"][name]
    argv = ["--measurements", str(ROOT / run["measurements"]), "--predictor", run["source"], "--device", run["device"],
            "--out", str(ctx.work / f"card-{name}")]
    if name == "h200" and ctx.options.get("zero_shot") == "1":  # the spec transfer and spec model too (+15 min)
        argv += ["--zero-shot", "h200"]
    if ctx.quick:
        held = ctx.work / "heldout-10.txt"
        models = [ln.strip() for ln in HELD_OUT.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        atomic_write(held, "\n".join(models[: CFG["quick"]["held_out_models"]]) + "\n")
        argv += ["--held-out", str(held)]
    return run_main(new_device.main, argv, ctx.work / f"new-device-{name}.json")


def steps_for(suite: str, with_sweeps: bool):
    """The steps of ``suite``: the sweeps (if asked), then its new devices (``--quick``: those listed
    in the configuration's ``quick``, on a few held-out models)."""
    def steps(ctx: Context) -> list[Step]:
        out = [Step("sweeps", _sweeps)] if with_sweeps else []
        names = [n for n, r in CFG["new_devices"].items() if r["suite"] == suite]
        if ctx.quick:
            names = [n for n in names if n in CFG["quick"]["new_devices"]]
        out += [Step(f"new-device-{n}", lambda n=n: _new_device(ctx, n)) for n in names]
        return out

    return steps


def render(ctx: Context, res: dict[str, dict]) -> str:
    sw = res["sweeps"]
    t1 = []
    for name in ("NAS-Bench-201 (HELP test devices)", "timm GPU -> GPU"):
        for r in sw[name]:
            t1.append([r["setting"] if name.startswith("timm") else name, ", ".join(r["targets"]) if name.startswith("timm") else f"{r['devices']} devices",
                       r["selection"], r["k"], f(r["rho"], 3), f(r["mape"], 2), f(100 * r["cov"], 1)])
    t2 = [[r["target"], f(r["rho"], 3), f(r["mape"], 2)] for r in sw["nb201_k10_per_device"]]
    ck = {r["variant"]: r for r in sw["cross_kind"]}
    return ("## Calibration to a new device\n\n"
            "**From committed sweeps** (`benchmarks/data/calibration/`, the default correction `auto`, held-out rows of "
            "test devices never used for a choice; mean over devices of the mean over draws; interval: the shipped "
            "`scaled` 90 % rule), exact:\n\n"
            + md_table(["source", "targets", "K picks", "K", "Spearman", "MAPE %", "90 % interval holds %"], t1)
            + "\n\nNAS-Bench-201, K = 10 (K-centre picks), per HELP test device:\n\n"
            + md_table(["test device", "Spearman", "MAPE %"], t2)
            + f"\n\nAcross device kinds (RTX 3090 / 4090 sources to the validation CPUs, mean over "
            f"{ck['cost']['cells']} source-CPU pairs): the K rows' own FLOPs + bytes fit (`cost`) {ck['cost']['mape']:.1f} % "
            f"MAPE (Spearman {ck['cost']['rho']:.3f}) against {ck['auto']['mape']:.1f} % ({ck['auto']['rho']:.3f}) for the "
            "GPU-to-GPU correction `auto`.\n\n" + devices_table(res))


def devices_table(res: dict[str, dict]) -> str:
    """The new-device runs of ``res``: each basis's scores on the held-out models."""
    t3 = []
    for k, r in res.items():
        if not k.startswith("new-device-"):
            continue
        for basis, s in r["held_out"].items():
            t3.append([r["device"], f"`{r['source']}`", basis, s.get("rows"), f(s.get("mape"), 2), f(s.get("spearman"), 3),
                       f(100 * s["coverage"], 1) if s.get("coverage") is not None else "-",
                       r["calibration"].get("variant", "-") if basis == "calibrated" else ""])
    return ("**Real new devices** (run now: `perfseer calibrate` on the device's calibration-set rows, K = 20, then "
            "every held-out model predicted):\n\n"
            + md_table(["device", "source card", "basis", "held-out rows", "MAPE %", "Spearman", "90 % interval holds %",
                        "variant"], t3))


def render_cpu(ctx: Context, res: dict[str, dict]) -> str:
    return "## Calibration to a new CPU\n\n" + devices_table(res)


SUITE = Suite(
    name="calibration",
    description="calibrating a card to a new device from K rows (committed sweeps; a real H200 end to end)",
    reads="benchmarks/data/calibration/*.json.gz, datasets/h200, benchmarks/gpu/heldout-families.txt",
    time_full="~35 min (the H200: 20 calibration + 97 held-out models exported; -o zero_shot=1: +15 min)",
    time_quick="~10 min (the H200 on 10 held-out models)",
    steps=steps_for("calibration", True), render=render)
