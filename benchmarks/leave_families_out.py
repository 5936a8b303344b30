"""Generalisation to unseen model families: K-fold cross-validation over timm families.

    nice -n 5 python benchmarks/leave_families_out.py --settings timm-3090-infer,timm-i9 --folds 4 --methods 'seernet,gbm,flops' --hidden 64 --epochs 300 --time-limit 120 --json benchmarks/results/leave_families_out.json

**Folds.**  Every timm family (:func:`perfseer.data.splits.family_of`: ``resnet50d`` and
``resnet18`` are both ``resnet``) goes to fold ``int(sha256("perfseer-lfo-v1:<seed>:<family>")) mod K``.
Fold ``k`` holds out its families as the test set; the families of fold ``k + 1 (mod K)`` are the
validation set (early stopping, the GBM's boosting rounds, any choice a method makes); the other
``K - 2`` folds train.  So each test family, and each validation family, is absent from training:
validation measures the same thing as test, generalisation to new families, and the choices it
makes never look at test.  With ``K = 4`` that is 2:1:1, the ratio of the dataset's own splits.
The K test sets are disjoint and cover every family once, so the pooled row (every test
prediction of every fold together) scores each measurement exactly once.

**What it prints**, per setting and fold: per method the test MAPE, Spearman's rho, and the
worst family's MAPE (over families with at least ``--min-family-models`` models), its
validation MAPE, and the epochs it ran; then the pooled scores over all folds and, per method, in
how many folds it beat the GBM.  ``--ensemble A+B`` adds the geometric mean of two methods'
predictions (an average of their log predictions), computed from the fitted methods, no
training.  ``--stack A+B[+C...]`` adds their *weighted* geometric mean with the weights fitted on
the fold's validation rows (:func:`perfseer.models.blend.fit_weights`): what the ``blend`` model
(``perfseer train --model blend --set members=A+B``) computes from members trained with the same
seed and recipe, so a blend is scored from its members' runs without training it again.
``--seed-mean BASE`` adds ``BASE-seedmean``, the equal-weight geometric mean of ``BASE`` and its
runs with other seeds (methods ``BASE-s1``, ``BASE-s2``, ...: ``--seed 1 --label-suffix @x-s1``).
``--shift`` adds, for every stack, ``stack+shift:A+B``: the same blend times ``exp(b)``, with ``b``
fitted on the fold's validation rows after the weights (:func:`perfseer.models.blend.fit_log_shift`,
the blend model's ``fit_shift``).

**Stage two** (``--refit-from REPORT [--refit-of SUFFIX]``): every method trained again on train +
validation families, the share of the rows a shipped card trains on (train + test of the 2:1:1
split by architecture), for as long as its run in ``REPORT`` chose on validation (a network: its
best epoch count, early stopping off; the GBM: its boosting rounds, from a stage one fitted in the
same run).  The validation predictions stay stage one's, so ``--stack``/``--shift``/``--seed-mean``
fit exactly stage one's weights and choices, and test enters none of them.

``--json OUT`` keeps every number and every test prediction (model, family, batch size, truth,
prediction per method), rewritten after each fold.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
import numpy as np  # noqa: E402
from rich.markup import escape  # noqa: E402

LFO_SALT = "perfseer-lfo-v1"
DEFAULT_SETTINGS = "timm-3090-infer,timm-i9"
DEFAULT_METHODS = "seernet,gbm,flops"


def fold_of(family: str, folds: int, seed: int = 0) -> int:
    """The fold of ``family``: a pure function of ``(seed, family, folds)``."""
    digest = hashlib.sha256(f"{LFO_SALT}:{int(seed)}:{family}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % folds


def fold_splits(families, folds: int, k: int, seed: int = 0) -> list[str]:
    """``train`` / ``val`` / ``test`` per family for fold ``k``: test = fold ``k``, val = fold
    ``k + 1 (mod folds)``, train = the rest."""
    out = []
    for f in families:
        j = fold_of(str(f), folds, seed)
        out.append("test" if j == k else "val" if j == (k + 1) % folds else "train")
    return out


def scores(y, p, fam, min_models: int, models) -> dict:
    """MAPE, Spearman and the worst family's MAPE (families with >= ``min_models`` models)."""
    from perfseer.fit.metrics import mape, spearman

    y, p = np.asarray(y, float), np.asarray(p, float)
    ape = np.abs(p - y) / y * 100
    per_family = {}
    for f in sorted(set(fam)):
        m = np.asarray(fam) == f
        per_family[f] = {"mape": float(ape[m].mean()), "rows": int(m.sum()),
                         "models": int(len(set(np.asarray(models)[m]))),
                         "log_bias": float(np.mean(np.log(p[m] / y[m])))}
    eligible = {f: v for f, v in per_family.items() if v["models"] >= min_models} or per_family
    worst = max(eligible, key=lambda f: eligible[f]["mape"])
    return {"mape": float(mape(y, p)), "spearman": float(spearman(y, p)), "worst_family": worst,
            "worst_family_mape": eligible[worst]["mape"], "per_family": per_family}


