"""Score every bundled predictor on the test split of the dataset it was trained on, per batch size.

The card of each predictor holds its test scores over all batch sizes; this script recomputes them
from the committed dataset and breaks them down by batch size (NAS-Bench-201's targets are stated
on the batch-256 columns).  Predictors fitted on train + test are skipped (their test rows are
training rows); ``benchmarks/kfold_predictors.py`` gives their k-fold scores.

    python benchmarks/bundled_predictors.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.runtime.predictor import list_predictors, load_predictor
    from perfseer.fit.metrics import evaluate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    table = Table(title="bundled predictors on their test split", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for c in ("predictor", "target", "batch", "n", "MAPE %", "≤10 %", "Spearman", "Kendall"):
        table.add_column(c, justify="left" if c in ("predictor", "target") else "right")
    results, skipped = [], []
    for item in list_predictors():
        p = load_predictor(item["name"])
        training = p.card["training"]
        if "test" in (training.get("fit_splits") or ["train"]):  # its test rows were fitted: no test score
            skipped.append(p.name)
            continue
        ds = load_dataset(resolve_dataset(training["dataset"]))
        labels = ds.labels[ds.labels[training["split_column"]].astype(str) == "test"]
        t0 = time.perf_counter()
        for c, target in enumerate(p.targets):
            rows = labels[(labels["device"].astype(str) == target.device) & (labels["phase"].astype(str) == target.phase)
                          & labels[target.metric].notna()]
            if rows.empty:
                continue
            graphs = [ds.graphs[int(g)] for g in rows["graph"]]
            pred = p.predict_graphs(graphs)[:, c]
            y = rows[target.metric].to_numpy(dtype=np.float64)
            batches = rows["batch_size"].to_numpy()
            for b in ["all", *sorted(set(batches.tolist()))]:
                m = np.ones(len(y), bool) if b == "all" else batches == b
                s = evaluate(y[m], pred[m])
                results.append({"predictor": p.name, "target": target.key, "batch": b, **s})
                table.add_row(p.name, target.key, str(b), f"{s['n']:,}", f"{s['mape']:.2f}", f"{s['acc10']:.1f}",
                              f"{s['spearman']:.3f}", f"{s['kendall']:.3f}")
        results.append({"predictor": p.name, "seconds": round(time.perf_counter() - t0, 1)})
    Console().print(table)
    if skipped:
        print(f"not scored (fitted on train + test, k-fold scores instead: python benchmarks/kfold_predictors.py): "
              f"{', '.join(skipped)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
