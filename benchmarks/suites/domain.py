"""The domain verdict on held-out model families: which checks make "out of domain" mean something.

Uses the leave-families-out folds of :mod:`benchmarks.suites.families` (4 folds over timm families;
fold ``k`` tests, fold ``k + 1`` validates, the rest train) and their committed per-row predictions
of the shipped cards' blends.  For each fold, a domain (:func:`perfseer.trust.domain.build_domain`)
is built from the fold's *training* families' graphs (``datasets/timm``; the i9 card's
weight-work graphs for the i9), and each candidate rule of ``benchmarks/configs/domain.json``
marks the rows of the *validation* families in or out; their errors are the stage-one blend's
(members trained on the training families only).  The rule is chosen there (the config's
criterion), then scored on the *test* families with the stage-two blend (the shipped recipe,
trained on train + validation families) against a domain built from train + validation families.
No test family touches a choice.

The checks that need each fold's network (the embedding distance) cannot be computed from the
committed predictions; a nearest-neighbour distance in standardized log global features stands
in for it (``knn>T``).  The family check marks every held-out row out by definition.  Exact.
"""

from __future__ import annotations

import numpy as np

from benchmarks.runner import BenchError, Context, Step, Suite, f, load_config, md_table
from benchmarks.suites.families import fold_of, load_pack, method_preds
from perfseer import load_predictor
from perfseer.features import schema
from perfseer.trust import domain as dom

FOLDS = 4
_NAMES = list(schema.GLOBAL_FEATURES)
_CHECKED = [i for i, n in enumerate(_NAMES) if n != "batch_size"]


def _rows(setting: str, S: dict, pack: dict):
    """The dataset rows of the setting's device, their PyG graphs, op types and each fold's
    test-row indices into them (matched by model and measured latency)."""
    from perfseer.data.dataset import load_dataset  # deferred: torch
    from perfseer.features.pyg import OP_VOCAB  # deferred: torch

    ds = load_dataset(S["dataset"])
    L = ds.labels
    sub = L[(L.device == S["device"]) & (L.phase == S["phase"])].reset_index(drop=True)
    graphs = [ds.graphs[int(g)] for g in sub.graph]
    per_sample = np.stack([dom._u(ds.graphs.at_batch(int(g), 1)) for g in sub.graph])
    ops = [sorted({OP_VOCAB[int(i)] for i in g.op_type.unique().tolist()}) for g in graphs]
    key = {(m, round(float(y), 3)): i for i, (m, y) in enumerate(zip(sub.model, sub.latency_ms))}
    test_idx = {}
    for fo in pack["folds"]:
        t = fo["test_rows"]
        idx = [key.get((m, round(float(y), 3))) for m, y in zip(t["model"], t["y"])]
        if any(i is None for i in idx):
            raise BenchError(f"{setting} fold {fo['fold']}: {sum(i is None for i in idx)} test rows not in {S['dataset']}")
        test_idx[fo["fold"]] = idx
    fold = np.array([fold_of(str(fa), FOLDS) for fa in sub.family])
    return sub, graphs, per_sample, ops, fold, test_idx


def _knn_ratio(X: np.ndarray, train: np.ndarray, query: list[int], k: int, quantile: float) -> np.ndarray:
    """Mean distance to the ``k`` nearest training rows in standardized log global features, over
    the training rows' own leave-one-out distance at ``quantile``."""
    mu, sd = X[train].mean(0), X[train].std(0) + 1e-6
    Z = (X - mu) / sd

    def near(q: np.ndarray, skip: int) -> np.ndarray:
        out = np.empty(len(q))
        for i in range(0, len(q), 256):
            d = np.sqrt(np.maximum(((Z[q[i:i + 256], None, :] - Z[None, train, :]) ** 2).sum(-1), 0))
            d.sort(1)
            out[i:i + 256] = d[:, skip:skip + k].mean(1)
        return out

    return near(np.asarray(query), 0) / np.quantile(near(train, 1), quantile)