def fit_method(spec: str, sel, args, console, train_sel=None, train_overrides=None, config_overrides=None) -> dict:
    """Train ``spec`` (``NAME`` or ``NAME[FIELD=VALUE;...]``) on the fold; predictions on val and test.

    ``train_sel`` (``--aux-devices``): train on its rows and targets instead (the setting's device
    first, then the auxiliary devices), and predict ``sel``'s val and test rows with target 0, so the
    scored rows are the same as without auxiliary targets.  ``train_overrides``: fields of the
    :class:`~perfseer.fit.trainer.TrainConfig` to change, ``config_overrides`` of the method's
    config (``--refit-from``)."""
    from compare_methods import split_variant

    from perfseer.errors import PerfseerError
    from perfseer.fit.methods import train_method

    name, variant = split_variant(spec)
    extra = (tb.overrides_for(name, args.set) or {}) | variant | (config_overrides or {}) or None
    t0 = time.perf_counter()
    tsel = train_sel or sel
    try:
        fitted = train_method(name, tsel.train, tsel.val, tb.model_config(name, args.hidden, extra),
                              train_config=tb.train_config(args, **(train_overrides or {})), targets=tsel.targets)
    except (PerfseerError, ImportError, RuntimeError) as e:
        tb.log(console, f"[red]{escape(spec)} failed[/red]: {e}")
        return {"method": spec, "error": f"{type(e).__name__}: {e}", "fit_time_s": time.perf_counter() - t0}
    res = fitted.train_result
    its = getattr(fitted.estimator, "best_iterations_", None)  # the GBM's boosting rounds per target
    return {"method": spec, "fit_time_s": round(fitted.fit_time_s, 1), **({"best_iterations": its} if its else {}),
            "epochs": res.epochs_run if res else None, "best_epoch": res.best_epoch if res else None,
            "stopped": res.stopped if res else None, "config": fitted.config,
            "pred_val": fitted.predict(sel.val)[:, 0], "pred_test": fitted.predict(sel.test)[:, 0]}


def stage_one(report: dict, setting: str, fold: int, label: str, val_y) -> dict:
    """``--refit-from``: the run ``label`` of ``fold`` in a report of the same setting and folds."""
    S = report["settings"].get(setting)
    f = next((f for f in (S or {}).get("folds", []) if f["fold"] == fold), None)
    r = next((r for r in (f or {}).get("results", []) if r["method"] == label), None)
    if r is None or "error" in r:
        raise SystemExit(f"error: --refit-from has no run {label!r} of {setting} fold {fold + 1}: "
                         "name its label with --refit-of (the stage-one --label-suffix)")
    if not r.get("best_epoch"):
        raise SystemExit(f"error: {label!r} has no best epoch (not a neural run): --refit-from refits neural "
                         "methods only")
    if len(f["val_y"]) != len(val_y) or not np.allclose(f["val_y"], val_y):
        raise SystemExit(f"error: --refit-from: fold {fold + 1} of {setting} has other validation rows: "
                         "refit with the data, --folds and --fold-seed of the stage-one run")
    return r


