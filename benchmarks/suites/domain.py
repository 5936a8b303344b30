"""The domain verdict on held-out model families: which rule makes "out of domain" mean something.

Uses the leave-families-out folds of :mod:`benchmarks.suites.families` (4 folds over timm families;
fold ``k`` tests, fold ``k + 1`` validates, the rest train) and their committed per-row predictions
of the shipped cards' blends.  Each candidate rule of ``benchmarks/configs/domain.json`` marks rows
in or out:

- ``checks``: :func:`perfseer.trust.domain.verdicts` (the shipped rule: operator types, input
  channels, input size, precision) against a domain built (:func:`~perfseer.trust.domain.build_domain`)
  from the fold's training families' graphs (``datasets/timm``; the i9 card's weight-work graphs);
- ``checks+spread>Q``: also out when the blend's members disagree: the standard deviation, over the
  blend's member groups (the seeds of one architecture averaged, as the blend ties them), of their
  log predictions, above its ``1 - Q`` quantile over the validation rows that choose the rule.

Per test fold ``k``, the rule and its threshold are chosen on the validation rows of the *other*
folds' validation families (the validation sets of the three folds whose validation families are
not fold ``k``'s; their errors are the stage-one blends', members trained without those families),
then scored once on fold ``k``'s test families with the stage-two blend (the shipped recipe) and a
domain built from train + validation families.  No test family touches its fold's choice.  The
rule chosen on all four validation sets is what a card would ship; the zoo step measures the
member spread of the shipped cards on the timm zoo at batch 1-256, where no held-out error exists
(timm rows were measured at the largest batch that fit).  Exact.
"""

from __future__ import annotations

import json

import numpy as np

from benchmarks.runner import BenchError, Context, Step, Suite, f, load_config, md_table
from benchmarks.suites.families import fold_of, load_pack, method_preds
from perfseer import load_predictor
from perfseer.models.blend import member_groups, split_members
from perfseer.trust import domain as dom

FOLDS = 4


def _rows(setting: str, S: dict, pack: dict):
    """The dataset rows of the setting's device, their PyG graphs, op types and each fold's
    test-row indices into them (matched by model and measured latency)."""
    from perfseer.data.dataset import load_dataset  # deferred: torch
    from perfseer.features.pyg import OP_VOCAB  # deferred: torch

    ds = load_dataset(S["dataset"])
    L = ds.labels
    sub = L[(L.device == S["device"]) & (L.phase == S["phase"])].reset_index(drop=True)
    graphs = [ds.graphs[int(g)] for g in sub.graph]
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
    return sub, graphs, ops, fold, test_idx


def _checks(sub, graphs, ops, train: np.ndarray, query: list[int]) -> list[bool]:
    """Whether the shipped rule (:func:`perfseer.trust.domain.verdicts`) marks each query row out of
    a domain built from the ``train`` rows."""
    domain, _ = dom.build_domain([graphs[i] for i in train], sorted({o for i in train for o in ops[i]}),
                                 [int(sub.batch_size[i]) for i in train], [str(sub.input_shape[i]) for i in train])
    v = dom.verdicts(domain, [graphs[i] for i in query], [ops[i] for i in query],
                     [str(sub.input_shape[i]) for i in query])
    return [not ok for ok, _ in v]


def group_spread(log_preds: np.ndarray, groups) -> np.ndarray:
    """Per row, the standard deviation over member groups of the groups' mean log prediction.

    Args:
        log_preds: ``[M, N]`` natural-log predictions of the ``M`` members.
        groups: a group index per member (:func:`perfseer.models.blend.member_groups`).
    """
    L, g = np.asarray(log_preds, dtype=np.float64), np.asarray(groups)
    return np.stack([L[g == k].mean(0) for k in sorted(set(g.tolist()))]).std(0)


def _spread(fold: dict, method: str, key: str) -> np.ndarray:
    """:func:`group_spread` of a packed blend ``stack+shift:A+B-seedmean...``: a ``-seedmean``
    member is one group of its seeds."""
    runs, logs, groups = fold["methods"], [], []
    for gi, m in enumerate(split_members(method.split(":", 1)[1])):
        base = m.removesuffix("-seedmean")
        seeds = [base] + sorted(r for r in runs if r.startswith(base + "-s") and r[len(base) + 2:].isdigit())
        for s in seeds if m.endswith("-seedmean") else [base]:
            logs.append(np.log(np.asarray(runs[s][key], dtype=np.float64)))
            groups.append(gi)
    return group_spread(np.stack(logs), groups)


