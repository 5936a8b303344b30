"""Leave-one-GPU-out at a previous run's constants: what a change of the any-GPU model's kernels
does by itself, without the refit.

A full run (:mod:`benchmarks.lib.anygpu_logo`) refits the constants for every held-out GPU, so a
change of the kernels (:func:`perfseer.specmodel.anygpu.design`) shows up mixed with where the
robust fit, stopped after ``--max-nfev`` iterations, lands.  This script takes the constants a
previous run fitted without each GPU (its JSON's ``fits``), predicts that GPU's rows with the
current code's kernels, and prints the per-cell MAPE (mean over GPUs, as the run's summary) next
to the run's own; with ``--objective GPU`` it also prints the fit's objective on the other GPUs'
rows at that run's constants for GPU and, with ``--other RUN``, at another run's (a refit that
ends above the old constants' objective stopped early).

    python -m benchmarks.lib.anygpu_fixed --cache .bench-work/anygpu-cache --logo base.json [--objective h200 --other new.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.lib import anygpu_data
from benchmarks.lib import anygpu_logo as L

SOFT_L1 = 0.15  # the fit's soft-L1 scale (perfseer.specmodel.anygpu.fit)


def _overheads(fit: dict, names: list) -> np.ndarray:
    ov = fit["overheads"]
    fallback = ov.get(L.DEFAULT_SETTING, np.mean(list(ov.values()), axis=0))
    return np.array([ov.get(n, fallback) for n in names], dtype=float)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(L.ROOT / ".bench-work" / "anygpu-cache"))
    ap.add_argument("--logo", required=True, help="a leave-one-GPU-out JSON of anygpu_logo (its fits are used)")
    ap.add_argument("--objective", default=None, help="a held-out GPU: print the fit objective on the other rows")
    ap.add_argument("--other", default=None, help="with --objective: another run's JSON to compare")
    args = ap.parse_args(argv)
    from perfseer.devices import get_device
    from perfseer.specmodel import anygpu

    run = json.loads(Path(args.logo).read_text())
    df, tables = anygpu_data.build(Path(args.cache), log=lambda s: print(s, file=sys.stderr))
    df = df[df["measured_ms"] > 0].reset_index(drop=True)
    df["setting"] = [L.setting_of(r) for _, r in df.iterrows()]
    df["cell"] = [L.cell_of(r) for _, r in df.iterrows()]
    names = sorted(df["setting"].unique())
    settings = np.array([names.index(s) for s in df["setting"]])
    specs = {g: get_device(g) for g in df["gpu"].unique()}
    d = anygpu.design([(tables[k], specs[g], L.kernel_precision(p, st), hb, p == "amp", L.FUSED_ATTENTION[st])
                       for k, g, p, hb, st in zip(df["key"], df["gpu"], df["precision"], df["h2d_bytes"], df["setting"])],
                      settings)
    meas = df["measured_ms"].to_numpy()
    pred = np.full(len(df), np.nan)
    for g, fit in run["fits"].items():
        te = (df["gpu"] == g).to_numpy()
        if te.any():
            pred[te] = anygpu.step_us(fit["params"], _overheads(fit, names), anygpu.subset(d, te, settings)) / 1000
    df["ape"] = np.abs(pred / meas - 1) * 100
    old = pd.DataFrame(run["per_gpu"]).set_index(["gpu", "cell"])["anygpu_mape"]
    per = df[np.isfinite(pred)].groupby(["gpu", "cell"])["ape"].mean()
    table = pd.DataFrame({"run": old.groupby("cell").mean(), "this code": per.groupby("cell").mean()})
    print(table.round(1).to_string())
    print(f"mean over cells: run {table['run'].mean():.2f}, this code at the run's constants {table['this code'].mean():.2f}")
    if args.objective:
        g = args.objective
        tr = (df["gpu"] != g).to_numpy()
        group = df["gpu"] + "|" + df["source"] + "|" + df["cell"]
        w = (1.0 / group.map(group.value_counts())).to_numpy()
        for label, path in (("run", args.logo), ("other", args.other)):
            if not path:
                continue
            fit = json.loads(Path(path).read_text())["fits"][g]
            r = np.log(anygpu.step_us(fit["params"], _overheads(fit, names), d) / 1000 / meas)[tr]
            obj = np.sum(w[tr] * 2 * SOFT_L1**2 * (np.sqrt(1 + (r / SOFT_L1) ** 2) - 1))
            print(f"objective on the rows without {g}, {label}'s constants: {obj:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
