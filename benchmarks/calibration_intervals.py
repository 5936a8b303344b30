"""The calibrated card's interval, row by row: why it misses, and a rule chosen on validation devices.

``calibration_sweep.py`` keeps, per simulated calibration, only quantiles of the held-out
``|r| / s``; a rule whose width varies from row to row (with the row's distance from the K
calibration models) needs the rows themselves.  This script:

``rows``
    simulates K-shot ``loglinear`` calibrations (the default ``auto`` variant) from a
    ``calibration_sweep.py cache`` file -- per device, K, selection and draw, exactly as ``sweep``
    draws them -- and writes one NPZ with, per calibration, the K rows' nested leave-one-model-out
    residuals and the held-out rows' residuals, and for both the distances of
    :data:`perfseer.fit.calibrate.DISTANCE_SPACES` (a calibration row: to the nearest *other*
    calibration model; a held-out row: to the nearest calibration model).
``learn``
    for every candidate rule (:func:`candidates`: the space, the width's growth ``beta``, one
    table for both selections or one each), learns ``c(K)`` on the validation and source devices
    (``sim``/``val``, never ``test``) and scores it by leave-one-device-out over them: the mean
    interval score (width plus ``2/alpha`` times the miss, in log units; lower is better) and
    the coverage per setting.  Prints the ranking and writes the chosen rule's table.
``report``
    the coverage of the 90 % interval per test setting (and validation), for the old ``scaled``
    rule and the chosen one, K = 10 / 20 / 50, random and K-centre picks: the tables of
    docs/calibration.md.

Example::

    python benchmarks/calibration_intervals.py rows --cache cache_timm4090.npz --out rows_timm4090.npz
    python benchmarks/calibration_intervals.py learn rows_*.npz --json learn.json
    python benchmarks/calibration_intervals.py report rows_*.npz --learned learn.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
import calibration_sweep as cs  # noqa: E402

SETTING_OF = {"nb201": "NAS-Bench-201", "timm3090": "timm 3090 source", "timm4090": "timm 4090 source"}


def _setting(path: str) -> str:
    stem = Path(path).name
    return next((v for k, v in SETTING_OF.items() if k in stem), stem)


# -- rows -------------------------------------------------------------------------------------------

def rows(args, console) -> None:
    from perfseer.fit import calibrate as C

    z = cs.load_cache(args.cache)
    src_devs = [str(d) for d in z["source_devices"]]
    ridge = C.CalibrationConfig().ridge
    targets = list(dict.fromkeys(z["target"].tolist()))
    if args.targets:
        targets = [t for t in targets if t in tb.parse_list(args.targets)]
    floors = source_intervals(z, args.level)
    tb.log(console, f"the source's own {args.level:g} interval half-widths: {floors}")
    meta, cal_r, cal_d, cal_off, test_r, test_d, test_off = [], [], [], [0], [], [], [0]
    cal_r_min = []
    t_all = time.perf_counter()
    for target in targets:
        v = cs.target_view(z, target, src_devs)
        role, logp_all, glob_all, emb_all, y_all, model_all, test, cand, ci, use = (
            v.role, v.logp, v.glob, v.emb, v.y, v.model, v.test, v.cand, v.ci, v.use)
        ty, tlogp, tglob, temb = y_all[test], logp_all[test], glob_all[test], emb_all[test]
        t0 = time.perf_counter()
        for k in args.k:
            for rule in args.selection:
                ndraw = args.draws if rule == "random" else args.kcentre_draws
                for d in range(ndraw):
                    rng = np.random.default_rng(1000 * k + d)  # the same draws as calibration_sweep.py sweep
                    pick = cs.select(rule, k, rng, glob_all[ci], logp_all[ci], emb_all[ci], d if rule != "random" else 0)
                    models = set(cand[pick])
                    idx = np.flatnonzero(~test & np.isin(model_all, list(models)))
                    groups = C._groups(model_all[idx])
                    logy = np.log(y_all[idx])
                    best, nested, inner = None, {}, {}
                    for variant in (C.AUTO_VARIANTS if args.variant == "auto" else (args.variant,)):
                        e_cal = emb_all[idx] if "embedding" in C.VARIANTS[variant] else None
                        res, inner[variant] = C.nested_residuals(logp_all[idx], glob_all[idx], logy, groups, variant,
                                                                 ridge, emb=e_cal, inner=True)
                        nested[variant] = res
                        rms = float(np.sqrt(np.mean(res ** 2)))
                        if best is None or rms < best[0]:
                            best = (rms, variant, res, e_cal)
                    s_min, variant, res_min, e_cal = best
                    # the residuals the library's auto now gives the interval: the variant choice
                    # nested in the leave-one-model-out loop (calibrate.auto_residuals); res_min:
                    # the chosen variant's own (the optimistic ones of the rules learned before)
                    res, _ = C.auto_residuals(nested, inner)
                    s = float(np.sqrt(np.mean(res ** 2)))
                    fit = C.fit_correction(logp_all[idx], glob_all[idx], logy, groups, ridge, variant, emb=e_cal)
                    pred_log = fit.predict_log(tlogp, tglob, temb if e_cal is not None else None)
                    r_test = np.log(ty) - pred_log
                    cal = C.distance_coords(logp_all[idx], glob_all[idx], emb_all[idx])
                    new = C.distance_coords(tlogp, tglob, temb)
                    dc = np.stack([C.loo_distance(cal[sp], groups) for sp in C.DISTANCE_SPACES], 1)
                    dt = np.stack([C.nearest_distance(new[sp], cal[sp]) for sp in C.DISTANCE_SPACES], 1)
                    from perfseer.fit.metrics import evaluate

                    e = evaluate(ty, np.exp(pred_log))
                    meta.append({"target": target, "role": role, "k": k, "selection": rule, "draw": d,
                                 "variant": variant, "base": src_devs[use[fit.base]],
                                 "source_q": floors.get(src_devs[use[fit.base]]), "models": len(models), "rows": int(len(idx)), "s": s,
                                 "s_min": s_min,
                                 "mape": e["mape"], "spearman": e["spearman"]})
                    cal_r.append(res.astype(np.float32))
                    cal_r_min.append(res_min.astype(np.float32))
                    cal_d.append(dc.astype(np.float32))
                    cal_off.append(cal_off[-1] + len(res))
                    test_r.append(r_test.astype(np.float32))
                    test_d.append(dt.astype(np.float32))
                    test_off.append(test_off[-1] + len(r_test))
        tb.log(console, f"{target} ({role}): {len(ty)} test rows, {time.perf_counter() - t0:.0f} s")
    import os

    from perfseer.atomic import tmp_sibling

    tmp = tmp_sibling(args.out)
    try:
        with open(tmp, "wb") as fh:
            np.savez_compressed(
                fh, meta=np.array(json.dumps(meta)), spaces=np.array(C.DISTANCE_SPACES),
                cal_r=np.concatenate(cal_r), cal_r_min=np.concatenate(cal_r_min), cal_d=np.concatenate(cal_d), cal_off=np.array(cal_off),
                test_r=np.concatenate(test_r), test_d=np.concatenate(test_d), test_off=np.array(test_off),
                args=np.array(json.dumps({k: v for k, v in vars(args).items() if k != "func"})))
        os.replace(tmp, args.out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    tb.log(console, f"wrote {args.out}: {len(meta)} calibrations, {time.perf_counter() - t_all:.0f} s")


def source_intervals(z: dict, level: float) -> dict[str, float]:
    """Per source column (device), the source predictor's own ``level`` interval half-width in log
    units on architectures it never trained on: the card's split-conformal ``intervals``
    (perfseer.trust) where it has them, else the conformal quantile of the column's own residuals
    on the test-split rows of the cache's ``sim`` devices (the source's own devices)."""
    from perfseer.runtime.predictor import load_predictor
    from perfseer.trust import intervals as itv

    from perfseer.errors import PerfseerError

    try:
        src = load_predictor(str(z["source"]))
    except PerfseerError:  # a cache of a source that is not at hand (the tests' synthetic one): no floor
        return {}
    devs = [str(d) for d in z["source_devices"]]
    cols = [t for t in src.targets if t.metric == "latency_ms"]
    out = {}
    card = (src.card.get("intervals") or {}).get("targets") or {}
    for j, (dev, t) in enumerate(zip(devs, cols)):
        if t.key in card:
            out[dev] = round(float(card[t.key]["q"]), 5)
            continue
        m = (z["role"] == "sim") & (z["split"] == "test") & (np.char.partition(z["target"], "@")[:, 0] == dev)
        if m.any():
            r = np.log(z["y"][m]) - z["logp"][z["graph_index"][m], j]
            out[dev] = round(float(itv.conformal_quantile(r, level)), 5)
    return out


# -- the calibrations, loaded -----------------------------------------------------------------------

class Sims:
    """Every simulated calibration of several ``rows`` files: metadata frame plus per-row arrays."""

    def __init__(self, paths):
        import pandas as pd

        frames, self.cal_r, self.cal_d, self.test_r, self.test_d = [], [], [], [], []
        self.cal_r_min = []  # the chosen variant's own residuals (rows files before the nested choice: the same)
        for p in paths:
            z = np.load(p, allow_pickle=False)
            self.spaces = [str(s) for s in z["spaces"]]
            f = pd.DataFrame(json.loads(str(z["meta"]))).assign(setting=_setting(p))
            if "source_q" not in f:  # a rows file written before the floor was recorded
                floors = source_intervals(cs.load_cache(json.loads(str(z["args"]))["cache"]), 0.9)
                f["source_q"] = f["base"].map(floors) if "base" in f else next(iter(floors.values()))
            frames.append(f)
            co, to = z["cal_off"], z["test_off"]
            cr, cd, tr, td = z["cal_r"], z["cal_d"], z["test_r"], z["test_d"]
            crm = z["cal_r_min"] if "cal_r_min" in z.files else cr
            for i in range(len(co) - 1):
                self.cal_r.append(cr[co[i]:co[i + 1]].astype(float))
                self.cal_r_min.append(crm[co[i]:co[i + 1]].astype(float))
                self.cal_d.append(cd[co[i]:co[i + 1]].astype(float))
                self.test_r.append(np.abs(tr[to[i]:to[i + 1]].astype(float)))
                self.test_d.append(td[to[i]:to[i + 1]].astype(float))
        self.meta = pd.concat(frames, ignore_index=True)
        self.meta["group"] = self.meta["selection"].map(cs.SELECTION_GROUP)
        self.meta["device"] = self.meta["setting"] + " | " + self.meta["target"]

    def parts(self, rule: dict) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per calibration under ``rule``: the held-out rows' effective ratio (a row is covered
        exactly when it is ``<= c``), their half-width per unit ``c`` and the floor.
        (:func:`perfseer.fit.calibrate.row_halfwidths` is the same rule on one calibration.)"""
        from perfseer.fit import calibrate as C

        j = self.spaces.index(rule["space"]) if rule["beta"] else 0
        out = []
        cal_r = self.cal_r_min if rule.get("residuals") == "min" else self.cal_r
        for i, (cr, cd, tr, td) in enumerate(zip(cal_r, self.cal_d, self.test_r, self.test_d)):
            unit = C.row_scales(cr, cd[:, j], td[:, j], rule["beta"], rule.get("form", "linear"), rule.get("stat", "rms"))
            f = rule.get("gamma", 0.0) * float(self.meta.at[i, "source_q"] or 0.0)
            if rule.get("combine", "max") == "rss":
                unit = np.sqrt(unit ** 2 + f ** 2)
                out.append((tr / unit, unit, np.zeros_like(unit)))
            else:  # q = max(c unit, f): a row within the floor is covered at any c
                out.append((np.where(tr <= f, 0.0, tr / unit), unit, np.full_like(unit, f)))
        return out