def refit(spec: str, sel, args, console, setting: str, fold: int, val_y) -> dict:
    """Stage two of ``--refit-from``: ``spec`` trained again on train + validation and scored on
    test, for as long as stage one chose on validation: a neural method for its stage-one run's
    best epoch count (:func:`stage_one`; early stopping off), the GBM for its boosting rounds (stage
    one fitted here first, it takes seconds); the validation predictions stay stage one's, so stacks
    fit their weights on rows no member trained on."""
    import dataclasses

    from compare_methods import split_variant

    if split_variant(spec)[0] == "gbm":
        first = fit_method(spec, sel, args, console)
        if "error" in first:
            return first
        both = dataclasses.replace(sel, train=list(sel.train) + list(sel.val), val=[])
        length = {"n_estimators": max(first["best_iterations"])}
        r = fit_method(spec, sel, args, console, train_sel=both, config_overrides=length)
    else:
        first = stage_one(args.refit_report, setting, fold, spec + args.refit_of, val_y)
        both = dataclasses.replace(sel, train=list(sel.train) + list(sel.val))
        length = {"epochs": int(first["best_epoch"])}
        r = fit_method(spec, sel, args, console, train_sel=both, train_overrides={
            "max_epochs": length["epochs"], "early_stopping_patience": None, "time_limit_s": None})
    if "error" not in r:
        r["pred_val"] = np.asarray(first["pred_val"], float)
        r["refit"] = {"from": args.refit_from, "stage_one": first["method"], **length, "train_rows": len(both.train)}
    return r


def run_setting(setting, args, console, log_console, only=None):
    """Train and score every method on each fold; yields the report so far after each fold."""
    from perfseer.data.splits import model_family
    from perfseer.fit.data import select, select_devices
    from perfseer.fit.metrics import mape

    def family_labels(v):
        lab = v.labels.copy()
        lab["family"] = [model_family(m) for m in lab["model"].astype(str)]
        return lab[lab["family"].notna()].reset_index(drop=True)

    view, info = tb.setting_view(setting, args.data_root, args.archs, args.batch)
    labels = family_labels(view)
    aux = list(args.aux_devices or [])
    if aux:  # one view of the setting's device and the auxiliary ones, for training only
        if len(setting.devices) != 1:
            raise SystemExit(f"error: --aux-devices needs a one-device setting; {setting.name} has {len(setting.devices)}")
        train_devices = list(setting.devices) + [d for d in aux if d not in setting.devices]
        jview, _ = tb.setting_view(setting, args.data_root, args.archs, args.batch, devices=train_devices)
        jlabels = family_labels(jview)
    out = {"setting": setting.name, "devices": list(setting.devices), "phase": setting.phase, "data": info,
           "folds": []}
    if aux:
        out["aux_devices"] = train_devices[1:]
    for k in range(args.folds):
        if only is not None and k not in only:
            continue
        lab = labels.copy()
        lab["family_split"] = fold_splits(lab["family"], args.folds, k, args.fold_seed)
        sel = select(tb.View(view.graphs, lab), setting.metric, list(setting.devices), setting.phase, "family_split")
        test_rows = sel.labels.iloc[[int(g.row) for g in sel.test]]
        val_rows = sel.labels.iloc[[int(g.row) for g in sel.val]]
        y_test = np.array([float(g.y[0, 0]) for g in sel.test])
        y_val = np.array([float(g.y[0, 0]) for g in sel.val])
        fam_test = test_rows["family"].astype(str).tolist()
        mod_test = test_rows["model"].astype(str).tolist()
        held = sorted(set(fam_test))
        tb.log(log_console, f"[bold]{setting.name} fold {k + 1}/{args.folds}[/bold]: {sel.describe()}; "
                        f"{len(held)} test families, {val_rows['family'].nunique()} val families")
        train_sel = None
        if aux:
            jl = jlabels.copy()
            jl["family_split"] = fold_splits(jl["family"], args.folds, k, args.fold_seed)
            train_sel = select_devices(tb.View(jview.graphs, jl), setting.metric, train_devices, setting.phase,
                                       "family_split")
            tb.log(log_console, f"  joint training on {', '.join(train_devices)}: {train_sel.describe()}")
        fold = {"fold": k, "test_families": held, "sizes": {s: len(sel.split(s)) for s in ("train", "val", "test")},
                "test_rows": {"model": mod_test, "family": fam_test,
                              "batch_size": test_rows["batch_size"].astype(int).tolist(), "y": y_test.tolist()},
                "val_y": y_val.tolist(), "results": []}
        out["folds"].append(fold)
        rows = []
        for spec in args.methods:
            if args.refit_from is not None:
                r = refit(spec, sel, args, log_console, setting.name, k, y_val)
            else:
                r = fit_method(spec, sel, args, log_console, train_sel)
            r["method"] = spec + args.label_suffix
            rows.append(r)
            if "error" not in r:
                r["val_mape"] = float(mape(y_val, r["pred_val"]))
                r["test"] = scores(y_test, r["pred_test"], fam_test, args.min_family_models, mod_test)
                ep = f", {r['epochs']} epochs ({r['stopped']}, best {r['best_epoch']})" if r["epochs"] else ""
                tb.log(log_console, f"  {escape(spec)}: {r['fit_time_s']:.0f} s{ep}; val {r['val_mape']:.2f} %, "
                                    f"test {r['test']['mape']:.2f} %, rho {r['test']['spearman']:.3f}, worst "
                                    f"{r['test']['worst_family']} {r['test']['worst_family_mape']:.1f} %")
            fold["results"] = _jsonable(rows)
            yield out  # written after every method: a run stopped early keeps what it finished
        fold["results"] = _jsonable(rows)
        add_ensembles(fold, args.ensemble, args.min_family_models)
        add_seed_means(fold, args.seed_mean, args.min_family_models)
        add_stacks(fold, args.stack, args.min_family_models, args.shift)
        console.print(fold_table(setting.name, fold, args))
        yield out
    out["pooled"] = pooled(out, args)
    console.print(pooled_table(setting.name, out, args))
    yield out