def study(setting: str, C: dict) -> dict:
    """Per fold ``j``: its validation rows (families of fold ``j + 1``: stage-one errors, checks
    against training families, stage-one member spread) and its test rows (stage two)."""
    S = C["settings"][setting]
    fam_cfg = load_config("families")["settings"][setting]
    pack = load_pack(setting)
    sub, graphs, ops, fold, test_idx = _rows(setting, S, pack)
    stage1, stage2 = fam_cfg["rows"][0][2], fam_cfg["coverage_of"]
    out = {}
    for fo in pack["folds"]:
        k = fo["fold"]
        nxt = (k + 1) % FOLDS
        pv1, _ = method_preds(fo, stage1)
        _, pt2 = method_preds(fo, stage2)
        vy, ty = np.asarray(fo["val_y"], float), np.asarray(fo["test_rows"]["y"], float)
        train1, train2 = np.where((fold != k) & (fold != nxt))[0], np.where(fold != k)[0]
        out[str(k)] = {
            "val_families_fold": nxt,
            "val": {"ape": (np.abs(pv1 - vy) / vy * 100).tolist(), "checks": _checks(sub, graphs, ops, train1, test_idx[nxt]),
                    "spread": _spread(fo, stage1, "pred_val").tolist()},
            "test": {"ape": (np.abs(pt2 - ty) / ty * 100).tolist(), "checks": _checks(sub, graphs, ops, train2, test_idx[k]),
                     "spread": _spread(fo, stage2, "pred_test").tolist()}}
    return {"setting": setting, "card": fam_cfg["card"], "folds": out}


def _threshold(rule: str, spread: np.ndarray) -> float | None:
    """The spread threshold of ``checks+spread>Q``: the ``1 - Q`` quantile of ``spread`` (None: ``checks``)."""
    if rule == "checks":
        return None
    if not rule.startswith("checks+spread>"):
        raise BenchError(f"unknown rule {rule!r} in benchmarks/configs/domain.json")
    return float(np.quantile(spread, 1 - float(rule.split(">")[1])))


def _mark(part: dict, thr: float | None) -> np.ndarray:
    out = np.asarray(part["checks"], bool)
    return out if thr is None else out | (np.asarray(part["spread"]) > thr)


def _pool(r: dict, exclude: int | None) -> dict:
    """The validation rows of every fold whose validation families are not fold ``exclude``."""
    parts = [fo["val"] for fo in r["folds"].values() if exclude is None or fo["val_families_fold"] != exclude]
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in ("ape", "checks", "spread")}


def _score(ape: np.ndarray, out: np.ndarray, K: float) -> dict:
    mi = float(ape[~out].mean()) if (~out).any() else None
    mo = float(ape[out].mean()) if out.any() else None
    return {"rows_in": int((~out).sum()), "rows_out": int(out.sum()), "mape_in": mi, "mape_out": mo,
            "in_ratio": None if mi is None else mi / K, "out_ratio": None if mo is None else mo / K}


def choose(results: dict[str, dict], C: dict, exclude: int | None = None) -> tuple[str, dict]:
    """The rule the validation families choose (folds whose validation families are not ``exclude``):
    the highest out / pooled (mean over the settings) among rules whose in / pooled is within the
    aim in every setting; within ``tie`` of the best, the earliest listed.  Returns the rule and
    per setting its validation score and threshold."""
    score, detail = {}, {}
    for rule in C["candidates"]:
        per = {}
        for s, r in results.items():
            P = _pool(r, exclude)
            thr = _threshold(rule, P["spread"])
            per[s] = dict(_score(P["ape"], _mark(P, thr), float(P["ape"].mean())), threshold=thr)
        detail[rule] = per
        if any(v["in_ratio"] is None or v["out_ratio"] is None or v["in_ratio"] > C["in_aim"] for v in per.values()):
            continue
        score[rule] = float(np.mean([v["out_ratio"] for v in per.values()]))
    if not score:
        raise BenchError("no candidate rule keeps the in-domain rows within the aim on the validation families")
    best = max(score.values())
    rule = next(rr for rr in C["candidates"] if rr in score and score[rr] >= best - C["tie"])
    return rule, detail[rule]


