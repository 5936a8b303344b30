"""Held-out model families: leave-families-out over timm families, the adopted blend recipes.

Four folds over timm families (:func:`fold_of`); fold ``k``'s families are the test set, fold
``k + 1``'s the validation set (early stopping, blend weights, the shift), the rest train, so no
test family is seen by training or by any choice.  Re-training the networks takes hours per fold,
so the suite recomputes the table from the committed per-row validation and test predictions of
the adopted members (``benchmarks/data/families/<setting>.json.gz``, packed from the research
reports kept at tag ``research-2026-11``): seed means, the validation-fitted blend weights
(:func:`perfseer.models.blend.fit_weights`) and shift (``fit_log_shift``), the pooled scores over
the four folds (every test row once), and the coverage of the shipped card's 90 % interval
(its ``q`` widened by its out-of-domain factor) on the unseen families.  The recipes are in
``benchmarks/configs/families.json``.  Exact.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re

import numpy as np

from perfseer import load_predictor
from perfseer.models.blend import fit_log_shift, fit_weights, split_members
from perfseer.fit.metrics import mape, spearman
from perfseer.trust import intervals as itv

from benchmarks.runner import DATA, BenchError, Context, Step, Suite, f, load_config, md_table

LFO_SALT = "perfseer-lfo-v1"


def fold_of(family: str, folds: int, seed: int = 0) -> int:
    """The fold of ``family``: a pure function of ``(seed, family, folds)``."""
    digest = hashlib.sha256(f"{LFO_SALT}:{int(seed)}:{family}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % folds


def fold_splits(families, folds: int, k: int, seed: int = 0) -> list[str]:
    """``train`` / ``val`` / ``test`` per family for fold ``k``: test = fold ``k``, val = fold
    ``k + 1 (mod folds)``, train = the rest."""
    out = []
    for fam in families:
        j = fold_of(str(fam), folds, seed)
        out.append("test" if j == k else "val" if j == (k + 1) % folds else "train")
    return out


def scores(y, p, fam, models, min_models: int) -> dict:
    """MAPE, Spearman and the worst family's MAPE (families with >= ``min_models`` models)."""
    y, p, fam, models = np.asarray(y, float), np.asarray(p, float), np.asarray(fam), np.asarray(models)
    ape = np.abs(p - y) / y * 100
    per = {}
    for fa in sorted(set(fam.tolist())):
        m = fam == fa
        per[fa] = {"mape": float(ape[m].mean()), "models": int(len(set(models[m].tolist())))}
    eligible = {k: v for k, v in per.items() if v["models"] >= min_models} or per
    worst = max(eligible, key=lambda k: eligible[k]["mape"])
    return {"mape": float(mape(y, p)), "spearman": float(spearman(y, p)), "worst_family": worst,
            "worst_family_mape": eligible[worst]["mape"]}