def _jsonable(rows: list[dict]) -> list[dict]:
    """Result rows for the JSON: arrays as lists, validation predictions kept (ensembles and
    merges need them)."""
    return [{k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in r.items()} for r in rows]


def pooled(out: dict, args) -> dict:
    """Every fold's test predictions together (each measurement once), per method."""
    methods = list(dict.fromkeys(r["method"] for f in out["folds"] for r in f["results"]))
    res = {}
    for m in methods:
        y, p, fam, mod, ok = [], [], [], [], True
        wins = 0
        for f in out["folds"]:
            r = next((r for r in f["results"] if r["method"] == m), None)
            if r is None or "error" in r:
                ok = False
                break
            y += f["test_rows"]["y"]
            p += r["pred_test"]
            fam += f["test_rows"]["family"]
            mod += f["test_rows"]["model"]
            g = next((r for r in f["results"] if r["method"] == "gbm" and "error" not in r), None)
            wins += bool(g is not None and r["test"]["mape"] <= g["test"]["mape"])
        if ok:
            s = scores(y, p, fam, args.min_family_models, mod)
            s["fold_mapes"] = [next(r for r in f["results"] if r["method"] == m)["test"]["mape"] for f in out["folds"]]
            s["fold_val_mapes"] = [next(r for r in f["results"] if r["method"] == m)["val_mape"] for f in out["folds"]]
            s["max_fold_mape"] = max(s["fold_mapes"])
            s["folds_not_worse_than_gbm"] = wins
            res[m] = s
    return res


def add_ensembles(fold: dict, pairs, min_models: int) -> None:
    """Append to ``fold["results"]`` the geometric mean of each pair ``A+B`` of its methods."""
    from perfseer.fit.metrics import mape

    by = {r["method"]: r for r in fold["results"] if "error" not in r}
    tr = fold["test_rows"]
    for pair in pairs:
        a, b = pair.split("+", 1)
        if a not in by or b not in by or pair in by:
            continue
        r = {"method": pair, "fit_time_s": by[a]["fit_time_s"] + by[b]["fit_time_s"], "epochs": None,
             "pred_val": np.sqrt(np.asarray(by[a]["pred_val"]) * np.asarray(by[b]["pred_val"])),
             "pred_test": np.sqrt(np.asarray(by[a]["pred_test"]) * np.asarray(by[b]["pred_test"]))}
        r["val_mape"] = float(mape(fold["val_y"], r["pred_val"]))
        r["test"] = scores(tr["y"], r["pred_test"], tr["family"], min_models, tr["model"])
        fold["results"] += _jsonable([r])


