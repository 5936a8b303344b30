"""Many K-shot calibrations from cached source outputs: the interval rule, the K choice, the correction.

``benchmarks/calibration.py`` (at tag research-2026-11) runs every calibration method end to end on a few draws;
``loglinear`` (the default) only reads the source's outputs and five global features of each
row, so once those are cached, thousands of calibrations cost seconds.  This script:

``cache``
    runs the source predictor once over every row of the devices it will calibrate to and writes
    ``[rows]`` arrays (device, model, split, value, the source's log outputs, the log global
    features, the trunk embedding) to an NPZ.  NAS-Bench-201: the HELP source
    (``benchmarks/calibration.py --train-source``, at tag research-2026-11) over HELP's validation devices (Titan X at
    batch 1/32/256, Gold 6240), test devices (Titan RTX at 256, Gold 6226, Pixel 2, Raspberry
    Pi 4, Eyeriss, FPGA) and its own training devices (simulated as new devices by leaving their
    own column out), on ``--pool`` hash-chosen training-split and ``--test-archs`` test-split
    architectures.  timm: one bundled source over its validation/simulation devices (RTX 5090,
    the two CPUs) and its test device.
``sweep``
    for each device, selection rule, K and draw: fits the correction, its nested
    leave-one-model-out residuals, and scores the held-out test rows (MAPE, Spearman, coverage
    of each interval rule).  Devices are tagged ``sim`` (the source's own devices, column left
    out), ``val`` or ``test``; nothing tagged ``test`` chooses anything.
``learn-scale``
    the interval scale ``c(K)`` of :data:`perfseer.fit.calibrate.SCALE_TABLE` from the
    ``sim`` and ``val`` calibrations of sweep files (never ``test``), with its
    leave-one-device-out coverage.
``report``
    the markdown tables of docs/calibration.md.

Example::

    python -m benchmarks.lib.calibration_sweep cache --setting nb201 --source SRC.json --out nb201.npz
    python -m benchmarks.lib.calibration_sweep sweep --cache nb201.npz --k 10,20,50 --draws 20 --json sweep.json
    python -m benchmarks.lib.calibration_sweep report sweep.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np


from benchmarks.lib import _training_bench as tb  # noqa: E402

NB201_SIM = ("1080ti@1", "1080ti@32", "1080ti@256", "silver_4114", "silver_4210r", "samsung_a50", "pixel3",
             "essential_ph_1", "samsung_s7")
NB201_VAL = ("titanx@1", "titanx@32", "titanx@256", "gold_6240")
NB201_TEST = ("titan_rtx@256", "gold_6226", "pixel2", "raspi4", "eyeriss", "fpga")
HELP_PUBLISHED = {"titan_rtx@256": 0.987, "gold_6226": 0.989, "pixel2": 0.802, "raspi4": 0.890,
                  "eyeriss": 0.940, "fpga": 0.985}
# timm: per bundled source, its validation/simulation devices and its test device.  The simulation
# devices share no GPU with the test pairs (RTX 4090, RTX Pro 6000).
TIMM = {"rtx3090-amp-nchw-pt240.infer": (("rtx5090/amp-nchw-pt291", "i9_10940x/fp32-nchw-pt240-dynamo",
                                           "i7_12700h/fp32-nchw-pt240-dynamo"), ("rtx4090/amp-nchw-pt291",)),
        "rtx4090-amp-nchw-pt291.infer": (("rtx5090/amp-nchw-pt291", "i9_10940x/fp32-nchw-pt240-dynamo",
                                          "i7_12700h/fp32-nchw-pt240-dynamo"), ("rtxpro6000maxq/amp-nchw-pt291",)),
        # a CPU source (the train-only i9 card, c25d608^): the other CPU is its one same-kind validation device
        "i9_10940x-fp32-nchw-pt240-dynamo.infer": (("i7_12700h/fp32-nchw-pt240-dynamo", "rtx5090/amp-nchw-pt291"), ()),
        # the other way round: an i7 SeerNet trained on the train split (benchmarks/data/calibration/source_i7)
        "i7_12700h-fp32-nchw-pt240-dynamo.infer": (("i9_10940x/fp32-nchw-pt240-dynamo", "rtx5090/amp-nchw-pt291"), ())}


def _hash(s: str) -> str:
    return hashlib.sha256(f"perfseer-calib-v1:{s}".encode()).hexdigest()


# -- cache ------------------------------------------------------------------------------------------

def cache(args, console) -> None:
    import torch

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.runtime.predictor import load_predictor
    from perfseer.fit import calibrate as C

    src = load_predictor(args.source)
    fit = (src.card.get("training") or {}).get("fit_splits") or []
    if "test" in fit:  # its test architectures are the targets' test architectures (one split per model)
        raise SystemExit(f"source {args.source} was trained on the test split too (fit_splits {fit}): the targets' "
                         "test-split models would not be new to it.  Use a card trained without them, e.g. the "
                         "bundled card before its retraining (docs/calibration.md, Benchmarks)")
    cols = [i for i, t in enumerate(src.targets) if t.metric == "latency_ms"]
    if args.setting == "nb201":
        ds = load_dataset(resolve_dataset("nb201"))
        roles = {**{d: "sim" for d in NB201_SIM}, **{d: "val" for d in NB201_VAL}, **{d: "test" for d in NB201_TEST}}
    else:
        ds = load_dataset(resolve_dataset("timm"))
        sims, tests = TIMM[Path(args.source).name.removesuffix(".json")]
        roles = {**{d: "val" for d in sims}, **{d: "test" for d in tests}}
    L = ds.labels
    L = L[(L["phase"].astype(str) == "infer") & L["latency_ms"].notna() & (L["latency_ms"] > 0)]
    parts = []
    for dev, role in roles.items():
        name, _, batch = dev.partition("@")
        rows = L[L["device"].astype(str) == name]
        if batch:
            rows = rows[rows["batch_size"] == int(batch)]
        if args.setting == "nb201":  # the same hash-chosen architectures on every device
            keep = set()
            for split, n in (("train", args.pool), ("test", args.test_archs)):
                m = rows.loc[rows["split"].astype(str) == split, "model"].astype(str).unique()
                keep |= set(sorted(m, key=_hash)[:n])
            rows = rows[rows["model"].astype(str).isin(keep)]
        rows = rows[rows["split"].astype(str).isin(("train", "test"))]
        parts.append(rows.assign(target=dev, role=role))
    import pandas as pd

    R = pd.concat(parts, ignore_index=True)
    graphs = sorted(R["graph"].astype(int).unique())
    tb.log(console, f"{len(R)} rows over {len(roles)} devices, {len(graphs)} graphs to embed")
    t0 = time.perf_counter()
    emb = []
    for i in range(0, len(graphs), 256):
        emb.append(C.embed(src.net, [ds.graphs[g] for g in graphs[i:i + 256]]))
        tb.log(console, f"  {min(i + 256, len(graphs))}/{len(graphs)} graphs, {time.perf_counter() - t0:.0f} s")
    emb = torch.cat(emb)
    out = C.heads_output(src.net, emb)[:, cols]
    glob = C.global_design([ds.graphs[g] for g in graphs])
    pos = {g: i for i, g in enumerate(graphs)}
    idx = np.array([pos[int(g)] for g in R["graph"]])
    source_devices = [src.targets[c].device for c in cols]
    np.savez_compressed(
        args.out, target=R["target"].to_numpy().astype("U"), role=R["role"].to_numpy().astype("U"),
        model=R["model"].astype(str).to_numpy().astype("U"), split=R["split"].astype(str).to_numpy().astype("U"),
        batch=R["batch_size"].to_numpy(), y=R["latency_ms"].to_numpy(dtype=float), graph_index=idx,
        logp=np.log(np.maximum(out, 1e-12)), glob=glob, emb=emb.numpy().astype(np.float32),
        source_devices=np.array(source_devices), source=np.array(str(args.source)))
    tb.log(console, f"wrote {args.out} ({time.perf_counter() - t0:.0f} s)")


def live(args, console) -> None:
    """Add ``live`` ``[graphs, 3]`` to a cache (live FLOPs share, live operator share, 1 when the
    network's result does not depend on the input; :mod:`perfseer.graph.liveness`), from each model's graph:
    NAS-Bench-201 models are rebuilt from their architecture string (milliseconds each); other
    models get ``(1, 1, 0)`` (the timm graphs have no zeroed branch)."""
    from perfseer.features.perfgraph import build_perfgraph
    from perfseer.graph.extract import extract_graph
    from perfseer.graph.liveness import liveness
    from perfseer.sources.nas.nb201_onnx import nb201_skeleton

    z = load_cache(args.cache)
    n = len(z["glob"])
    first = {}
    for gi, m in zip(z["graph_index"], z["model"]):
        first.setdefault(int(gi), str(m))
    out = np.tile(np.array([1.0, 1.0, 0.0]), (n, 1))
    memo: dict[str, tuple] = {}
    t0 = time.perf_counter()
    for gi in range(n):
        m = first[gi]
        if not m.startswith("nb201:"):
            continue
        if m not in memo:
            g = extract_graph(nb201_skeleton(m.split(":", 1)[1]), batch=1)
            lv = liveness(g, build_perfgraph(g)._col("flops"))
            memo[m] = (lv.flops_fraction, lv.node_fraction, float(lv.output_independent))
            if len(memo) % 500 == 0:
                tb.log(console, f"  {len(memo)} architectures, {time.perf_counter() - t0:.0f} s")
        out[gi] = memo[m]
    import os

    from perfseer.atomic import tmp_sibling

    tmp = tmp_sibling(args.cache).with_suffix(".npz")
    np.savez_compressed(tmp, **{**z, "live": out})
    os.replace(tmp, args.cache)
    tb.log(console, f"{args.cache}: live for {n} graphs ({len(memo)} architectures; "
                    f"{int((out[:, 2] > 0).sum())} whose result does not depend on the input), "
                    f"{time.perf_counter() - t0:.0f} s")


def load_cache(path: str) -> dict:
    z = np.load(path, allow_pickle=False)
    return {k: z[k] for k in z.files}


# -- selections -------------------------------------------------------------------------------------

def _standard(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=float)
    X = X[:, np.ptp(X, axis=0) > 1e-9]
    return (X - X.mean(0)) / X.std(0) if X.shape[1] else np.zeros((len(X), 1))


def select(rule: str, k: int, rng, glob, logp, emb, draw: int = 0) -> list[int]:
    """Indices of ``k`` candidate models (one row each) by ``rule``.  Every rule reads only what is
    known before measuring: features and the source's outputs."""
    from perfseer.fit import calibrate as C

    n = len(glob)
    start = None if draw == 0 else int(rng.integers(n))
    if rule == "random":
        return list(rng.choice(n, size=min(k, n), replace=False))
    # K-centre: draw 0 starts at the candidate nearest the median (the shipped, deterministic rule),
    # later draws at a random candidate
    if rule == "kcentre-glob":
        return C.spanning_set(glob, k, start)
    if rule == "kcentre-pred":
        return C.spanning_set(logp, k, start)
    if rule == "kcentre-both":
        return C.spanning_set(np.hstack([_standard(glob), _standard(logp)]), k, start)
    if rule == "kcentre-emb":
        return C.spanning_set(emb, k, start)
    if rule == "quantile":
        return C.quantile_set(logp, k)
    raise SystemExit(f"unknown selection rule {rule}")


# -- sweep ------------------------------------------------------------------------------------------

# name: (the live columns appended to the global features, whether K-centre selection reads them too)
LIVE_MODES = {"none": ((), False), "flops": (("live_flops_fraction",), True),
              "both": (("live_flops_fraction", "live_node_fraction"), True),
              "indep": (("output_independent",), True), "indep-fit": (("output_independent",), False),
              "indep-flops": (("output_independent", "live_flops_fraction"), True)}


def target_view(z: dict, target: str, src_devs: list[str], pool: int = 0, live: str = "none"):
    """One target device's rows of the cache: the source predictions (its own column left out when
    a source device is calibrated as new), global features, embeddings, measurements, models, the
    test mask, ``use`` (the source columns kept), the candidate calibration models (non-test, in hash order, the first ``pool`` of them
    when ``pool``) and the index of each candidate's first row."""
    from types import SimpleNamespace

    m = z["target"] == target
    drop = [j for j, d in enumerate(src_devs) if d == target.split("@")[0]]
    use = [j for j in range(len(src_devs)) if j not in drop]
    gi = z["graph_index"][m]
    model = z["model"][m]
    test = z["split"][m] == "test"
    nontest = np.flatnonzero(~test)
    cand = np.array(sorted(np.unique(model[nontest]), key=_hash))
    if pool and len(cand) > pool:
        cand = cand[:pool]
    first = {}
    for i in nontest:
        first.setdefault(model[i], i)
    from perfseer.fit import calibrate as C

    glob = sel_glob = z["glob"][gi]
    features, in_selection = LIVE_MODES[live]
    if features:  # the live columns of perfseer.graph.liveness after the five global features
        if "live" not in z:
            raise SystemExit("this cache has no live shares: run `calibration_sweep.py live --cache ...` first")
        glob = np.hstack([glob, C.live_design(z["live"][gi], features)])
        sel_glob = glob if in_selection else sel_glob
    return SimpleNamespace(role=str(z["role"][m][0]), use=use, logp=z["logp"][gi][:, use], glob=glob, sel_glob=sel_glob,
                           emb=z["emb"][gi].astype(float), y=z["y"][m], model=model, test=test, cand=cand,
                           ci=np.array([first[c] for c in cand]))


def _scores(ty, logpred, res, groups, coverage: float) -> dict:
    """One calibration's scores on its test rows: MAPE, Spearman, ``s`` (the RMS of the K rows'
    nested residuals ``res``), the conformal / Student-t intervals' coverage and the test rows'
    ``|residual| / s`` quantiles (what ``learn-scale`` and the ``scaled`` rule read)."""
    from perfseer.fit import calibrate as C
    from perfseer.fit.metrics import evaluate

    e = evaluate(ty, np.exp(logpred))
    r_test = np.log(ty) - logpred
    s = float(np.sqrt(np.mean(res ** 2)))
    cov = {}
    for rule_i in ("conformal", "student-t"):  # scaled: from ratio_q (report)
        iv = C.interval_halfwidth(res, groups, coverage, rule_i)
        cov[rule_i] = [float(np.mean(np.abs(r_test) <= iv["log_halfwidth"])), iv["log_halfwidth"]]
    ratio = np.abs(r_test) / max(s, 1e-6)
    return {"mape": e["mape"], "spearman": e["spearman"], "s": s, "coverage": cov,
            "ratio_q": np.quantile(ratio, RATIO_LEVELS).round(4).tolist()}


def cost_variants(fitted: dict) -> dict:
    """Blends of the source-free ``cost`` variant with ``auto`` for one draw (``--cost-fit``; both
    must have run, ``--variants full,cols,emb,cost``):

    - ``auto+cost``: the geometric mean of ``cost`` and ``auto`` (the variant ``calibrate`` keeps by
      default: lowest nested RMS among :data:`~perfseer.fit.calibrate.AUTO_VARIANTS` that ran;
      ``report`` adds its rows itself); residuals: the mean of the two's;
    - ``auto|cost``: whichever of ``auto`` and ``cost`` has the lower nested leave-one-model-out RMS
      on the K rows;
    - ``auto|blend``: the same between ``auto`` and ``auto+cost`` (the blend's residuals are the
      mean of its parts'; :func:`~perfseer.fit.calibrate.keeps_blend`, what ``calibrate`` does
      between CPUs), ``auto|all``: among ``auto``, ``cost`` and ``auto+cost``.

    ``fitted``: variant -> (test log predictions, nested residuals).  Returns the same for these."""
    from perfseer.fit import calibrate as C

    if "cost" not in fitted:
        raise SystemExit("--cost-fit blends the cost variant with auto: add cost to --variants")
    rms = lambda r: float(np.sqrt(np.mean(r ** 2)))  # noqa: E731
    auto, cost = fitted[min((v for v in C.AUTO_VARIANTS if v in fitted), key=lambda v: rms(fitted[v][1]))], fitted["cost"]
    blend = ((auto[0] + cost[0]) / 2, (auto[1] + cost[1]) / 2)
    return {"auto+cost": blend, "auto|cost": cost if rms(cost[1]) < rms(auto[1]) else auto,
            "auto|blend": blend if C.keeps_blend(auto[1], cost[1]) else auto,
            "auto|all": min((auto, cost, blend), key=lambda f: rms(f[1]))}


def sweep(args, console) -> None:
    from perfseer.fit import calibrate as C

    z = load_cache(args.cache)
    src_devs = [str(d) for d in z["source_devices"]]
    C.LIVE_RIDGE_WEIGHT = args.live_ridge_weight
    results = []
    targets = list(dict.fromkeys(z["target"].tolist()))
    if args.targets:
        targets = [t for t in targets if t in tb.parse_list(args.targets)]
    t_all = time.perf_counter()
    for target, live in ((t, lm) for t in targets for lm in args.live):
        v = target_view(z, target, src_devs, args.pool, live)
        role, logp_all, glob_all, emb_all, y_all, model_all, test, cand, ci = (
            v.role, v.logp, v.glob, v.emb, v.y, v.model, v.test, v.cand, v.ci)
        ty, tlogp, tglob, temb = y_all[test], logp_all[test], glob_all[test], emb_all[test].astype(float)
        t0 = time.perf_counter()
        for k in args.k:
            for rule in args.selection:
                ndraw = args.draws if rule == "random" else (args.kcentre_draws if rule.startswith("kcentre") else 1)
                for d in range(ndraw):
                    rng = np.random.default_rng(1000 * k + d)
                    pick = select(rule, k, rng, v.sel_glob[ci], logp_all[ci], emb_all[ci], d if rule != "random" else 0)
                    models = set(cand[pick])
                    rows = np.flatnonzero(~test & np.isin(model_all, list(models)))
                    groups = C._groups(model_all[rows])
                    logy = np.log(y_all[rows])
                    fitted = {}  # variant -> (test log predictions, nested residuals) for --cost-fit
                    for variant in args.variants:
                        e_cal = emb_all[rows] if "embedding" in C.VARIANTS[variant] else None
                        fit = C.fit_correction(logp_all[rows], glob_all[rows], logy, groups, variant=variant,
                                               ridge=C.CalibrationConfig().ridge, emb=e_cal)
                        pred = np.exp(fit.predict_log(tlogp, tglob, temb if e_cal is not None else None))
                        res = C.nested_residuals(logp_all[rows], glob_all[rows], logy, groups, variant,
                                                 C.CalibrationConfig().ridge, emb=e_cal)
                        fitted[variant] = (np.log(pred), res)
                    if args.cost_fit:
                        fitted.update(cost_variants(fitted))
                    for variant, (logpred, res) in fitted.items():
                        results.append({"target": target, "role": role, "k": k, "selection": rule, "draw": d,
                                        "variant": variant, "live": live, "rows": int(len(rows)),
                                        "models": int(len(models)),
                                        **_scores(ty, logpred, res, groups, args.coverage),
                                        "dropped_columns": [d for j, d in enumerate(src_devs) if j not in v.use]})
        tb.log(console, f"{target} ({role}, live {live}): {len(ty)} test rows, {len(cand)} candidates, "
                        f"{time.perf_counter() - t0:.0f} s")
    summarise(results, console)
    tb.write_json(args.json, {"benchmark": "calibration-sweep", "args": vars(args), "environment": tb.environment(),
                              "wall_s": round(time.perf_counter() - t_all, 1), "results": results})


RATIO_LEVELS = tuple(np.round(np.arange(0.01, 1.0, 0.01), 2))


def summarise(results, console) -> None:
    import pandas as pd

    if not results:
        return
    df = pd.DataFrame(results)
    for r in ("conformal", "student-t", "scaled"):
        df[f"cov_{r}"] = [c.get(r, [np.nan])[0] for c in df["coverage"]]
    s = df.groupby(["role", "k", "selection", "variant"]).agg(
        mape=("mape", "mean"), rho=("spearman", "mean"), conformal=("cov_conformal", "mean"),
        student=("cov_student-t", "mean"), scaled=("cov_scaled", "mean"), n=("draw", "count")).reset_index()
    console.print(s.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


# -- learn the interval scale -----------------------------------------------------------------------

SELECTION_GROUP = {"random": "random", "kcentre-glob": "spanning"}  # the shipped rules: any choice / K-centre


def coverage_at(ratio_q: np.ndarray, c: float) -> float:
    """Share of a calibration's test rows with ``|r| <= c s``, from its stored ratio quantiles."""
    return float(np.mean(np.asarray(ratio_q) <= c))


def _frame(paths):
    """The sweep files' rows, plus ``auto`` rows: per calibration, the variant of lowest nested
    leave-one-model-out RMS among :data:`perfseer.fit.calibrate.AUTO_VARIANTS` (what
    ``calibrate`` does with the default variant)."""
    import pandas as pd

    from perfseer.fit import calibrate as C

    df = pd.concat([pd.DataFrame(_read(p)["results"]).assign(setting=_setting(p)) for p in paths], ignore_index=True)
    if "live" not in df:
        df["live"] = "none"
    df["live"] = df["live"].fillna("none")
    cand = df[df["variant"].isin(C.AUTO_VARIANTS)]
    key = ["setting", "live", "target", "selection", "k", "draw"]
    auto = cand.loc[cand.groupby(key)["s"].idxmin()].assign(chosen=lambda d: d["variant"], variant="auto")
    return pd.concat([df, auto], ignore_index=True)


def _read(path) -> dict:
    """A sweep file, plain or gzipped (the committed copies under benchmarks/data/calibration)."""
    import gzip

    p = Path(path)
    return json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())


SOURCE_KIND = {"timm 3090 source": "gpu", "timm 4090 source": "gpu", "timm i9 source": "cpu",
               "timm i7 source": "cpu"}  # of _setting's names


def _setting(path) -> str:
    stem = Path(path).name
    return "NAS-Bench-201" if "nb201" in stem else ("timm 3090 source" if "3090" in stem else
                                                    "timm 4090 source" if "4090" in stem else
                                                    "timm i9 source" if "i9" in stem else
                                                    "timm i7 source" if "i7" in stem else stem)


def learn_scale(args, console) -> None:
    from perfseer.fit import calibrate as C

    df = _frame(args.paths)
    df = df[df["role"].isin(("sim", "val")) & (df["variant"] == args.variant) & df["selection"].isin(SELECTION_GROUP)]
    table, check = {}, []
    for (sel, k), part in df.groupby([df["selection"].map(SELECTION_GROUP), "k"]):
        table.setdefault(sel, {})[int(k)] = round(C.scale_for([np.asarray(r) for r in part["ratio_q"]], args.level), 3)
        # leave one device out: c from the other devices, coverage on this one
        for dev, p in part.groupby(["setting", "target"]):
            rest = part[(part["setting"] != dev[0]) | (part["target"] != dev[1])]
            c = C.scale_for([np.asarray(r) for r in rest["ratio_q"]], args.level)
            cov = np.mean([coverage_at(r, c) for r in p["ratio_q"]])
            check.append({"selection": sel, "k": int(k), "setting": dev[0], "device": dev[1],
                          "c_without": round(c, 3), "coverage": round(float(cov), 3)})
    import pandas as pd

    chk = pd.DataFrame(check)
    console.print(json.dumps(table))
    console.print(chk.groupby(["selection", "k", "setting"])["coverage"].agg(["mean", "min", "max", "count"]).to_string())
    tb.write_json(args.json, {"benchmark": "calibration-scale", "args": vars(args), "level": args.level,
                              "table": table, "leave_one_device_out": check})


# -- report -----------------------------------------------------------------------------------------

def report(args) -> str:
    """The markdown tables of docs/calibration.md from sweep files (and the scale table in the code)."""
    from perfseer.fit import calibrate as C

    df = _frame(args.paths)
    df["vs"] = df["role"].where(df["role"] == "test", "validation")
    for r in ("conformal", "student-t"):
        df[f"cov_{r}"] = [c[r][0] for c in df["coverage"]]
        df[f"fac_{r}"] = [np.exp(c[r][1]) for c in df["coverage"]]
    sc = [C.scale_factor(int(k), args.level, SELECTION_GROUP.get(sel, "random"))
          for k, sel in zip(df["k"], df["selection"])]
    df["cov_scaled"] = [coverage_at(r, c) if c else np.nan for r, c in zip(df["ratio_q"], sc)]
    df["fac_scaled"] = [np.exp(c * s) if c else np.nan for c, s in zip(sc, df["s"])]
    out = []
    per_dev = df.groupby(["setting", "live", "vs", "target", "selection", "variant", "k"])
    dev = per_dev.agg(mape=("mape", "mean"), rho=("spearman", "mean")).reset_index()
    # 1. the choice of K selection and correction: validation devices only (device means, then the mean)
    ch = dev[dev["vs"] == "validation"].groupby(["setting", "live", "k", "selection", "variant"])[["rho", "mape"]].mean()
    out.append("### Choice on the validation devices: mean Spearman / MAPE %\n")
    w = ch.apply(lambda r: f"{r['rho']:.3f} / {r['mape']:.2f}", axis=1).unstack("variant").reset_index()
    out.append(_md(w))
    te = dev[dev["vs"] == "test"].groupby(["setting", "live", "k", "selection", "variant"])[["rho", "mape"]].mean()
    out.append("\n### The same on the test devices (not used for any choice)\n")
    out.append(_md(te.apply(lambda r: f"{r['rho']:.3f} / {r['mape']:.2f}", axis=1).unstack("variant").reset_index()))
    # 2. NAS-Bench-201 per test device, K = 10
    nb = dev[(dev["setting"] == "NAS-Bench-201") & (dev["vs"] == "test") & (dev["k"] == 10)]
    if not nb.empty:
        nb = nb.assign(cell=[f"{a:.3f} / {b:.2f}" for a, b in zip(nb["rho"], nb["mape"])])
        w = nb.pivot_table(index="target", columns=["live", "selection", "variant"], values="cell", aggfunc="first")
        w.columns = [f"{b} {c}" + (f" live:{a}" if a != "none" else "") for a, b, c in w.columns]
        w = w.reset_index()
        w["HELP Spearman"] = w["target"].map(HELP_PUBLISHED)
        out.append("\n### NAS-Bench-201 test devices, K = 10: Spearman / MAPE %\n")
        out.append(_md(w))
    # 2b. with several live modes: the same per validation device, variant auto (the folding Pixel 3 is one)
    nv = dev[(dev["setting"] == "NAS-Bench-201") & (dev["vs"] == "validation") & (dev["k"] == 10)
             & (dev["variant"] == "auto")]
    if nv["live"].nunique() > 1:
        nv = nv.assign(cell=[f"{a:.3f} / {b:.2f}" for a, b in zip(nv["rho"], nv["mape"])])
        w = nv.pivot_table(index="target", columns=["selection", "live"], values="cell", aggfunc="first")
        w.columns = [f"{a} live:{b}" for a, b in w.columns]
        out.append("\n### NAS-Bench-201 validation devices, K = 10, auto: Spearman / MAPE %\n")
        out.append(_md(w.reset_index()))
    # 2c. timm validation per device (GPU and CPU targets of a GPU source: the cross-kind warning of
    # perfseer.fit.calibrate.CROSS_KIND quotes this table's range)
    tv = dev[(dev["setting"] != "NAS-Bench-201") & (dev["vs"] == "validation") & (dev["live"] == "none")
             & dev["selection"].isin(["random", "kcentre-glob"])]
    if not tv.empty:
        tv = tv.assign(cell=[f"{a:.3f} / {b:.1f}" for a, b in zip(tv["rho"], tv["mape"])])
        w = tv.pivot_table(index=["setting", "target", "k"], columns=["selection", "variant"], values="cell",
                           aggfunc="first")
        w.columns = [f"{a} {b}" for a, b in w.columns]
        out.append("\n### timm validation devices: Spearman / MAPE % per device\n")
        out.append(_md(w.reset_index()))
        from perfseer.fit.calibrate import device_kind

        kinds = {t: device_kind(t) or "unregistered" for t in df["target"].unique()}  # a registry lookup per device
        kind = tv["target"].map(kinds)
        spans = [f"{k.upper()} targets {m.min():.1f}-{m.max():.1f} %" for k, m in tv["mape"].groupby(kind)]
        out.append(f"\nMAPE range over variants, K and selections: {', '.join(spans)}\n")
        src_kind = tv["setting"].map(SOURCE_KIND)
        for (sk, tk), part in tv.groupby([src_kind, kind]):
            if not (part["variant"] == "cost").any():  # only --cost-fit sweeps compare the rows' own cost fit
                continue
            ck = part.groupby(["k", "selection", "variant"])[["rho", "mape"]].mean().reset_index()
            cells = ck.assign(cell=[f"{a:.3f} / {b:.1f}" for a, b in zip(ck["rho"], ck["mape"])])
            w = cells.pivot_table(index=["k", "selection"], columns="variant", values="cell", aggfunc="first")
            mean = ck.groupby("variant")[["rho", "mape"]].mean()
            w.loc[("mean", ""), :] = [f"{mean.loc[v, 'rho']:.3f} / {mean.loc[v, 'mape']:.1f}" for v in w.columns]
            what = "Across device kinds" if sk != tk else "The same kind"
            out.append(f"\n### {what}: {sk.upper()} sources calibrated to the validation {tk.upper()}s, Spearman / "
                       f"MAPE % (mean over the {tk.upper()}s and sources)\n")
            out.append(_md(w.reset_index()))
            rows = df[(df["vs"] == "validation") & df["setting"].isin(part["setting"].unique())
                      & (df["target"].map(kinds) == tk)]
            cv = rows.groupby(["k", "selection", "variant"])["cov_scaled"].mean().unstack("variant")
            out.append(f"\nThe same calibrations' 90 % interval (`scaled` rule, its `c(K)` table): share of the "
                       f"{tk.upper()}s' test rows inside\n")
            out.append(_md(cv.round(3).reset_index()))
    # 3. coverage of the 90 % interval per setting
    g = df.groupby(["setting", "live", "vs", "selection", "variant", "k"])
    cov = g.agg(n=("draw", "count"), devices=("target", "nunique"),
                conformal=("cov_conformal", "mean"), f_conformal=("fac_conformal", "median"),
                student=("cov_student-t", "mean"), f_student=("fac_student-t", "median"),
                scaled=("cov_scaled", "mean"), f_scaled=("fac_scaled", "median"),
                scaled_min_device=("cov_scaled", lambda x: np.nan)).reset_index()
    # the worst device's mean coverage (scaled rule)
    worst = df.groupby(["setting", "live", "vs", "selection", "variant", "k", "target"])["cov_scaled"].mean() \
        .groupby(["setting", "live", "vs", "selection", "variant", "k"]).min()
    cov["scaled_min_device"] = [worst.get(tuple(r[c] for c in ("setting", "live", "vs", "selection", "variant", "k")), np.nan)
                                for _, r in cov.iterrows()]
    if args.variant:
        cov = cov[cov["variant"] == args.variant]
    out.append(f"\n### Coverage of the {int(args.level * 100)} % interval (mean over devices and draws; factor: median)\n")
    out.append(_md(cov))
    return "\n".join(out)


def _md(df) -> str:
    """A DataFrame as a markdown table (floats to 3 decimals)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + " --- |" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cache")
    c.add_argument("--setting", choices=("nb201", "timm"), required=True)
    c.add_argument("--source", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--pool", type=int, default=2000, help="nb201: hash-chosen training-split architectures")
    c.add_argument("--test-archs", type=int, default=1000, help="nb201: hash-chosen test-split architectures")
    lv = sub.add_parser("live")
    lv.add_argument("--cache", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("--cache", required=True)
    s.add_argument("--targets", default=None)
    s.add_argument("--k", type=lambda t: [int(v) for v in t.split(",")], default=[10])
    s.add_argument("--draws", type=int, default=20)
    s.add_argument("--kcentre-draws", type=int, default=1, help="K-centre selections per K (draw 0: the shipped start)")
    s.add_argument("--pool", type=int, default=0, help="candidates at most (0: all training-split models)")
    s.add_argument("--selection", type=tb.parse_list, default=["random"])
    s.add_argument("--variants", type=tb.parse_list, default=["full"])
    s.add_argument("--coverage", type=float, default=0.9)
    s.add_argument("--live-ridge-weight", type=float, default=1.0,
                   help="the live columns' ridge penalty relative to the other columns' (1: the same)")
    s.add_argument("--live", type=tb.parse_list, default=["none"],
                   help=f"live shares added to the global features, one sweep each: {', '.join(LIVE_MODES)}")
    s.add_argument("--cost-fit", action="store_true",
                   help="also score blends of the cost variant with auto (cost_variants; needs cost in --variants)")
    s.add_argument("--json", default=None)
    ls = sub.add_parser("learn-scale")
    ls.add_argument("paths", nargs="+")
    ls.add_argument("--variant", default="auto")
    ls.add_argument("--selection", default=None)
    ls.add_argument("--level", type=float, default=0.9)
    ls.add_argument("--json", default=None)
    r = sub.add_parser("report")
    r.add_argument("paths", nargs="+")
    r.add_argument("--variant", default=None, help="coverage table: this correction only")
    r.add_argument("--level", type=float, default=0.9)
    for p in (c, lv, s):
        p.add_argument("--threads", type=int, default=1)
    return tb.run_subcommand(ap.parse_args(argv), {"cache": cache, "live": live, "sweep": sweep, "learn-scale": learn_scale}, report)


if __name__ == "__main__":
    tb.run_main(main)