def method_preds(fold: dict, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Validation and test predictions of ``method`` in ``fold``: a packed run, ``BASE-seedmean``
    (the geometric mean of ``BASE`` and ``BASE-sK``), or ``stack[+shift]:A+B...`` (weights, then
    the shift, fitted on the fold's validation rows)."""
    runs, val_y = fold["methods"], np.asarray(fold["val_y"], float)
    if method in runs:
        return np.asarray(runs[method]["pred_val"], float), np.asarray(runs[method]["pred_test"], float)
    if method.startswith(("stack:", "stack+shift:")):
        kind, spec = method.split(":", 1)
        parts = [method_preds(fold, m) for m in split_members(spec)]
        lv, lt = np.log([p[0] for p in parts]), np.log([p[1] for p in parts])
        w = fit_weights(lv, val_y)
        pv, pt = np.exp(w @ lv), np.exp(w @ lt)
        if kind == "stack+shift":
            b = float(fit_log_shift(np.log(pv), val_y)[0])
            pv, pt = pv * np.exp(b), pt * np.exp(b)
        return pv, pt
    if method.endswith("-seedmean"):
        base = method[: -len("-seedmean")]
        seeds = [base] + sorted((m for m in runs if re.fullmatch(re.escape(base) + r"-s\d+", m)),
                                key=lambda m: int(m.rsplit("-s", 1)[1]))
        if base not in runs or len(seeds) < 2:
            raise BenchError(f"fold {fold['fold']}: no seeds of {base!r} in the packed predictions")
        lv = np.mean(np.log([runs[m]["pred_val"] for m in seeds]), axis=0)
        lt = np.mean(np.log([runs[m]["pred_test"] for m in seeds]), axis=0)
        return np.exp(lv), np.exp(lt)
    raise BenchError(f"fold {fold['fold']}: method {method!r} is not in the packed predictions")


def load_pack(setting: str) -> dict:
    path = DATA / "families" / f"{setting}.json.gz"
    if not path.exists():
        raise BenchError(f"missing {path} (committed with the suite)")
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def evaluate(pack: dict, C: dict, min_models: int, folds: list[int] | None = None) -> dict:
    """Pooled scores of each configured row over the folds (every test row once) and the card's
    interval coverage on the unseen families."""
    fl = [fo for fo in pack["folds"] if folds is None or fo["fold"] in folds]
    y = np.concatenate([fo["test_rows"]["y"] for fo in fl])
    fam = sum((fo["test_rows"]["family"] for fo in fl), [])
    mod = sum((fo["test_rows"]["model"] for fo in fl), [])
    rows = []
    for label, stage, method in C["rows"]:
        pt = [method_preds(fo, method)[1] for fo in fl]
        s = scores(y, np.concatenate(pt), fam, mod, min_models)
        s["fold_mapes"] = [float(mape(fo["test_rows"]["y"], p)) for fo, p in zip(fl, pt)]
        rows.append({"label": label, "stage": stage, "method": method, **s})
    card = load_predictor(C["card"])
    t = card.targets[0]
    iv = card.card.get("intervals") or {}
    q = iv["targets"][t.key]["q"]
    factor = iv.get("ood_factor", itv.DEFAULT_OOD_FACTOR)
    pt = np.concatenate([method_preds(fo, C["coverage_of"])[1] for fo in fl])
    lo, hi = itv.bounds(pt, q, np.zeros(len(pt), bool), factor)
    cov = float(((y >= lo) & (y <= hi)).mean() * 100)
    return {"setting": pack["setting"], "folds": [fo["fold"] for fo in fl], "test_rows": int(len(y)),
            "families": len(set(fam)), "rows": rows,
            "coverage": {"card": C["card"], "q": q, "ood_factor": factor, "of": C["coverage_of"], "pct": cov}}


def steps(ctx: Context) -> list[Step]:
    cfg = load_config("families")
    out = []
    for name, C in cfg["settings"].items():
        folds = [0] if ctx.quick else None
        out.append(Step(name, lambda name=name, C=C, folds=folds: evaluate(load_pack(name), C,
                                                                            cfg["min_family_models"], folds)))
    return out


def render(ctx: Context, res: dict[str, dict]) -> str:
    table = []
    for name, r in res.items():
        for row in r["rows"]:
            table.append([name, row["label"], row["stage"], f(row["mape"], 2),
                          " / ".join(f"{v:.1f}" for v in row["fold_mapes"]), f(row["spearman"], 3),
                          f"{row['worst_family']} ({row['worst_family_mape']:.0f})"])
    cov = "; ".join(f"{n}: {r['coverage']['pct']:.1f} % of {r['test_rows']} rows "
                    f"(`{r['coverage']['card']}`, q {r['coverage']['q']:.3f} × {r['coverage']['ood_factor']:g})"
                    for n, r in res.items())
    return ("## Held-out model families\n\n"
            "Leave-families-out over timm families, 4 folds (a quarter of the families tested, a quarter "
            "validates, half trains; every test row once in the pooled score). *Stage one* trains each "
            "member on the training half; *stage two* trains it again on train + validation families (the "
            "share a card trains on) for the epochs stage one chose. The blend is the bundled card's recipe "
            "(`benchmarks/configs/families.json`). Recomputed from the committed per-row predictions of "
            "those runs (`benchmarks/data/families/`; re-training takes hours per fold), exact.\n\n"
            + md_table(["setting", "method", "stage", "pooled MAPE %", "per fold", "Spearman",
                        "worst family (MAPE %)"], table)
            + f"\n\nThe card's 90 % interval, widened by its out-of-domain factor, on the stage-two blend's "
            f"unseen-family rows: {cov}.")


SUITE = Suite(
    name="families",
    description="accuracy on timm families absent from training (leave-families-out, adopted blends, GBMs)",
    reads="benchmarks/data/families/*.json.gz (per-row predictions), configs/families.json, the RTX 3090 and i9 cards",
    time_full="~10 s", time_quick="~10 s (fold 1 only)",
    steps=steps, render=render)