def add_seed_means(fold: dict, bases, min_models: int) -> None:
    """Append to ``fold["results"]`` for each ``BASE`` the equal-weight geometric mean of ``BASE``
    and its other seeds, the methods ``BASE-s1``, ``BASE-s2``, ... (``--seed --label-suffix`` runs),
    as ``BASE-seedmean`` (a method name a ``--stack`` can use), over the seeds the fold has (listed in
    ``seeds``); weights not fitted, so validation cannot pick the luckiest seed."""
    import re

    from perfseer.fit.metrics import mape

    by = {r["method"]: r for r in fold["results"] if "error" not in r}
    tr = fold["test_rows"]
    for base in bases:
        seeds = [base] + sorted((m for m in by if re.fullmatch(re.escape(base) + r"-s\d+", m)),
                                key=lambda m: int(m.rsplit("-s", 1)[1]))
        name = f"{base}-seedmean"
        if base not in by or len(seeds) < 2 or name in by:
            continue
        lv = np.mean(np.log([by[m]["pred_val"] for m in seeds]), axis=0)
        lt = np.mean(np.log([by[m]["pred_test"] for m in seeds]), axis=0)
        r = {"method": name, "fit_time_s": sum(by[m]["fit_time_s"] for m in seeds), "epochs": None,
             "seeds": seeds, "pred_val": np.exp(lv), "pred_test": np.exp(lt)}
        r["val_mape"] = float(mape(fold["val_y"], r["pred_val"]))
        r["test"] = scores(tr["y"], r["pred_test"], tr["family"], min_models, tr["model"])
        fold["results"] += _jsonable([r])


def add_stacks(fold: dict, stacks, min_models: int, shift: bool = False) -> None:
    """Append to ``fold["results"]`` each ``A+B[+C...]`` of its methods blended with validation-fitted
    weights (``stack:A+B``; the weights in ``weights``); with ``shift`` also ``stack+shift:A+B``, the
    same blend plus a log-space constant fitted on validation after the weights (in ``shift``)."""
    from perfseer.models.blend import fit_log_shift, fit_weights, split_members
    from perfseer.fit.metrics import mape

    by = {r["method"]: r for r in fold["results"] if "error" not in r}
    tr = fold["test_rows"]
    for spec in stacks:
        members, name = split_members(spec), f"stack:{spec}"
        if any(m not in by for m in members):
            continue
        r = by.get(name)
        if r is None:
            lv = np.log([by[m]["pred_val"] for m in members])
            lt = np.log([by[m]["pred_test"] for m in members])
            w = fit_weights(lv, fold["val_y"])
            r = {"method": name, "fit_time_s": sum(by[m]["fit_time_s"] for m in members), "epochs": None,
                 "weights": w.tolist(), "pred_val": np.exp(w @ lv), "pred_test": np.exp(w @ lt)}
            r["val_mape"] = float(mape(fold["val_y"], r["pred_val"]))
            r["test"] = scores(tr["y"], r["pred_test"], tr["family"], min_models, tr["model"])
            fold["results"] += _jsonable([r])
        if shift and f"stack+shift:{spec}" not in by:
            pv, pt = np.asarray(r["pred_val"], float), np.asarray(r["pred_test"], float)
            b = float(fit_log_shift(np.log(pv), fold["val_y"])[0])
            rs = r | {"method": f"stack+shift:{spec}", "shift": b, "pred_val": pv * np.exp(b),
                      "pred_test": pt * np.exp(b)}
            rs["val_mape"] = float(mape(fold["val_y"], rs["pred_val"]))
            rs["test"] = scores(tr["y"], rs["pred_test"], tr["family"], min_models, tr["model"])
            fold["results"] += _jsonable([rs])


def _derived(method: str) -> bool:
    """An ensemble or stack of other methods (``A+B``, ``stack:A+B``), not a run: a ``+`` outside
    brackets (``gbm[features=global+ops]`` is a run)."""
    from perfseer.models.blend import split_members

    return method.startswith("stack") or len(split_members(method)) > 1