GRID = np.exp(np.linspace(np.log(0.2), np.log(30.0), 2001))  # c candidates (0.25 % apart)


def _cover_grid(parts) -> np.ndarray:
    """``[calibrations, GRID]``: each calibration's coverage at every grid ``c``."""
    return np.stack([np.searchsorted(np.sort(r), GRID, side="right") / len(r) for r, _, _ in parts])


def _c_at(cov_grid: np.ndarray, weights: np.ndarray, level: float) -> float:
    m = weights @ cov_grid / weights.sum()
    hit = np.flatnonzero(m >= level)
    return float(GRID[hit[0]] if len(hit) else GRID[-1])


def candidates(spaces, with_floor: bool = False, stats=("rms",), tables=None) -> list[dict]:
    """The rules ``learn`` compares: the width's growth with distance (none, or ``beta`` in each
    space), the ``c(K)`` tables (:data:`TABLES`), pooled per calibration or per setting; with
    ``with_floor`` also a floor at ``gamma`` times the source's own interval (tried, not kept:
    docs/calibration.md)."""
    tables = TABLES[:2] if tables is None else tables
    base = {"space": "none", "beta": 0.0, "form": "linear"}
    shapes = [base] + [{"space": sp, "beta": b, "form": "linear"} for sp in spaces for b in (0.5, 1.0, 2.0)]
    floors = [{"gamma": 0.0, "combine": "max"}] + ([{"gamma": g, "combine": cb} for g in (0.25, 0.5, 1.0)
                                                    for cb in ("max", "rss")] if with_floor else [])
    return [{**sh, **fl, "tables": t, "pool": p, **({"stat": st} if st != "rms" else {})}
            for sh in shapes for fl in floors for t in tables for p in POOLS for st in stats]