def evaluate(results: dict[str, dict], C: dict) -> dict:
    """Per setting, the test scores of the shipped rule and of the rule chosen per fold, pooled
    (every test row once) and per fold."""
    picks = {k: choose(results, C, exclude=k) for k in range(FOLDS)}
    out = {}
    for s, r in results.items():
        ape = np.concatenate([np.asarray(r["folds"][str(k)]["test"]["ape"]) for k in range(FOLDS)])
        K = float(ape.mean())
        rows = {}
        for label in ("shipped", "chosen"):
            marks, per_fold = [], []
            for k in range(FOLDS):
                t = r["folds"][str(k)]["test"]
                thr = None if label == "shipped" else picks[k][1][s]["threshold"]
                m = _mark(t, thr)
                marks.append(m)
                a = np.asarray(t["ape"])
                per_fold.append(_score(a, m, float(a.mean()))["out_ratio"])
            rows[label] = dict(_score(ape, np.concatenate(marks), K), per_fold=per_fold)
        out[s] = {"card": r["card"], "pooled": K, "rows": rows}
    return {"settings": out, "picks": [picks[k][0] for k in range(FOLDS)], "ship": choose(results, C)}


def card_spread(name: str, graphs) -> np.ndarray:
    """:func:`group_spread` of a blend card's members on ``graphs`` (natural-log units)."""
    import torch  # deferred: heavy

    from perfseer.runtime.net import collate_inputs, inference  # deferred: torch
    from perfseer.runtime.scaling import FIELDS

    net = load_predictor(name).net
    model = net.model
    specs = [json.dumps(m, sort_keys=True) for m in json.loads(model.config.member_configs)]
    batch = collate_inputs(graphs)
    for field in FIELDS:
        if getattr(batch, field, None) is not None:
            setattr(batch, field, net.feature_scaler.transform_field(field, getattr(batch, field)))
    with inference(model):
        model._inputs(batch)
        z = torch.stack([m(batch).reshape(len(graphs), -1)[:, 0] for m in model.members]).double().numpy()
    return group_spread(z * float(net.target_scaler.to_dict()["std"][0]), member_groups(specs))