def merge(paths, args, console) -> dict:
    """Folds run as separate processes (``--only-folds``, or other ``--methods`` on the same fold),
    one report: per setting, the folds of every file; a fold found in several files gets the union
    of their methods (a method found twice keeps the first file's); ensembles, stacks, pooled scores."""
    import json

    report = {"benchmark": "leave_families_out", "merged_from": [str(p) for p in paths], "settings": {}}
    for path in paths:
        rep = json.loads(Path(path).read_text())
        report.setdefault("args", rep["args"])
        for name, S in rep["settings"].items():
            dst = report["settings"].setdefault(name, {k: v for k, v in S.items() if k not in ("folds", "pooled")}
                                                 | {"folds": []})
            have = {f["fold"]: f for f in dst["folds"]}
            for f in S["folds"]:
                if f["fold"] not in have:
                    dst["folds"].append(f)
                    continue
                old = have[f["fold"]]
                if old["test_rows"]["y"] != f["test_rows"]["y"]:
                    raise SystemExit(f"error: {path}: fold {f['fold'] + 1} of {name} has other test rows than "
                                     f"{report['merged_from'][0]}: merge runs of the same data and --fold-seed")
                known = {r["method"] for r in old["results"]}
                old["results"] += [r for r in f["results"] if r["method"] not in known and not _derived(r["method"])]
    for name, S in report["settings"].items():
        S["folds"].sort(key=lambda f: f["fold"])
        for f in S["folds"]:
            add_ensembles(f, args.ensemble, args.min_family_models)
            add_seed_means(f, args.seed_mean, args.min_family_models)
            add_stacks(f, args.stack, args.min_family_models, args.shift)
            console.print(fold_table(name, f, args))
        S["pooled"] = pooled(S, args)
        console.print(pooled_table(name, S, args))
    return report


def fold_table(name: str, fold: dict, args):
    from rich.table import Table

    t = Table(title=f"{name}, fold {fold['fold'] + 1}/{args.folds}: {len(fold['test_families'])} held-out families; "
                    f"train/val/test {fold['sizes']['train']}/{fold['sizes']['val']}/{fold['sizes']['test']}")
    for c in ("method", "fit s", "epochs", "val MAPE %", "test MAPE %", "Spearman", "worst family", "its MAPE %"):
        t.add_column(c, justify="left" if c in ("method", "worst family") else "right")
    for r in fold["results"]:
        if "error" in r:
            t.add_row(escape(r["method"]), tb.f1(r.get("fit_time_s"), 1), "-", "-",
                      f"[red]{r['error'][:50]}[/red]", "-", "-", "-")
            continue
        ep = "-" if r.get("epochs") is None else f"{r['epochs']} ({r['best_epoch']})"
        t.add_row(escape(r["method"]), tb.f1(r["fit_time_s"], 0), ep, tb.f1(r["val_mape"]), tb.f1(r["test"]["mape"]),
                  tb.f1(r["test"]["spearman"], 3), r["test"]["worst_family"], tb.f1(r["test"]["worst_family_mape"], 1))
    return t