# the c(K) tables a rule may have: one per way of choosing the K models, one for all, one per kind of
# source predictor (NAS-Bench-201 or timm: calibrate.source_kind), or one per (source kind, selection)
TABLES = ("per-selection", "one", "per-source", "per-source-selection")


def table_groups(meta, tables: str) -> np.ndarray:
    """Per calibration, the key of the ``c(K)`` table it reads under ``tables`` (None: none)."""
    sel = meta["group"].to_numpy()
    known = meta["group"].notna().to_numpy()
    kind = np.where(meta["setting"].str.startswith("timm").to_numpy(), "timm", "nas-bench-201")
    if tables not in TABLES:
        raise SystemExit(f"unknown tables {tables!r}: choose among {', '.join(TABLES)}")
    key = {"per-selection": sel, "one": np.full(len(meta), "one", dtype=object), "per-source": kind,
           "per-source-selection": np.char.add(np.char.add(kind.astype(str), "/"), sel.astype(str))}[tables]
    return np.where(known, key, None)


# how c(K) pools the simulated calibrations: each weighs the same, or each setting (NAS-Bench-201,
# timm from the 3090, timm from the 4090) weighs the same in total
POOLS = ("calibration", "setting")
BEFORE = {"space": "none", "beta": 0.0, "form": "linear", "gamma": 0.0, "combine": "max", "tables": "per-selection",
          "pool": "calibration"}  # the rule of last session (scaled)