def _outs(rules: list[str], sub, graphs, ops, X, X1, train: np.ndarray, query: list[int], C: dict) -> dict:
    """Per rule, per query row, whether the rule marks it out of a domain built from the ``train`` rows."""
    fams = [str(x) for x in sub.family]
    domain, _ = dom.build_domain([graphs[i] for i in train], sorted({o for i in train for o in ops[i]}),
                                 [int(sub.batch_size[i]) for i in train], [str(sub.input_shape[i]) for i in train],
                                 families=[fams[i] for i in train])
    v = dom.verdicts(domain, [graphs[i] for i in query], [ops[i] for i in query],
                     [str(sub.input_shape[i]) for i in query])
    checks = np.array([not ok for ok, _ in v])  # perfseer.trust.domain.verdicts: the shipped rule
    ranges = domain["globals"]["ranges"]
    glob = np.array([any(not lo <= X[i, _CHECKED.index(_NAMES.index(n))] <= hi for n, (lo, hi) in ranges.items())
                     for i in query])
    blo, bhi = domain["batch_sizes"]
    batch = np.array([not blo <= int(sub.batch_size[i]) <= bhi for i in query])
    family = np.array([fams[i] not in set(domain["families"]) for i in query])
    out = {}
    for rule in rules:
        if rule == "checks":
            out[rule] = checks
        elif rule.startswith("checks+knn>"):  # per sample: the model, whatever the batch
            out[rule] = checks | (_knn_ratio(X1, train, query, C["knn_k"], C["knn_quantile"]) > float(rule.split(">")[1]))
        elif rule.startswith("checks+knn@batch>"):  # at the measured batch: not batch-independent
            out[rule] = checks | (_knn_ratio(X, train, query, C["knn_k"], C["knn_quantile"]) > float(rule.split(">")[1]))
        elif rule == "checks+globals":
            out[rule] = checks | glob
        elif rule in ("checks+globals+batch", "earlier without the family check"):
            out[rule] = checks | glob | batch
        elif rule == "earlier (without embedding)":
            out[rule] = checks | glob | batch | family
        else:
            raise BenchError(f"unknown rule {rule!r} in benchmarks/configs/domain.json")
    return out


def _score(ape: np.ndarray, out: np.ndarray, K: float) -> dict:
    mi = float(ape[~out].mean()) if (~out).any() else None
    mo = float(ape[out].mean()) if out.any() else None
    return {"rows_in": int((~out).sum()), "rows_out": int(out.sum()), "mape_in": mi, "mape_out": mo,
            "in_ratio": None if mi is None else mi / K, "out_ratio": None if mo is None else mo / K}


def study(setting: str, C: dict, quick: bool = False) -> dict:
    S = C["settings"][setting]
    fam_cfg = load_config("families")["settings"][setting]
    pack = load_pack(setting)
    sub, graphs, per_sample, ops, fold, test_idx = _rows(setting, S, pack)
    X = dom._log(np.stack([dom._u(g) for g in graphs]))[:, _CHECKED]
    X1 = dom._log(per_sample)[:, _CHECKED]
    stage1, stage2 = fam_cfg["rows"][0][2], fam_cfg["coverage_of"]
    folds = [fo for fo in pack["folds"] if not quick or fo["fold"] == 0]
    rules = C["candidates"] + C["shown"] + C["earlier"]
    val = {r: [] for r in rules}
    test = {r: [] for r in rules}
    val_ape, test_ape, test_y, test_p = [], [], [], []
    for fo in folds:
        k = fo["fold"]
        nxt = next(x for x in pack["folds"] if x["fold"] == (k + 1) % FOLDS)
        pv1, _ = method_preds(fo, stage1)
        _, pt2 = method_preds(fo, stage2)
        vy, ty = np.asarray(fo["val_y"], float), np.asarray(fo["test_rows"]["y"], float)
        val_ape.append(np.abs(pv1 - vy) / vy * 100)
        test_ape.append(np.abs(pt2 - ty) / ty * 100)
        test_y.append(ty)
        test_p.append(pt2)
        train1 = np.where((fold != k) & (fold != (k + 1) % FOLDS))[0]
        train2 = np.where(fold != k)[0]
        vo = _outs(rules, sub, graphs, ops, X, X1, train1, test_idx[nxt["fold"]], C)
        to = _outs(rules, sub, graphs, ops, X, X1, train2, test_idx[k], C)
        for r in rules:
            val[r].append(vo[r])
            test[r].append(to[r])
    va, ta = np.concatenate(val_ape), np.concatenate(test_ape)
    Kv, Kt = float(va.mean()), float(ta.mean())
    card = load_predictor(fam_cfg["card"]).card
    tkey = next(iter(card["scores"]["kfold"]))
    iv = card["intervals"]
    q, factor = float(iv["targets"][tkey]["q"]), float(iv.get("ood_factor", 2.0))
    y, p = np.concatenate(test_y), np.concatenate(test_p)
    r = np.abs(np.log(y / p))
    res = {"setting": setting, "card": fam_cfg["card"], "folds": [fo["fold"] for fo in folds],
           "val_rows": len(va), "test_rows": len(ta), "val_mape": Kv, "test_mape": Kt,
           "card_kfold_mape": float(card["scores"]["kfold"][tkey]["mape_fold_mean"]),
           "q": q, "ood_factor": factor,
           "val": {rr: _score(va, np.concatenate(val[rr]), Kv) for rr in rules},
           "test": {}}
    for rr in rules:
        out = np.concatenate(test[rr])
        s = _score(ta, out, Kt)
        # the shipped interval: every held-out family is unseen, so in-domain rows are widened too
        s["coverage_in"] = float((r[~out] <= q * factor).mean() * 100) if (~out).any() else None
        s["coverage_in_unwidened"] = float((r[~out] <= q).mean() * 100) if (~out).any() else None
        s["coverage_out"] = float((r[out] <= q * factor).mean() * 100) if out.any() else None
        res["test"][rr] = s
    return res


