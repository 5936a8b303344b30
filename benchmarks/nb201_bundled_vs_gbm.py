"""The bundled NAS-Bench-201 predictor against a GBM on global features fitted to the same data.

``nb201-gpus.infer`` (SeerNet-Multi) was trained on 2,000 of the training split's architectures
(``--max-train-models 2000``, all three batch sizes).  This fits the ``gbm`` baseline to the same
2,000 architectures, one device at a time, and scores both on the test split, over all batch
sizes and at batch 256 (the NAS-Bench-201 target columns).

    python benchmarks/nb201_bundled_vs_gbm.py [--json OUT]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402

PREDICTOR = "nb201-gpus.infer"


def main() -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.runtime.predictor import load_predictor
    from perfseer.fit.recipe import train_predictor
    from perfseer.fit.metrics import evaluate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    bundled = load_predictor(PREDICTOR)
    training = bundled.card["training"]
    ds = load_dataset(resolve_dataset(training["dataset"]))
    labels = ds.labels[ds.labels[training["split_column"]].astype(str) == "test"]
    table = Table(title=f"{PREDICTOR} against a GBM on the same {training['max_train_models']:,} architectures "
                        "(test MAPE % / Spearman)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("device", "batch", "n", "gbm", f"{PREDICTOR}"):
        table.add_column(c, justify="left" if c == "device" else "right")
    # the test graphs are shared by the devices: build each once, predict every target in one pass
    graphs = {int(g): ds.graphs[int(g)] for g in labels.graph.unique()}
    seer = dict(zip(graphs, bundled.predict_graphs(list(graphs.values()))))
    results = []
    for column, target in enumerate(bundled.targets):
        gbm, _ = train_predictor(ds, "gbm", devices=target.device, phase=target.phase,
                                 max_train_models=training["max_train_models"])
        rows = labels[(labels.device.astype(str) == target.device) & (labels.phase.astype(str) == target.phase)]
        ids = rows.graph.astype(int).tolist()
        y, batch = rows[target.metric].to_numpy(float), rows.batch_size.to_numpy()
        pred_gbm = gbm.predict_graphs([graphs[g] for g in ids])[:, 0]
        pred_seer = np.array([seer[g][column] for g in ids])
        for b in (None, 256):
            keep = np.ones(len(y), bool) if b is None else batch == b
            g, s = evaluate(y[keep], pred_gbm[keep]), evaluate(y[keep], pred_seer[keep])
            results.append({"device": target.device, "batch": b, "n": int(keep.sum()), "gbm": g, "bundled": s})
            table.add_row(target.device, "all" if b is None else str(b), f"{int(keep.sum()):,}",
                          f"{g['mape']:.2f} / {g['spearman']:.3f}", f"{s['mape']:.2f} / {s['spearman']:.3f}")
    Console().print(table)
    tb.write_json(args.json, {"benchmark": "nb201_bundled_vs_gbm", "predictor": PREDICTOR, "results": results})


if __name__ == "__main__":
    main()