def _name(rule: dict) -> str:
    how = f"{rule['tables']}, pooled per {rule.get('pool', 'calibration')}"
    shape = "constant" if not rule["beta"] else f"{rule['space']} {rule['form']} beta={rule['beta']:g}"
    fl = f", floor {rule['gamma']:g} x source q ({rule['combine']})" if rule.get("gamma") else ""
    st = f", {rule['stat']} spread" if rule.get("stat", "rms") != "rms" else ""
    return f"{shape}{fl}{st} ({how})"


def evaluate_rule(sims: Sims, rule: dict, level: float, roles=("sim", "val"), lodo: bool = True) -> dict:
    """``c(K)`` learned on the ``sim``/``val`` calibrations; for those, scored leave one device out
    (``c`` learned without the device) when ``lodo``; for ``test`` calibrations, ``c`` from all
    validation ones.  Returns per calibration the coverage, mean log width and interval score,
    and the table (from all validation calibrations)."""
    alpha = 1 - level
    meta = sims.meta
    parts = sims.parts(rule)
    covg = _cover_grid(parts)
    group = table_groups(meta, rule["tables"])
    ks = meta["k"].to_numpy()
    val = meta["role"].isin(("sim", "val")).to_numpy() & (group != None)  # noqa: E711
    by_setting = rule.get("pool", "calibration") == "setting"
    settings, devices = meta["setting"].to_numpy(), meta["device"].to_numpy()

    def c_for(mask):
        w = np.ones(mask.sum())
        if by_setting:
            s = settings[mask]
            w = np.array([1 / (s == v).sum() for v in s])
        return _c_at(covg[mask], w, level)

    table, out = {}, {n: np.full(len(meta), np.nan) for n in ("coverage", "width", "score", "c")}
    for key in {(int(k), g) for k, g in zip(ks, group) if g is not None}:
        cell = (ks == key[0]) & (group == key[1])
        table[key] = c_for(cell & val)
        want = cell & meta["role"].isin(roles).to_numpy()
        lodo_c = {}
        for i in np.flatnonzero(want):
            if lodo and val[i]:
                if devices[i] not in lodo_c:
                    lodo_c[devices[i]] = c_for(cell & val & (devices != devices[i]))
                c = lodo_c[devices[i]]
            else:
                c = table[key]
            ratio, unit, f = parts[i]
            q = np.maximum(c * unit, f)
            out["coverage"][i] = float(np.mean(ratio <= c))
            out["width"][i] = float(np.mean(2 * q))
            out["score"][i] = float(np.mean(2 * q + (2 / alpha) * np.maximum(sims.test_r[i] - q, 0)))
            out["c"][i] = c
    return {**out, "table": {f"{g}|{k}": round(v, 4) for (k, g), v in sorted(table.items())}}


