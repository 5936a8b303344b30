"""Leave-one-GPU-out over every GPU with labels: the any-GPU operator model against the bundled
spec model (kernel networks) and the roofline, per held-out GPU, model kind, phase and precision.

For each GPU in turn the any-GPU model's constants (:mod:`perfseer.specmodel.anygpu`) are fitted
on the other GPUs' rows only and the held-out GPU's rows are predicted.  The spec model is the
bundled card, zero-shot (trained on NeuSight's kernels of P4, P100, T4, V100 and A100-40GB: on
those five GPUs its NeuSight rows are replaced by the committed leave-one-GPU-out predictions of
``benchmarks/data/spec/spec_neusight.json``; its other rows there are marked ``spec_seen``).  The
roofline: the sum over kernels of max(FLOPs / sheet peak, bytes / bandwidth).

**Route** (:func:`route_facts`): per cell (model kind, phase, precision) the any-GPU model unless
another basis's mean per-GPU MAPE is 20 % lower, over at least three GPUs of the same vendor (else
over every cell of the same kind and phase); for a held-out GPU chosen from the *other* GPUs'
leave-one-out scores only (nested), so the route column is what a GPU nobody measured would get.
``--fit-all CARD`` fits the constants on every GPU and writes the card with the route choice per
cell, its validation numbers (the per-cell leave-one-GPU-out MAPE of each basis) and the 90 %
quantiles of the leave-one-GPU-out log errors (the intervals).

    python -m benchmarks.lib.anygpu_logo --json out.json [--quick] [--fit-all src/perfseer/predictors/spec-anygpu.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.lib import anygpu_data

ROOT = Path(__file__).resolve().parents[2]
BASES = ("anygpu", "spec", "roofline", "blend")  # blend: geometric mean of the any-GPU model and the spec model
KERNEL_PRECISION = {"fp32": "fp32", "fp16": "fp16", "amp": "fp16"}


DEFAULT_SETTING = "timm-pt291"  # the framework overhead an answer uses: PyTorch 2.9 eager (timm benchmark)
# settings whose PyTorch runs scaled_dot_product_attention as one fused kernel (2.0 and later): timm's
# RTX 3090 training rows ran PyTorch 1.12, the H200 rows 2.11; gpu-benchmark and NAS-Bench-201 are CNNs
# and NeuSight's rows are its own traces (no composed attention), so their entry changes nothing
FUSED_ATTENTION = {"timm-pt112": False, "timm-pt240": True, "timm-pt291": True, "h200": True, "gpu-benchmark": False,
                   "nb201": False, "neusight": False}
# settings whose fp32 steps ran with TF32 off for convolutions too (perfseer's collection kit sets
# torch.backends.cudnn.allow_tf32 = False): their kernels at rules.FP32_IEEE, not PyTorch's default
# (TF32 convolutions on Ampere and later); the other sources' fp32 GPUs are pre-Ampere or ran GEMMs only
FP32_IEEE_SETTINGS = ("h200",)


def kernel_precision(precision: str, setting: str) -> str:
    """The precision a row's kernels run at (:mod:`perfseer.specmodel.rules`): ``amp`` as 16-bit
    kernels (autocast's casts composed), ``fp32`` as its setting's library defaults had it."""
    from perfseer.specmodel import rules

    if precision == "fp32" and setting in FP32_IEEE_SETTINGS:
        return rules.FP32_IEEE
    return KERNEL_PRECISION[precision]


def setting_of(r) -> str:
    """The software setting (framework version and timing protocol) of a row: its source, the timm
    benchmark split by PyTorch version."""
    # gpu-benchmark ran on two machines (1080 Ti + Titan V, Titan Xp + 2080 Ti) with one script: one
    # setting, since a setting left with a single GPU when its partner is held out absorbs that GPU's
    # own speed (the Titan Xp's slow FP16 made the held-out 2080 Ti's FP16 inference 2.9x too slow)
    if r["source"] != "timm":
        return r["source"]
    if r["gpu"] == "rtx3090":
        return "timm-pt112" if r["phase"] == "train" else "timm-pt240"
    return "timm-pt291"


def _subset(d, mask_steps: np.ndarray, setting=None):
    from perfseer.specmodel.anygpu import subset

    return subset(d, mask_steps, setting)


EAGER_HOST_FLOOR_US = 4.0  # eager PyTorch's CPU cost of launching one kernel is at least a few us (NeuSight's sums have none)


FIT_STARTS = 3  # starts of each fit (anygpu.fit(starts=)): INIT and two seeded perturbations


def fit_predict(d, meas, w, settings: np.ndarray, names: list, train: np.ndarray, max_nfev: int):
    """Fit on the ``train`` steps (their settings renumbered), predict every other step (a setting
    the training steps lack answered with :data:`DEFAULT_SETTING`'s overhead, or the mean one)."""
    from perfseer.specmodel import anygpu

    present = sorted(set(settings[train]))
    local = {s: i for i, s in enumerate(present)}
    st = np.array([local.get(s, 0) for s in settings])
    floor = [None if names[s] == "neusight" else np.log(EAGER_HOST_FLOOR_US) for s in present]
    params, ov = anygpu.fit(_subset(d, train, st), meas[train], w[train], n_settings=len(present), max_nfev=max_nfev,
                            host_floor=floor, starts=FIT_STARTS)
    dflt = names.index(DEFAULT_SETTING) if DEFAULT_SETTING in names else -1
    fallback = ov[local[dflt]] if dflt in local else ov.mean(axis=0)
    ov_all = np.array([ov[local[i]] if i in local else fallback for i in range(len(names))])
    test = ~train
    pred = anygpu.step_us(params, ov_all, _subset(d, test, settings)) / 1000
    return params, {names[s]: ov[i].tolist() for s, i in local.items()}, pred


def baselines(df: pd.DataFrame, tables: dict, log) -> tuple[np.ndarray, np.ndarray]:
    """(spec model ms, roofline ms) of every row."""
    from perfseer.devices import get_device
    from perfseer.runtime.spec import load_spec_model
    from perfseer.specmodel import kernels as kt

    sm = load_spec_model()
    df = df.reset_index(drop=True)
    spec_ms, roof_ms = np.zeros(len(df)), np.zeros(len(df))
    for (gpu, prec), idx in df.groupby(["gpu", "precision"]).groups.items():
        s = get_device(gpu)
        p = KERNEL_PRECISION[prec]
        rows = df.loc[idx]
        big = pd.concat([tables[k].assign(_row=i) for i, k in zip(rows.index, rows["key"])], ignore_index=True)
        dev = kt.device_frame([s] * len(big), [p] * len(big), big["family"])
        us = sm.kernels.predict(big[list(kt.COLUMNS)], dev) * big["scale"].to_numpy()
        tf, tm = kt.roofline_us(big, dev)
        roof = np.maximum(tf, tm) * big["scale"].to_numpy()
        r = big["_row"].to_numpy()
        for arr, val in ((spec_ms, us), (roof_ms, roof)):
            s_ = pd.Series(val).groupby(r).sum()
            arr[s_.index.to_numpy()] = s_.to_numpy() / 1000
        log(f"  baselines {gpu} {prec}: {len(rows)} rows")
    return spec_ms, roof_ms


def committed_spec_logo() -> dict:
    d = json.loads((ROOT / "benchmarks" / "data" / "spec" / "spec_neusight.json").read_text())
    return {(w["gpu"], w["workload"]): float(w["spec_ms"]) for w in d["workloads"]}


def mape(pred, meas) -> float:
    pred, meas = np.asarray(pred, float), np.asarray(meas, float)
    return float(np.mean(np.abs(pred / meas - 1)) * 100) if len(meas) else float("nan")


def cell_of(r) -> str:
    return f"{r['kind']}/{r['phase']}/{r['precision']}"


ROUTE_MIN_GPUS = 3  # a choice needs this many other GPUs scored on the cell (else the kind/phase pool, else any-GPU)
ROUTE_MARGIN = 0.2  # another basis replaces the any-GPU model only when its mean MAPE is this much lower (relative)
ROUTE_VENDOR = "nvidia"  # the vendor whose GPUs the card's route facts are chosen on (most GPUs users ask about)


def _vendor(gpu: str) -> str:
    from perfseer.devices import get_device

    return get_device(gpu).vendor


def route_choice_on(others: pd.DataFrame, cell: str) -> tuple[str, dict, list]:
    """The basis for ``cell`` chosen on the per-GPU scores ``others`` (rows of GPUs other than the
    target, same vendor, spec model never trained on them): the lowest mean per-GPU MAPE over the
    GPUs scored on the cell, or, with fewer than :data:`ROUTE_MIN_GPUS` of them, over every cell of
    the same model kind and phase; the any-GPU model (the default) unless the best basis beats it by
    :data:`ROUTE_MARGIN`, or with fewer than :data:`ROUTE_MIN_GPUS` rows either way.
    Returns (choice, scores, the (GPU, cell) rows the choice was made on)."""
    kind, phase, _ = cell.split("/")
    pool = others[others["cell"] == cell]
    if len(pool) < ROUTE_MIN_GPUS:
        pool = others[others["cell"].str.startswith(f"{kind}/{phase}/")]
    if len(pool) < ROUTE_MIN_GPUS:
        return "anygpu", {b: None for b in BASES}, []
    scores = {b: float(pool[f"{b}_mape"].mean()) for b in BASES}
    best = min(scores, key=scores.get)
    choice = best if scores[best] < scores["anygpu"] * (1 - ROUTE_MARGIN) else "anygpu"
    return choice, scores, sorted(f"{g} {c}" for g, c in zip(pool["gpu"], pool["cell"]))


def route_facts(per: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The route, nested: each held-out GPU's choice per cell made by :func:`route_choice_on` on
    the *other* GPUs of its vendor only (columns ``route_choice``, ``route_mape``); and the card's
    route facts per cell, the same rule on every :data:`ROUTE_VENDOR` GPU."""
    per = per.copy()
    per["vendor"] = [_vendor(g) for g in per["gpu"]]
    fair = per[~per["spec_seen"].astype(bool)]
    choices = [route_choice_on(fair[(fair["gpu"] != r["gpu"]) & (fair["vendor"] == r["vendor"])], r["cell"])[0]
               for _, r in per.iterrows()]
    per["route_choice"] = choices
    per["route_mape"] = [r[f"{c}_mape"] for (_, r), c in zip(per.iterrows(), choices)]
    route = {}
    for cell, part in per.groupby("cell"):
        choice, scores, on = route_choice_on(fair[fair["vendor"] == ROUTE_VENDOR], cell)
        cell_fair = part[~part["spec_seen"].astype(bool)]
        route[cell] = {"choice": choice, "chosen_on": on, "rule": {"min_gpus": ROUTE_MIN_GPUS, "margin": ROUTE_MARGIN,
                                                                   "vendor": ROUTE_VENDOR},
                       "validation_mape": {b: float(cell_fair[f"{b}_mape"].mean()) if len(cell_fair) else None
                                           for b in BASES},
                       "pooled_mape": scores, "validation_gpus": sorted(cell_fair["gpu"]),
                       "per_gpu": {r["gpu"]: {b: round(r[f"{b}_mape"], 2) for b in BASES} for _, r in part.iterrows()}}
    return per.drop(columns="vendor"), route


def write_card(args, df, d, meas, w, settings, names, route, intervals, logo_command, log) -> int:
    """Fit on every GPU's rows and write the card: the constants, the route facts and intervals
    of the leave-one-GPU-out run ``logo_command``."""
    from perfseer.specmodel import anygpu

    params, ov, _ = fit_predict(d, meas, w, settings, names, np.ones(len(df), dtype=bool), args.max_nfev)
    data = df.groupby(["source", "gpu", "kind", "phase", "precision"]).size().reset_index(name="rows")
    card = {"format": anygpu.CARD_FORMAT, "format_version": 1, "name": "spec-anygpu", "params": params,
            "overheads": ov, "default_setting": DEFAULT_SETTING, "fused_attention": FUSED_ATTENTION, "route": route,
            "intervals": {c: v["anygpu"] for c, v in intervals.items()}, "intervals_by_basis": intervals,
            "trained_on": sorted(df["gpu"].unique()), "data": data.to_dict(orient="records"),
            "command": "python -m benchmarks.lib.anygpu_logo " + " ".join(sys.argv[1:]),
            "route_from": logo_command,
            "about": "perfseer.specmodel.anygpu constants fitted on every GPU's rows (robust least squares); route: "
                     "per cell (kind/phase/precision) the any-GPU model unless another basis's mean per-GPU "
                     "leave-one-GPU-out MAPE over >= 3 NVIDIA GPUs the spec model never saw (else the cells of the "
                     "same kind and phase) is 20 % lower; intervals: 90 % quantile of the cell's leave-one-GPU-out "
                     "|log(measured / predicted)|"}
    Path(args.fit_all).write_text(json.dumps(card, indent=1) + "\n")
    log(f"wrote {args.fit_all}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=str(ROOT / ".bench-work" / "anygpu-cache"))
    ap.add_argument("--quick", action="store_true", help="a quarter of the models (cached separately)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--fit-all", default=None, help="also fit on every GPU and write the card here")
    ap.add_argument("--max-nfev", type=int, default=100)
    ap.add_argument("--sources", default=",".join(anygpu_data.SOURCES), help="data sources (default: all)")
    ap.add_argument("--gpus", default=None, help="hold out only these GPUs (comma-separated; a quick check of a "
                                                   "model change, the other GPUs' rows left unscored)")
    ap.add_argument("--from-logo", default=None,
                    help="with --fit-all: take the route and intervals from this leave-one-GPU-out JSON (a run of this "
                         "script, e.g. the any-gpu suite's) instead of running the leave-one-GPU-out again")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from perfseer.devices import get_device
    from perfseer.specmodel import anygpu

    log = lambda s: print(s, file=sys.stderr, flush=True)
    t0 = time.process_time()
    df, tables = anygpu_data.build(Path(args.cache), args.quick, log=log, sources=args.sources.split(","))
    df = df[df["measured_ms"] > 0].reset_index(drop=True)
    log(f"{len(df)} rows, {df['gpu'].nunique()} GPUs, {len(tables)} kernel tables")
    bl = Path(args.cache) / f"baselines{'-quick' if args.quick else ''}.parquet"
    cached = pd.read_parquet(bl) if bl.exists() else pd.DataFrame(columns=["key", "gpu", "precision", "spec_ms",
                                                                            "roofline_ms"])
    m = df[["key", "gpu", "precision"]].merge(cached, on=["key", "gpu", "precision"], how="left")
    todo = m["spec_ms"].isna().to_numpy()
    spec_ms, roof_ms = m["spec_ms"].to_numpy(dtype=float).copy(), m["roofline_ms"].to_numpy(dtype=float).copy()
    if todo.any():
        s_new, r_new = baselines(df[todo], tables, log)
        spec_ms[todo], roof_ms[todo] = s_new, r_new
        out_bl = df[["key", "gpu", "precision"]].assign(spec_ms=spec_ms, roofline_ms=roof_ms)
        out_bl = pd.concat([cached, out_bl]).drop_duplicates(["key", "gpu", "precision"], keep="last")
        out_bl.to_parquet(bl)
    logo = committed_spec_logo()
    seen = {"tesla-p4", "tesla-p100-pcie-16gb", "t4", "v100-pcie-32gb", "a100-40gb-pcie"}
    df["spec_seen"] = False
    for i, r in df.iterrows():
        if r["source"] == "neusight" and r["gpu"] in seen:
            v = logo.get((r["gpu"], r["workload"]))
            if v is not None:
                spec_ms[i] = v
            else:
                df.at[i, "spec_seen"] = True
        elif r["gpu"] in seen:
            df.at[i, "spec_seen"] = True
    df["spec_ms"], df["roofline_ms"] = spec_ms, roof_ms
    specs = {g: get_device(g) for g in df["gpu"].unique()}
    df["setting"] = [setting_of(r) for _, r in df.iterrows()]
    names = sorted(df["setting"].unique())
    settings = np.array([names.index(s) for s in df["setting"]])
    d = anygpu.design([(tables[k], specs[g], kernel_precision(p, st), hb, p == "amp", FUSED_ATTENTION[st])  # amp: casts
                       for k, g, p, hb, st in zip(df["key"], df["gpu"], df["precision"], df["h2d_bytes"], df["setting"])],
                      settings)
    df["cell"] = [cell_of(r) for _, r in df.iterrows()]
    group = df["gpu"] + "|" + df["source"] + "|" + df["cell"]
    w = (1.0 / group.map(group.value_counts())).to_numpy()
    meas = df["measured_ms"].to_numpy()
    df["anygpu_ms"] = np.nan
    fits = {}
    if args.from_logo and args.fit_all:
        prev = json.loads(Path(args.from_logo).read_text())
        # the route facts by the current rule, from the run's per-GPU scores (the rule is bookkeeping)
        _, route = route_facts(pd.DataFrame(prev["per_gpu"]))
        return write_card(args, df, d, meas, w, settings, names, route, prev["intervals"], prev["command"], log)
    for g in sorted(df["gpu"].unique()):
        if args.gpus and g not in args.gpus.split(","):
            continue
        tr = (df["gpu"] != g).to_numpy()
        t1 = time.process_time()
        params, ov, pred = fit_predict(d, meas, w, settings, names, tr, args.max_nfev)
        fits[g] = {"params": params, "overheads": ov}
        te = ~tr
        df.loc[te, "anygpu_ms"] = pred
        log(f"  held out {g}: {te.sum()} rows, fit {time.process_time() - t1:.0f} s CPU, "
            f"MAPE any-GPU {mape(df.loc[te, 'anygpu_ms'], meas[te]):.1f} spec {mape(spec_ms[te], meas[te]):.1f} "
            f"roofline {mape(roof_ms[te], meas[te]):.1f}")
    df["blend_ms"] = np.sqrt(df["anygpu_ms"] * df["spec_ms"])
    # per (GPU, cell) MAPE of each basis
    per = []
    for (g, cell), part in df[df["anygpu_ms"].notna()].groupby(["gpu", "cell"]):
        row = {"gpu": g, "cell": cell, "rows": len(part), "sources": sorted(part["source"].unique()),
               "spec_seen": bool(part["spec_seen"].any())}
        for b in BASES:
            row[f"{b}_mape"] = mape(part[f"{b}_ms"], part["measured_ms"])
        per.append(row)
    per = pd.DataFrame(per)
    per, route = route_facts(per)
    # 90 % quantile of |log(measured / predicted)| per cell and basis, leave-one-GPU-out
    intervals = {}
    for cell, part in df[df["anygpu_ms"].notna()].groupby("cell"):
        intervals[cell] = {b: float(np.quantile(np.abs(np.log(part["measured_ms"] / part[f"{b}_ms"])), 0.9))
                           for b in BASES}
    summary = {}
    for cell, part in per.groupby("cell"):
        summary[cell] = {b: float(part[f"{b}_mape"].mean()) for b in (*BASES, "route")}
        summary[cell]["gpus"] = len(part)
    cmd = "python -m benchmarks.lib.anygpu_logo " + " ".join(argv if argv is not None else sys.argv[1:])
    out = {"command": cmd, "quick": args.quick, "cpu_s": time.process_time() - t0,
           "rows": len(df), "gpus": sorted(df["gpu"].unique()), "per_gpu": per.to_dict(orient="records"),
           "summary": summary, "route": route, "intervals": intervals, "fits": fits,
           "predictions": df[["source", "gpu", "model", "batch", "cell", "setting", "measured_ms", "anygpu_ms",
                              "spec_ms", "roofline_ms"]].to_dict(orient="records"),
           "data": df.groupby(["source", "gpu", "kind", "phase", "precision"]).size().reset_index(name="rows")
           .to_dict(orient="records")}
    for _, r in per.iterrows():
        print(f"{r['gpu']:22s} {r['cell']:26s} {r['rows']:4d} any-GPU {r['anygpu_mape']:6.1f} spec {r['spec_mape']:6.1f}"
              f"{'*' if r['spec_seen'] else ' '} roofline {r['roofline_mape']:6.1f} route {r['route_choice']}")
    if args.fit_all:
        write_card(args, df, d, meas, w, settings, names, route, intervals, cmd, log)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