def pooled_table(name: str, out: dict, args):
    from rich.table import Table

    n = len(out["folds"])
    t = Table(title=f"{name}: {n} of {args.folds} folds over families, every test row once")
    for c in ("method", "pooled MAPE %", "per fold", "max fold", "mean val", "Spearman", "worst family",
              "its MAPE %", "folds <= GBM"):
        t.add_column(c, justify="left" if c in ("method", "worst family", "per fold") else "right")
    for m, s in out["pooled"].items():
        t.add_row(escape(m), tb.f1(s["mape"]), " / ".join(f"{v:.1f}" for v in s["fold_mapes"]),
                  tb.f1(s["max_fold_mape"]), tb.f1(statistics.fmean(s["fold_val_mapes"])), tb.f1(s["spearman"], 3),
                  s["worst_family"], tb.f1(s["worst_family_mape"], 1), f"{s['folds_not_worse_than_gbm']}/{n}")
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", type=tb.parse_settings, default=tb.parse_settings(DEFAULT_SETTINGS),
                    help=f"comma-separated timm settings (default {DEFAULT_SETTINGS}); their split column is ignored")
    ap.add_argument("--methods", type=tb.parse_list, default=tb.parse_list(DEFAULT_METHODS),
                    help=f"comma-separated, NAME or NAME[FIELD=VALUE;...] (default {DEFAULT_METHODS})")
    ap.add_argument("--ensemble", type=tb.parse_list, default=[], metavar="A+B,...",
                    help="geometric means of two methods' predictions to add, e.g. seernet+gbm")
    ap.add_argument("--stack", type=tb.parse_list, default=[], metavar="A+B[+C],...",
                    help="weighted geometric means of 2-4 methods, weights fitted on each fold's validation "
                         "rows (what the blend model does), e.g. 'seernet[readout=sum]+pmgns'")
    ap.add_argument("--seed-mean", type=tb.parse_list, default=[], metavar="BASE,...",
                    help="add BASE-seedmean: the equal-weight geometric mean of method BASE and its seed runs "
                         "BASE-s1, BASE-s2, ... (run with --seed K --label-suffix BASE_SUFFIX-sK)")
    ap.add_argument("--shift", action="store_true",
                    help="also score every --stack with a log-space constant fitted on validation after the "
                         "weights (the blend model's fit_shift): rows stack+shift:A+B")
    ap.add_argument("--folds", type=int, default=4, help="K: folds over families (default 4, i.e. 2:1:1)")
    ap.add_argument("--only-folds", type=tb.parse_list, default=None, metavar="K,...",
                    help="run only these folds (0-based); the pooled row then covers them only")
    ap.add_argument("--fold-seed", type=int, default=0, help="seed of the family-to-fold hash (default 0)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="train nothing: merge the folds of these reports (runs of --only-folds) into one "
                         "report, with --ensemble pairs and pooled scores")
    ap.add_argument("--label-suffix", default="", metavar="TEXT",
                    help="append TEXT to every method's name in the report (e.g. '@30ep': runs of the same method "
                         "at another budget, to --merge beside the first)")
    ap.add_argument("--min-family-models", type=int, default=2,
                    help="worst-family MAPE over families with at least this many models (default 2)")
    ap.add_argument("--aux-devices", type=tb.parse_list, default=None, metavar="DEV,...",
                    help="train every method multi-target on the setting's device plus these (e.g. "
                         "i7_12700h/fp32-nchw-pt240-dynamo for timm-i9), on the graphs measured on all of them "
                         "(select_devices); score target 0 on the setting's own val/test rows, as without")
    ap.add_argument("--refit-from", default=None, metavar="JSON",
                    help="stage two: train each neural method again on train + validation for the epochs its "
                         "run in JSON (a report of the same data and folds) chose, and score it on test; its "
                         "validation predictions stay the stage-one run's (stacks fit on them).  The GBM: its "
                         "stage one runs here, then it refits for the rounds that run kept")
    ap.add_argument("--refit-of", default=None, metavar="TEXT",
                    help="the stage-one runs' --label-suffix (default: --label-suffix)")
    tb.add_set_arg(ap)
    tb.add_common_args(ap)
    args = ap.parse_args(argv)
    if args.refit_from is not None:
        import json

        if args.aux_devices:
            ap.error("--refit-from does not combine with --aux-devices")
        try:
            args.refit_report = json.loads(Path(args.refit_from).read_text())
        except (OSError, ValueError) as e:
            ap.error(f"--refit-from: cannot read {args.refit_from}: {e}")
        if args.refit_of is None:
            args.refit_of = args.label_suffix
    if args.folds < 3:
        ap.error("--folds must be >= 3 (one fold tests, one validates, the rest train)")
    for pair in args.ensemble:
        if "+" not in pair or (args.merge is None and any(p not in args.methods for p in pair.split("+", 1))):
            ap.error(f"--ensemble {pair!r}: write A+B with A and B among --methods")
    from perfseer.models.blend import MAX_MEMBERS, split_members

    for spec in args.stack:
        members = split_members(spec)
        if not 2 <= len(members) <= MAX_MEMBERS or (args.merge is None and any(m not in args.methods for m in members)):
            ap.error(f"--stack {spec!r}: write 2 to {MAX_MEMBERS} of --methods joined by '+'")

    from rich.console import Console

    if args.merge:
        report = merge(args.merge, args, Console(width=200))
        tb.write_json(args.json, report)
        return 0

    tb.set_threads(args.threads)
    console, err = Console(width=200), Console(stderr=True, width=200)
    report = {"benchmark": "leave_families_out", "environment": tb.environment(),
              "args": {k: v for k, v in vars(args).items() if k not in ("settings", "refit_report")} | {
                  "settings": [s.name for s in args.settings]}, "settings": {}}
    only = None if args.only_folds is None else {int(k) for k in args.only_folds}
    for setting in args.settings:
        for out in run_setting(setting, args, console, err, only):
            report["settings"][setting.name] = out
            tb.write_json(args.json, report)
    if args.json:
        err.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    tb.run_main(main)