def _per_device(meta, ev, roles) -> "object":
    """Mean over draws per (setting, selection, K, device): what one new device would see."""
    df = meta.assign(cov=ev["coverage"], width=ev["width"], score=ev["score"])
    df = df[df["role"].isin(roles) & df["cov"].notna()]
    return df.groupby(["setting", "group", "k", "device"])[["cov", "width", "score"]].mean().reset_index()


def _summary(meta, ev, roles) -> "object":
    dev = _per_device(meta, ev, roles)
    return dev.groupby(["setting", "group", "k"])[["cov", "width", "score"]].mean().reset_index()


def in_band(cov, level: float, band: float = 0.05) -> "object":
    return (cov - level).abs() <= band + 1e-12


def learn(args, console) -> None:
    sims = Sims(args.paths)
    base = _summary(sims.meta, evaluate_rule(sims, BEFORE, args.level), ("sim", "val"))
    ranking = []
    for rule in candidates(sims.spaces, args.with_floor, args.stats.split(","), tb.parse_list(args.tables)):
        ev = evaluate_rule(sims, rule, args.level)
        s = _summary(sims.meta, ev, ("sim", "val"))
        dev = _per_device(sims.meta, ev, ("sim", "val"))
        # the criterion, per device: how many (device, selection, K) have a coverage (mean
        # over draws, c learned without the device) within level +- 5 points
        share = int(in_band(dev["cov"], args.level).sum())
        # every cell (setting x selection x K) weighs the same: the interval score relative to the
        # old rule's in that cell (NAS-Bench-201's narrow intervals must not vanish beside timm's)
        rel = float(np.mean(s["score"].to_numpy() / base["score"].to_numpy()))
        ranking.append({**rule, "name": _name(rule), "device_in_band": share, "rel_score": rel, "score": float(s["score"].mean()),
                        "width": float(s["width"].mean()),
                        "outside_band": int(((s["cov"] < 0.85) | (s["cov"] > 0.95)).sum()),
                        "abs_dev": float((s["cov"] - args.level).abs().mean()), "cells": len(s),
                        "coverage": s.round(4).to_dict("records")})
        r = ranking[-1]
        tb.log(console, f"{r['name']}: devices in band {share}, relative score {rel:.4f}, "
                        f"|cov - {args.level:g}| {r['abs_dev']:.4f}, "
                        f"outside 85-95 %: {r['outside_band']} of {r['cells']}")
    # the choice: among the rules no worse than the old one on any validation measure (settings
    # outside 85-95 %, devices in 85-95 %, mean |coverage - level|, interval score), the sharpest
    old = next(r for r in ranking if all(r[k] == BEFORE[k] for k in BEFORE))

    def dominated(r):
        return (r["outside_band"] > old["outside_band"] or r["device_in_band"] < old["device_in_band"]
                or r["abs_dev"] > old["abs_dev"] + 1e-12 or r["rel_score"] > old["rel_score"] + 1e-12)

    ranking.sort(key=lambda r: (dominated(r), r["rel_score"]))
    best = ranking[0]
    full = evaluate_rule(sims, best, args.level, lodo=False)
    scaled = evaluate_rule(sims, BEFORE, args.level, lodo=False)  # the scaled rule's c(K) (SCALE_TABLE)
    console.print("\n".join(f"{r['device_in_band']:3d}  {r['rel_score']:.4f}  {r['abs_dev']:.4f}  {r['outside_band']:2d}  "
                            f"{r['name']}"
                            for r in ranking[:25]))
    tb.write_json(args.json, {"benchmark": "calibration-intervals-learn", "args": vars(args), "level": args.level,
                              "chosen": {k: best[k] for k in (*BEFORE, "stat") if k in best}, "table": full["table"],
                              "scaled_table": scaled["table"], "ranking": ranking})


# -- report -----------------------------------------------------------------------------------------