def zoo(C: dict, quick: bool = False) -> dict:
    """Per shipped timm card, the share of the timm zoo's (model, resolution) graphs in its domain
    (the verdict does not depend on the batch), the operator types that put the others out, and,
    for the blend cards of the study, the member spread of a sample of the zoo at batch 1-256."""
    from collections import Counter

    from perfseer.data.dataset import load_dataset  # deferred: torch
    from perfseer.features.pyg import OP_VOCAB  # deferred: torch

    out = {}
    studied = {load_config("families")["settings"][s]["card"] for s in C["settings"]}
    for dataset, cards in C["zoo"].items():
        ds = load_dataset(dataset)
        first = ds.labels.drop_duplicates(["model", "input_shape"])
        if quick:
            first = first.head(100)
        graphs = [ds.graphs[int(g)] for g in first.graph]
        ops = [sorted({OP_VOCAB[int(i)] for i in g.op_type.unique().tolist()}) for g in graphs]
        shapes = [str(x) for x in first.input_shape]
        sample = first.graph.tolist()[:: max(1, len(first) // C["zoo_spread_sample"])]
        for name in cards:
            domain = load_predictor(name).card["domain"]
            v = dom.verdicts(domain, graphs, ops, shapes)
            seen = set(domain["op_types"])
            unseen = Counter(o for op in ops for o in op if o not in seen)
            out[name] = {"dataset": dataset, "graphs": len(graphs), "in": int(sum(ok for ok, _ in v)),
                         "unseen_ops": dict(unseen.most_common(4)),
                         "resnet50_in": [bool(ok) for (ok, _), m, sh in zip(v, first.model, shapes)
                                         if str(m).split("@")[0] == "timm:resnet50" and sh == "3x224x224"]}
            if name in studied:
                out[name]["spread"] = {str(b): card_spread(name, [ds.graphs.at_batch(int(g), b) for g in sample]).tolist()
                                       for b in C["zoo_batches"]}
    return out


def steps(ctx: Context) -> list[Step]:
    C = load_config("domain")
    return [Step(s, lambda s=s: study(s, C)) for s in C["settings"]] + [Step("zoo", lambda: zoo(C, ctx.quick))]


def _met(v, aim, above: bool) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}x ({'met' if (v >= aim if above else v <= aim) else 'not met'})"


def render(ctx: Context, res: dict[str, dict]) -> str:
    C = load_config("domain")
    res = dict(res)
    zres = res.pop("zoo", None) or {}
    ev = evaluate(res, C)
    ship_rule, ship = ev["ship"]
    vt = []
    for rule in C["candidates"]:
        row = [rule]
        for s, r in res.items():
            P = _pool(r, None)
            v = _score(P["ape"], _mark(P, _threshold(rule, P["spread"])), float(P["ape"].mean()))
            row += [f"{v['rows_in']} / {v['rows_out']}", f"{v['in_ratio']:.2f}x", f"{v['out_ratio']:.2f}x"]
        vt.append(row)
    head = ["rule"] + [x for s in res for x in (f"{s}: in / out", "in / pooled", "out / pooled")]
    tt = []
    for s, e in ev["settings"].items():
        for label, rr in e["rows"].items():
            what = "shipped: checks" if label == "shipped" else "chosen per fold: " + ", ".join(ev["picks"])
            tt.append([f"`{e['card']}`", what, f"{rr['rows_in']} / {rr['rows_out']}", f(rr["mape_in"], 2),
                       f(rr["mape_out"], 2), f"{e['pooled']:.2f}", _met(rr["in_ratio"], C["in_aim"], False),
                       _met(rr["out_ratio"], C["out_aim"], True),
                       " / ".join("-" if x is None else f"{x:.2f}" for x in rr["per_fold"])])
    zt = []
    for n, z in zres.items():
        if n.startswith("_"):
            continue
        sp = ""
        if "spread" in z:
            s = next(k for k, r in res.items() if r["card"] == n)
            thr = ship[s]["threshold"] if ship_rule != "checks" else _threshold(C["candidates"][-1], _pool(res[s], None)["spread"])
            sp = " / ".join(f"{(np.asarray(v) > thr).mean() * 100:.0f}" for v in z["spread"].values())
        zt.append([f"`{n}`", f"{z['in']} of {z['graphs']} ({z['in'] / z['graphs'] * 100:.1f} %)",
                   "-" if not z["resnet50_in"] else "yes" if all(z["resnet50_in"]) else "no",
                   "; ".join(f"{k} {v}" for k, v in z["unseen_ops"].items()) or "-", sp or "-"])
    n_spread = max((len(next(iter(z["spread"].values()))) for z in zres.values() if "spread" in z), default=0)
    spread_rule = ship_rule if ship_rule != "checks" else C["candidates"][-1]
    met = [all(e["rows"][label]["out_ratio"] is not None and e["rows"][label]["out_ratio"] >= C["out_aim"]
               and e["rows"][label]["in_ratio"] <= C["in_aim"] for e in ev["settings"].values())
           for label in ("shipped", "chosen")]
    return (
        "## Domain verdict on held-out families\n\n"
        "Whether *out of domain* means a worse prediction, on timm families absent from training (the four "
        "leave-families-out folds above; `python -m benchmarks run domain`, rules and criterion in "
        "`benchmarks/configs/domain.json`). *checks*: the shipped verdict (operator types, input channels and "
        "size, precision), domain built from the training families only; *+spread>Q*: also out where the "
        "blend's member groups disagree (standard deviation of their log predictions) beyond the top Q of "
        "the validation rows. A rule is the highest mean out / pooled with in / pooled <= "
        f"{C['in_aim']:g} on validation families (stage-one blend). Per test fold it is chosen on the three "
        "validation sets whose families are not that fold's, then scored once on its test families "
        "(stage-two blend, the shipped recipe). *Pooled*: the MAPE of all held-out rows. Exact.\n\n"
        "**Validation families** (all four sets):\n\n" + md_table(head, vt)
        + f"\n\n**Test families** (aims: in <= {C['in_aim']:g}x pooled, out >= {C['out_aim']:g}x pooled; "
        "per fold: out / that fold's MAPE):\n\n"
        + md_table(["card", "rule", "rows in / out", "MAPE in %", "MAPE out %", "pooled %", "in / pooled",
                    "out / pooled", "per fold"], tt)
        + f"\n\nOn all four validation sets the choice is *{ship_rule}*. "
        + ("" if any(met) else f"Neither the shipped rule nor the per-fold choice reaches {C['out_aim']:g}x on both cards. ")
        + ("The cards ship *checks*: the timm rows were measured at the largest batch that fit, and at batch "
           "1-256 the shipped blends' members disagree on the very models they trained on (last column: % of "
           f"{n_spread} zoo graphs beyond the threshold of *{spread_rule}* at batch "
           f"{', '.join(map(str, C['zoo_batches']))}).\n\n" if ship_rule != "checks" else "\n\n")
        + "**The timm zoo on the shipped cards** ((model, resolution) graphs in domain, whatever the batch):\n\n"
        + md_table(["card", "in domain", "ResNet-50", "unseen operator types (graphs)",
                    "spread out % (batch " + "/".join(map(str, C["zoo_batches"])) + ")"], zt))


SUITE = Suite(
    name="domain",
    description="the domain verdict on held-out model families: in- and out-of-domain error, rule chosen on validation families",
    reads="benchmarks/data/families/*.json.gz, datasets/timm and timm_weight_work graphs, configs/domain.json, the shipped timm cards",
    time_full="~4 min", time_quick="~2 min (100 zoo graphs)",
    steps=steps, render=render)