def choose(results: dict[str, dict], C: dict) -> str:
    """The rule the validation families choose (the config's criterion)."""
    score = {}
    for rr in C["candidates"]:
        vs = [res["val"][rr] for res in results.values()]
        if any(v["in_ratio"] is None or v["out_ratio"] is None or v["in_ratio"] > C["in_aim"] for v in vs):
            continue
        score[rr] = float(np.mean([v["out_ratio"] for v in vs]))
    if not score:
        raise BenchError("no candidate rule keeps the in-domain rows within the aim on the validation families")
    best = max(score.values())
    return next(rr for rr in C["candidates"] if rr in score and score[rr] >= best - C["tie"])


def zoo(C: dict, quick: bool = False) -> dict:
    """Per shipped timm card, the share of the timm zoo's (model, resolution) graphs in its domain
    (the verdict does not depend on the batch) and the commonest reasons of the rest."""
    from collections import Counter

    from perfseer.data.dataset import load_dataset  # deferred: torch
    from perfseer.features.pyg import OP_VOCAB  # deferred: torch

    out = {}
    for dataset, cards in C["zoo"].items():
        ds = load_dataset(dataset)
        first = ds.labels.drop_duplicates(["model", "input_shape"])
        if quick:
            first = first.head(100)
        graphs = [ds.graphs[int(g)] for g in first.graph]
        ops = [sorted({OP_VOCAB[int(i)] for i in g.op_type.unique().tolist()}) for g in graphs]
        shapes = [str(x) for x in first.input_shape]
        for name in cards:
            domain = load_predictor(name).card["domain"]
            v = dom.verdicts(domain, graphs, ops, shapes)
            why = Counter(r.split(":")[0] if r.startswith("operator") else "input size" if r.startswith("input of")
                          else r.split(";")[0] for _, rs in v for r in rs)
            seen = set(domain["op_types"])
            unseen = Counter(o for op in ops for o in op if o not in seen)
            out[name] = {"dataset": dataset, "graphs": len(graphs), "in": int(sum(ok for ok, _ in v)),
                         "reasons": dict(why.most_common(4)), "unseen_ops": dict(unseen.most_common(5)),
                         "resnet50_in": [bool(ok) for (ok, _), m, sh in zip(v, first.model, shapes)
                                         if str(m).split("@")[0] == "timm:resnet50" and sh == "3x224x224"]}
    return out


def steps(ctx: Context) -> list[Step]:
    C = load_config("domain")
    return [Step(s, lambda s=s: study(s, C, ctx.quick)) for s in C["settings"]] + [
        Step("zoo", lambda: zoo(C, ctx.quick))]


def _met(v, aim, above: bool) -> str:
    if v is None:
        return "-"
    return "met" if (v >= aim if above else v <= aim) else "not met"