def report(args) -> str:
    sims = Sims(args.paths)
    learned = cs._read(args.learned)  # plain or gzipped
    rules = [("before: scaled (constant c(K), one table per selection)", BEFORE),
             ("after: " + _name(learned["chosen"]), learned["chosen"])]
    from perfseer.fit import calibrate as C

    if args.shipped_min:  # the rule shipped before the nested variant choice, on the residuals it then read

        shipped = {**BEFORE, **C.DISTANCE_RULE, "pool": "setting", "residuals": "min"} if args.shipped_rule is None \
            else {**json.loads(args.shipped_rule), "residuals": "min"}
        rules.insert(1, ("shipped: " + _name(shipped) + ", auto's own residuals", shipped))
    # for reference (not chosen): the sharpest rule with a floor, when learn tried them, and the
    # sharpest with each other residual spread
    refs = [next((r for r in learned["ranking"] if r["gamma"]), None)]
    refs += [next((r for r in learned["ranking"] if r.get("stat") == st), None) for st in C.SCALE_STATS[1:]]
    refs += [next((r for r in learned["ranking"] if r["tables"] == t), None) for t in TABLES[2:]]
    for ref in refs:
        if ref is not None:
            rules.append(("reference, not chosen: " + _name(ref), {k: ref[k] for k in (*BEFORE, "stat") if k in ref}))
    out = []
    import pandas as pd

    frames, devs, draws = [], [], None
    for label, rule in rules:
        ev = evaluate_rule(sims, rule, args.level, roles=("sim", "val", "test"))
        df = sims.meta.assign(cov=ev["coverage"], factor=np.exp(ev["width"] / 2), score=ev["score"])
        df = df[df["cov"].notna()]
        df["vs"] = df["role"].where(df["role"] == "test", "validation (leave one device out)")
        if rule is learned["chosen"]:  # how much one calibration's coverage varies from draw to draw
            draws = df[df["vs"] == "test"].assign(device=lambda d: d["target"]).groupby(["setting", "group", "k", "device"])["cov"].agg(
                draws="count", mean="mean", low="min", high="max",
                std_error=lambda c: c.std(ddof=1) / np.sqrt(len(c))).round(3).reset_index()
        dev = df.groupby(["vs", "setting", "group", "k", "device"]).agg(cov=("cov", "mean"), factor=("factor", "median"),
                                                                          score=("score", "mean"))
        dev["ok"] = in_band(dev["cov"], args.level)
        g = dev.groupby(["vs", "setting", "group", "k"]).agg(cov=("cov", "mean"), worst_device=("cov", "min"),
                                                               factor=("factor", "median"), ok=("ok", "sum"),
                                                               score=("score", "mean"),
                                                               devices=("ok", "count")).reset_index()
        frames.append(g.assign(rule=label))
        devs.append(dev.reset_index().assign(rule=label))
    both = pd.concat(frames)
    per_dev = pd.concat(devs)
    per_dev["device"] = per_dev["device"].str.replace(" | ", ": ", regex=False)
    cell = both.assign(v=[f"{c:.3f} ({f:.2f})" for c, f in zip(both["cov"], both["factor"])])
    w = cell.pivot_table(index=["vs", "setting", "group", "k"], columns="rule", values="v", aggfunc="first").reset_index()
    out.append(f"### Coverage of the {int(args.level * 100)} % interval: mean over devices and draws (median factor)\n")
    out.append(cs._md(w))
    out.append("\n### Per device: the range, over selections and K, of its coverage (mean over draws)\n")
    rng = per_dev.groupby(["vs", "device", "rule"])["cov"].agg(lambda c: f"{c.min():.3f}-{c.max():.3f}")
    out.append(cs._md(rng.unstack("rule").reset_index()))
    out.append("")
    if draws is not None:
        out.append("### Test devices under the chosen rule: coverage over the draws (lowest, highest, standard "
                   "error of the mean)\n")
        out.append(cs._md(draws))
        out.append("")
    out.append(far_rows(sims, learned["chosen"], args.level))
    first = both[both["rule"] == rules[0][0]].set_index(["vs", "setting", "group", "k"])["score"]
    for label, _ in rules:
        b = both[both["rule"] == label]
        for vs in ("test", "validation (leave one device out)"):
            bb = b[b["vs"] == vs]
            inside = int(((bb["cov"] >= 0.85) & (bb["cov"] <= 0.95)).sum())
            out.append(f"- {label}, {vs}: {inside} of {len(bb)} settings in 85-95 %, mean |coverage - "
                       f"{args.level:g}| {float((bb['cov'] - args.level).abs().mean()):.3f}; per device "
                       f"(mean over draws) {int(bb['ok'].sum())} of {int(bb['devices'].sum())} in 85-95 %; interval "
                       f"score relative to the old rule's (mean over settings) "
                       f"{float(np.mean(bb.set_index(['vs', 'setting', 'group', 'k'])['score'] / first)):.3f}")
    return "\n".join(out)


