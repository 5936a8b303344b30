"""Leave-families-out errors split by the work each model does on its own weights.

Reads a (merged) ``leave_families_out.py`` report and the screen of
``scripts/screen_weight_compute.py``, and scores one method's test predictions on three groups of
rows: models that standardise their convolution weights at every forward (the screen saw
``aten.native_batch_norm`` on weights: NFNets, BiT, ViT hybrids), models with other work on
weights (bias-table gathers, bias concatenations), and models with none.

    python benchmarks/lfo_weight_work.py REPORT.json --setting timm-i9 --method METHOD \\
        [--screen benchmarks/data/weight_work/screen_timm.json] [--json OUT]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

GROUPS = ("weight-standardised", "other weight work", "no weight work")


def flagged(screen: dict) -> set[str]:
    """The screen's ``MODEL|SHAPE`` keys with work on weights (or whose screen failed): the pairs
    ``scripts/refresh_graphs.py`` rebuilds."""
    return {k for k, e in screen.items() if e.get("ops") or "error" in e}


def group_of(entry: dict | None) -> str | None:
    if entry is None:
        return None
    ops = entry.get("ops") or {}
    if "aten.native_batch_norm" in ops:
        return GROUPS[0]
    return GROUPS[1] if ops else GROUPS[2]


def score(report: dict, setting: str, method: str, screen: dict) -> dict:
    s = report["settings"][setting]
    by_model = {}  # reports without input shapes: any size of the model (the screen is per model)
    for key, e in screen.items():
        by_model.setdefault(key.split("|")[0], e)
    by: dict[str, list[tuple[float, float]]] = {g: [] for g in GROUPS}
    unscreened = 0
    for fold in s["folds"]:
        res = {r["method"]: r for r in fold["results"]}
        if method not in res:
            raise SystemExit(f"method {method!r} not in fold {fold['fold']}; methods: {', '.join(sorted(res))}")
        rows = fold["test_rows"]
        shapes = rows.get("input_shape")
        for i, (m, y, p) in enumerate(zip(rows["model"], rows["y"], res[method]["pred_test"])):
            g = group_of(screen.get(f"{m}|{shapes[i]}") if shapes is not None else by_model.get(m))
            if g is None:
                unscreened += 1
                continue
            by[g].append((float(y), float(p)))
    out = {"setting": setting, "method": method, "unscreened_rows": unscreened, "groups": {}}
    for g, pairs in by.items():
        if not pairs:
            continue
        y, p = np.array(pairs).T
        out["groups"][g] = {"rows": len(pairs), "mape": float(np.mean(np.abs(p / y - 1)) * 100),
                            "mean_log_ratio": float(np.mean(np.log(p / y)))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--setting", required=True)
    ap.add_argument("--method", action="append", required=True, help="repeatable")
    ap.add_argument("--screen", default="benchmarks/data/weight_work/screen_timm.json")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    report = json.loads(open(args.report).read())
    screen = json.loads(open(args.screen).read())
    results = [score(report, args.setting, m, screen) for m in args.method]
    table = Table(title=f"{args.setting}: test MAPE by work on weights")
    for c in ("method", "group", "rows", "MAPE %", "mean log ratio"):
        table.add_column(c)
    for r in results:
        for g, v in r["groups"].items():
            table.add_row(escape(r["method"]), g, str(v["rows"]), f"{v['mape']:.2f}", f"{v['mean_log_ratio']:+.3f}")
    Console().print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "lfo_weight_work", "report": args.report, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