def render(ctx: Context, res: dict[str, dict]) -> str:
    C = load_config("domain")
    res = dict(res)
    zres = res.pop("zoo", None) or {}
    zt = [[f"`{n}`", z["dataset"], f"{z['in']} of {z['graphs']} ({z['in'] / z['graphs'] * 100:.1f} %)",
           "; ".join(f"{k} {v}" for k, v in z["unseen_ops"].items()) or "-"]
          for n, z in zres.items() if not n.startswith("_")]
    chosen = choose(res, C)
    vt = []
    for rr in C["candidates"] + C["shown"] + C["earlier"]:
        row = [rr + (" **(chosen)**" if rr == chosen else " (not a candidate)" if rr in C["shown"] else "")]
        for s, r in res.items():
            v = r["val"][rr]
            row += [f"{v['rows_in']} / {v['rows_out']}", f(v["mape_in"], 1), f(v["mape_out"], 1),
                    f"{v['out_ratio']:.2f}x" if v["out_ratio"] is not None else "-"]
        vt.append(row)
    head = ["rule"]
    for s in res:
        head += [f"{s}: in / out", "MAPE in", "MAPE out", "out / pooled"]
    tt = []
    for s, r in res.items():
        for rr in [chosen] + C["earlier"]:
            t = r["test"][rr]
            kf = r["card_kfold_mape"]
            tt.append([f"`{r['card']}`", rr + (" (chosen, shipped)" if rr == chosen else ""),
                       f"{t['rows_in']} / {t['rows_out']}", f(t["mape_in"], 2), f(t["mape_out"], 2),
                       f"{r['test_mape']:.2f}",
                       "-" if t["in_ratio"] is None else f"{t['in_ratio']:.2f}x ({_met(t['in_ratio'], C['in_aim'], False)})",
                       "-" if t["out_ratio"] is None else f"{t['out_ratio']:.2f}x ({_met(t['out_ratio'], C['out_aim'], True)})",
                       f"{kf:.2f}: " + ("-" if t["mape_in"] is None else f"{t['mape_in'] / kf:.2f}x")
                       + " / " + ("-" if t["mape_out"] is None else f"{t['mape_out'] / kf:.2f}x"),
                       f(t["coverage_in"], 1) + " / " + f(t["coverage_out"], 1)])
    cov = "; ".join(f"{r['card']}: {r['test'][chosen]['coverage_in_unwidened']:.1f} %" for s, r in res.items())
    return (
        "## Domain verdict on held-out families\n\n"
        "Which checks make *out of domain* mean something, measured on timm families absent from training "
        "(the four leave-families-out folds of the section above; `python -m benchmarks run domain`, "
        "`benchmarks/suites/domain.py`, rules and criterion in `benchmarks/configs/domain.json`). Per fold, the "
        "domain is built from the training families only; each rule is scored on the validation families "
        "(stage-one blend), one is chosen there, and only that one is scored on the test families (stage-two "
        "blend, the shipped recipe; domain from train + validation families). *Pooled* is the MAPE of all "
        "held-out rows, the card's k-fold score of the section above. The family check marks every held-out "
        "row out by definition; the embedding distance needs each fold's network and is replaced by a "
        "nearest-neighbour distance in standardized log global features (`knn>T`). Recomputed from committed "
        "data, exact.\n\n"
        f"**Validation families** (choice: the highest out / pooled among rules with in / pooled <= "
        f"{C['in_aim']:g}; within {C['tie']:g} of it, the earliest listed):\n\n"
        + md_table(head, vt)
        + "\n\n**Test families** (aims: in-domain MAPE <= "
        f"{C['in_aim']:g}x pooled, out-of-domain MAPE >= {C['out_aim']:g}x pooled):\n\n"
        + md_table(["card", "rule", "rows in / out", "MAPE in %", "MAPE out %", "pooled MAPE %", "in / pooled",
                    "out / pooled", "card's k-fold MAPE %: in / out", "90 % interval holds %: in / out"], tt)
        + "\n\nThe interval column is the shipped cards' interval: a model of a family absent from training "
        "is widened by the card's out-of-domain factor whether in domain or not (without the widening, "
        f"the in-domain held-out rows would be held {cov}). The *card's k-fold* column compares with the "
        "card's k-fold score by architecture (new models of known families, the bundled-predictors table)."
        + ("\n\n**The timm zoo on the shipped cards**: the share of the zoo's (model, resolution) graphs "
           "each card marks in domain (the verdict does not depend on the batch; a step outside the training "
           "steps widens the interval instead), and the operator types that put the others out (graphs "
           "with each):\n\n" + md_table(["card", "graphs of", "in domain", "unseen operator types (graphs)"], zt)
           if zt else "")
    )


SUITE = Suite(
    name="domain",
    description="the domain verdict on held-out model families: in- and out-of-domain error, rule chosen on validation families",
    reads="benchmarks/data/families/*.json.gz, datasets/timm and timm_weight_work graphs, configs/domain.json, the RTX 3090 and i9 cards",
    time_full="~2 min", time_quick="~1 min (fold 0 only)",
    steps=steps, render=render)