def far_rows(sims: Sims, rule: dict, level: float) -> str:
    """How many held-out rows the card flags as far from the calibration set (farther, in the
    rule's space, than any calibration model from the others), and the coverage of flagged and
    other rows under ``rule`` and under the old rule."""
    import pandas as pd

    j = sims.spaces.index(rule["space"]) if rule["beta"] else sims.spaces.index("emb")
    evs = {n: (evaluate_rule(sims, r, level, roles=("sim", "val", "test")), sims.parts(r))
           for n, r in (("chosen", rule), ("before", BEFORE))}
    rows = []
    for i in range(len(sims.meta)):
        far = sims.test_d[i][:, j] > sims.cal_d[i][:, j].max() + 1e-9
        rec = {"vs": "test" if sims.meta.at[i, "role"] == "test" else "validation", "far_share": far.mean()}
        for n, (ev, parts) in evs.items():
            c = ev["c"][i]
            if np.isnan(c):
                break
            ok = parts[i][0] <= c
            rec[f"{n}_far"] = ok[far].mean() if far.any() else np.nan
            rec[f"{n}_near"] = ok[~far].mean()
        else:
            rows.append(rec)
    df = pd.DataFrame(rows).groupby("vs").mean()
    lines = ["Held-out rows flagged far from the calibration set (mean share over calibrations) and the coverage of "
             "flagged / other rows:"]
    for vs, r in df.iterrows():
        lines.append(f"- {vs}: {100 * r['far_share']:.1f} % flagged; coverage of flagged rows {r['chosen_far']:.3f} "
                     f"(old rule {r['before_far']:.3f}), of the others {r['chosen_near']:.3f} (old rule "
                     f"{r['before_near']:.3f})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rows")
    r.add_argument("--cache", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--targets", default=None)
    r.add_argument("--k", type=lambda t: [int(v) for v in t.split(",")], default=[10, 20, 50])
    r.add_argument("--draws", type=int, default=20)
    r.add_argument("--kcentre-draws", type=int, default=6)
    r.add_argument("--selection", type=tb.parse_list, default=["random", "kcentre-glob"])
    r.add_argument("--level", type=float, default=0.9, help="the source's own interval level (the floor)")
    r.add_argument("--variant", default="auto",
                   help="the correction: auto (the default's nested choice among AUTO_VARIANTS) or one variant, "
                        "e.g. cost (the default across device kinds)")
    r.add_argument("--threads", type=int, default=1)
    le = sub.add_parser("learn")
    le.add_argument("paths", nargs="+")
    le.add_argument("--level", type=float, default=0.9)
    le.add_argument("--json", default=None)
    le.add_argument("--with-floor", action="store_true", help="also rules with a floor at the source's own interval")
    le.add_argument("--stats", default="rms",
                    help="the residual spread(s) c(K) multiplies, comma-separated: rms (the RMS), conformal (the "
                         "split-conformal rank of |r|), median (the median |r|)")
    le.add_argument("--tables", default="per-selection,one",
                    help=f"the c(K) tables a rule may have, comma-separated among {', '.join(TABLES)} (default: "
                         "per-selection,one)")
    rp = sub.add_parser("report")
    rp.add_argument("paths", nargs="+")
    rp.add_argument("--learned", required=True)
    rp.add_argument("--level", type=float, default=0.9)
    rp.add_argument("--shipped-min", action="store_true",
                    help="also the rule shipped before the nested variant choice, on the chosen variant's own "
                         "residuals (cal_r_min; c(K) learned on them the same way)")
    rp.add_argument("--shipped-rule", default=None, help="that rule as JSON (default: calibrate.DISTANCE_RULE, "
                                                         "one table per selection, pooled per setting)")
    return tb.run_subcommand(ap.parse_args(argv), {"rows": rows, "learn": learn}, report)


if __name__ == "__main__":
    tb.run_main(main)
