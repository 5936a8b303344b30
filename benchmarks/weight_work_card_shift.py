"""What the bundled predictors make of graphs extracted with weight work kept.

The bundled RTX 3090 and i9 inference cards were trained on graphs where the work a model does on
its own weights (weight standardisation, bias-table gathers) was folded away.  This scores them,
on the timm rows whose graphs ``scripts/refresh_graphs.py`` rebuilt with that work kept, once with
the graphs they were trained on and once with the rebuilt ones (weight-standardised: the screen
saw ``aten.native_batch_norm`` on weights, :func:`lfo_weight_work.group_of`): the in-sample error a card shows
when fed the new graphs, i.e. why the new extraction stays opt-in (``PERFSEER_WEIGHT_WORK=1``)
until the cards are retrained on the refreshed dataset.

    python scripts/refresh_graphs.py datasets/timm --screen benchmarks/data/weight_work/screen_timm.json \\
        --work .cache/refresh --out .cache/refreshed/timm
    python benchmarks/weight_work_card_shift.py --refreshed .cache/refreshed/timm \\
        --json benchmarks/data/weight_work/card_shift.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from lfo_weight_work import GROUPS, flagged, group_of

CARDS = (("i9_10940x-fp32-nchw-pt240-dynamo.infer", "i9_10940x/fp32-nchw-pt240-dynamo"),
         ("rtx3090-amp-nchw-pt240.infer", "rtx3090/amp-nchw-pt240"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="datasets/timm", help="the dataset the cards were trained on")
    ap.add_argument("--refreshed", required=True, help="scripts/refresh_graphs.py's output")
    ap.add_argument("--screen", default="benchmarks/data/weight_work/screen_timm.json")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    from perfseer.data.dataset import load_dataset
    from perfseer.runtime.predictor import load_predictor

    old, new = load_dataset(args.dataset), load_dataset(args.refreshed)
    screen = json.loads(open(args.screen).read())
    rebuilt = flagged(screen)
    table = Table(title="bundled cards on the rows whose graphs the refresh rebuilt (in-sample)")
    for c in ("card", "rows", "n", "MAPE %, graphs trained on", "MAPE %, rebuilt graphs",
              "mean log ratio, trained on", "mean log ratio, rebuilt"):
        table.add_column(c)
    out = {}
    for card, device in CARDS:
        p = load_predictor(card)
        labels = old.labels
        rows = labels[(labels.device == device) & (labels.phase == "infer")]
        keys = [f"{m}|{s}" for m, s in zip(rows.model, rows.input_shape)]
        rows = rows[[k in rebuilt for k in keys]]
        standardised = [group_of(screen[f"{m}|{s}"]) == GROUPS[0] for m, s in zip(rows.model, rows.input_shape)]
        out[card] = {}
        for name, sel in (("all rebuilt", rows), ("weight-standardised", rows[standardised])):
            y = sel.latency_ms.to_numpy()
            po = p.predict_graphs([old.graphs[int(g)] for g in sel.graph])[:, 0]
            pn = p.predict_graphs([new.graphs[int(g)] for g in sel.graph])[:, 0]
            r = {"rows": int(len(sel)), "mape_trained_graphs": float(np.mean(np.abs(po / y - 1)) * 100),
                 "mape_rebuilt_graphs": float(np.mean(np.abs(pn / y - 1)) * 100),
                 "mean_log_ratio_trained_graphs": float(np.mean(np.log(po / y))),
                 "mean_log_ratio_rebuilt_graphs": float(np.mean(np.log(pn / y)))}
            out[card][name] = r
            table.add_row(card, name, str(r["rows"]), f"{r['mape_trained_graphs']:.2f}", f"{r['mape_rebuilt_graphs']:.2f}",
                          f"{r['mean_log_ratio_trained_graphs']:+.3f}", f"{r['mean_log_ratio_rebuilt_graphs']:+.3f}")
    Console().print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "weight_work_card_shift", "cards": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
