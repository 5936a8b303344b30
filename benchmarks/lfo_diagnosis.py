"""Where do predictors err on unseen families?  Reads a ``leave_families_out.py`` JSON.

    python benchmarks/lfo_diagnosis.py benchmarks/results/lfo_timm-3090-infer.json [--json OUT]

For every test prediction of every fold it computes, from the committed timm dataset:

* **out-of-range distance** of the graph's global features ``u``: ``signed_log1p`` of each of the
  20 features, and how far it lies outside the ``[min, max]`` of the fold's *training* graphs
  (0 inside; the largest over the features, in natural-log units, so 0.7 is a factor 2 beyond the
  most extreme training graph).  Which feature is furthest out is counted too.
* **structure**: nodes, branch points (nodes whose output feeds more than one node) and distinct
  spatial resolutions among the edges (a multi-scale network has many).
* **node excess**: how many more operators the graph has than a training graph of its FLOPs and
  batch size would: the residual of ``log(nodes)`` regressed (least squares, on the fold's training
  graphs) on ``log(FLOPs)`` and ``log(batch)``.  Many small operators (multi-branch, multi-scale
  networks) give a large excess; a pooled graph embedding can only read it from totals that, in
  training, came with large, slow networks.

and prints, per method: Spearman's rho between the absolute log error ``|log(pred / true)|`` and
each of these, and between the signed log error and the node excess (``> 0``: graphs with more
operators than their FLOPs suggest are over-predicted); the MAPE and mean signed log error (``> 0``: over-prediction) of the rows inside
the training range and of those outside it; and the families with the largest mean absolute log
error, with their structure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
from leave_families_out import fold_splits  # noqa: E402


def structure(g) -> dict:
    """Nodes, branch points and distinct spatial resolutions of one PyG graph."""
    from perfseer.features import schema

    n = int(g.num_nodes)
    src = g.edge_index[0].numpy()
    outdeg = np.bincount(src, minlength=n) if src.size else np.zeros(n, int)
    h = g.edge_attr[:, schema.EDGE_FEATURES.index("height")].numpy()
    return {"nodes": n, "branches": int((outdeg > 1).sum()), "resolutions": int(len(np.unique(h[h > 1])))}


def rho(a, b) -> float:
    from perfseer.fit.metrics import spearman

    return float(spearman(a, b)) if len(a) > 2 else float("nan")


def analyse(report: dict, data_root=None) -> dict:
    from perfseer.data.splits import model_family
    from perfseer.features import schema
    from perfseer.runtime.scaling import signed_log1p

    out = {}
    for name, S in report["settings"].items():
        setting = tb.parse_settings(name)[0]
        view, _ = tb.setting_view(setting, data_root)
        lab = view.labels.copy()
        lab["family"] = [model_family(m) for m in lab["model"].astype(str)]
        graph_of = {(m, int(b)): int(g) for m, b, g in zip(lab["model"], lab["batch_size"], lab["graph"])}
        lu_all = {}
        stats = {}

        def lu(gi):
            if gi not in lu_all:
                g = view.graphs[gi]
                lu_all[gi] = signed_log1p(g.u.reshape(-1).numpy())
                stats[gi] = structure(g)
            return lu_all[gi]

        folds_k = report["args"]["folds"]
        rows = {"dist": [], "far": [], "nodes": [], "branches": [], "resolutions": [], "family": [],
                "node_ratio": [], "excess": [], "err": {}}
        i_nodes, i_flops, i_batch = (schema.GLOBAL_FEATURES.index(k) for k in ("num_nodes", "flops_total", "batch_size"))

        def design(v):
            return np.array([1.0, v[i_flops], v[i_batch]])
        for f in S["folds"]:
            split = dict(zip(sorted(set(lab["family"].dropna())),
                             fold_splits(sorted(set(lab["family"].dropna())), folds_k, f["fold"],
                                         report["args"]["fold_seed"])))
            train_g = [int(g) for g, fam in zip(lab["graph"], lab["family"]) if split.get(fam) == "train"]
            U = np.stack([lu(g) for g in train_g])
            lo, hi = U.min(0), U.max(0)
            max_nodes = max(stats[g]["nodes"] for g in train_g)
            coef = np.linalg.lstsq(np.stack([design(lu(g)) for g in train_g]), U[:, i_nodes], rcond=None)[0]
            tr = f["test_rows"]
            for m, b, fam in zip(tr["model"], tr["batch_size"], tr["family"]):
                gi = graph_of[(m, int(b))]
                v = lu(gi)
                beyond = np.maximum(v - hi, lo - v).clip(min=0)
                rows["dist"].append(float(beyond.max()))
                rows["far"].append(schema.GLOBAL_FEATURES[int(beyond.argmax())] if beyond.max() > 0 else "")
                for k in ("nodes", "branches", "resolutions"):
                    rows[k].append(stats[gi][k])
                rows["node_ratio"].append(stats[gi]["nodes"] / max_nodes)
                rows["excess"].append(float(v[i_nodes] - design(v) @ coef))
                rows["family"].append(fam)
            y = np.asarray(tr["y"])
            for r in f["results"]:
                if "error" in r:
                    continue
                rows["err"].setdefault(r["method"], []).extend(np.log(np.asarray(r["pred_test"]) / y).tolist())
        dist = np.asarray(rows["dist"])
        outside = dist > 0
        res = {"rows": int(len(dist)), "outside_rows": int(outside.sum()),
               "outside_share": float(outside.mean()),
               "furthest_feature_counts": {str(k): int(v) for k, v in zip(*np.unique(
                   [x for x in rows["far"] if x], return_counts=True))},
               "methods": {}}
        fam = np.asarray(rows["family"])
        excess = np.asarray(rows["excess"])
        top = excess >= np.quantile(excess, 0.9)
        res["excess_top_decile_families"] = dict(zip(*np.unique(fam[top], return_counts=True)))
        res["excess_top_decile_families"] = {str(k): int(v) for k, v in res["excess_top_decile_families"].items()}
        for m, e in rows["err"].items():
            e = np.asarray(e)
            if len(e) != len(dist):  # a method missing from some folds (a run stopped early)
                continue
            ape = np.abs(np.expm1(e)) * 100
            per_fam = {}
            for f_ in sorted(set(fam)):
                k = fam == f_
                per_fam[f_] = {"abs_log_err": float(np.abs(e[k]).mean()), "log_bias": float(e[k].mean()),
                               "mape": float(ape[k].mean()), "rows": int(k.sum()),
                               "nodes": float(np.median(np.asarray(rows["nodes"])[k])),
                               "branches": float(np.median(np.asarray(rows["branches"])[k])),
                               "resolutions": float(np.median(np.asarray(rows["resolutions"])[k])),
                               "outside_share": float(outside[k].mean()),
                               "node_excess": float(excess[k].mean())}
            res["methods"][m] = {
                "rho_abs_err_vs": {k: rho(np.abs(e), np.asarray(rows[k], float))
                                   for k in ("dist", "nodes", "branches", "resolutions")},
                "rho_signed_err_vs_excess": rho(e, np.asarray(rows["excess"])),
                "excess_top_decile": {"log_bias": float(e[top].mean()), "mape": float(ape[top].mean())},
                "inside": {"mape": float(ape[~outside].mean()), "log_bias": float(e[~outside].mean())},
                "outside": {"mape": float(ape[outside].mean()) if outside.any() else None,
                            "log_bias": float(e[outside].mean()) if outside.any() else None},
                "over_2x": int((e > np.log(2)).sum()), "under_2x": int((e < -np.log(2)).sum()),
                "worst_families": dict(sorted(per_fam.items(), key=lambda kv: -kv[1]["abs_log_err"])[:8])}
        out[name] = res
    return out


def print_report(out: dict, console) -> None:
    from rich.markup import escape
    from rich.table import Table

    for name, res in out.items():
        t = Table(title=f"{name}: {res['rows']} test rows, {res['outside_rows']} ({100 * res['outside_share']:.0f} %) "
                        f"with global features outside the fold's training range")
        for c in ("method", "rho |err| ~ distance", "~ nodes", "~ branches", "~ resolutions", "rho err ~ excess",
                  "bias top-10 % excess", "MAPE inside", "MAPE outside", "log bias inside", "log bias outside",
                  "> 2x over", "> 2x under"):
            t.add_column(c, justify="left" if c == "method" else "right")
        for m, r in res["methods"].items():
            c = r["rho_abs_err_vs"]
            t.add_row(escape(m), *(tb.f1(c[k], 3) for k in ("dist", "nodes", "branches", "resolutions")),
                      tb.f1(r["rho_signed_err_vs_excess"], 3), tb.f1(r["excess_top_decile"]["log_bias"], 3),
                      tb.f1(r["inside"]["mape"]), tb.f1(r["outside"]["mape"]), tb.f1(r["inside"]["log_bias"], 3),
                      tb.f1(r["outside"]["log_bias"], 3), str(r["over_2x"]), str(r["under_2x"]))
        console.print(t)
        console.print(f"furthest-out feature: {res['furthest_feature_counts']}")
        console.print(f"families of the top 10 % node excess (rows): {res['excess_top_decile_families']}")
        for m, r in res["methods"].items():
            w = Table(title=f"{name}, {escape(m)}: families with the largest mean |log error|")
            for c in ("family", "rows", "MAPE %", "log bias", "nodes", "branches", "resolutions", "node excess",
                      "outside"):
                w.add_column(c, justify="left" if c == "family" else "right")
            for f_, v in r["worst_families"].items():
                w.add_row(f_, str(v["rows"]), tb.f1(v["mape"], 1), tb.f1(v["log_bias"], 2), f"{v['nodes']:.0f}",
                          f"{v['branches']:.0f}", f"{v['resolutions']:.0f}", tb.f1(v["node_excess"], 2),
                          f"{100 * v['outside_share']:.0f} %")
            console.print(w)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", help="leave_families_out.py JSON files")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--json", default=None, metavar="OUT")
    args = ap.parse_args(argv)
    from rich.console import Console

    console = Console(width=200)
    everything = {}
    for path in args.reports:
        out = analyse(json.loads(Path(path).read_text()), args.data_root)
        print_report(out, console)
        everything[path] = out
    tb.write_json(args.json, everything)
    return 0


if __name__ == "__main__":
    tb.run_main(main)
