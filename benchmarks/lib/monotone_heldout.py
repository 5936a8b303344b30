"""Does the batch envelope (:mod:`perfseer.runtime.monotone`) cost accuracy?  A measured card's
held-out rows predicted as the card's network gives them (raw) and through the envelope.

    python -m benchmarks.lib.monotone_heldout rtx3090-amp-nchw-pt112.train [--split val]

For each measured row of the card's target in the split (default ``val``: rows the card's network
was not trained on; its early stopping read them), the model's graph is re-bound from the
dataset's compact graphs (exact: :meth:`perfseer.data.compact.CompactGraphs.at_batch`) to the
row's batch size and to the powers of two the envelope reads; the network predicts all of them and
the envelope's rule is applied to its raw outputs.  Prints MAPE raw and enveloped, how many rows
the envelope changed, and how many models' raw predictions decreased somewhere along 1..1024;
beside them ``mape_min_above``, the other monotone rule (the smallest answer at the batch size and
the powers of two above it, up to 1024), not taken: it needs all of them for every call.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def evaluate(card: str, split: str = "val", max_rows: int | None = None) -> dict:
    from perfseer.data.dataset import load_dataset
    from perfseer.runtime import monotone
    from perfseer.runtime.predictor import load_predictor

    p = load_predictor(card)
    dataset = (p.card.get("training") or {}).get("dataset")
    t = p.targets[0]
    ds = load_dataset(dataset)
    lab = ds.labels
    rows = lab[(lab["device"] == t.device) & (lab["phase"] == t.phase) & (lab["split"] == split)]
    rows = rows[rows["latency_ms"] > 0]
    if max_rows:
        rows = rows.head(max_rows)
    raw, env, above, truth, changed, falling = [], [], [], [], 0, set()
    ladder_1024 = [2**i for i in range(11)]
    for _, r in rows.iterrows():
        b, g = int(r["batch_size"]), int(r["graph"])
        bs = sorted(set(monotone.ladder([b])) | set(ladder_1024))
        vals = p.predict_graphs([ds.graphs.at_batch(g, x) for x in bs])[:, 0]
        fake = [{"batch_size": x, "metric": "latency_ms", "value": float(v), "device": t.device, "phase": t.phase,
                 "precision": None} for x, v in zip(bs, vals)]
        got = monotone.envelope(fake, [b])[0]["value"]
        v0 = float(vals[bs.index(b)])
        raw.append(v0)
        env.append(got)
        above.append(min([v0] + [float(vals[bs.index(x)]) for x in ladder_1024 if x >= b]))  # the rule not taken
        truth.append(float(r["latency_ms"]))
        changed += abs(got - v0) > 1e-9 * v0
        lad = [float(vals[bs.index(x)]) for x in ladder_1024]
        if any(y < x * (1 - 1e-6) for x, y in zip(lad, lad[1:])):
            falling.add(r["model"])
    raw, env, above, truth = map(np.asarray, (raw, env, above, truth))

    def mape(v):
        return float(np.mean(np.abs(v - truth) / truth) * 100)

    return {"card": card, "split": split, "rows": int(len(truth)), "mape_raw": mape(raw), "mape_envelope": mape(env),
            "mape_min_above": mape(above),
            "rows_changed": int(changed), "models_falling_along_1_1024": len(falling),
            "models": int(rows["model"].nunique())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cards", nargs="+")
    ap.add_argument("--split", default="val")
    ap.add_argument("--max-rows", type=int, default=None)
    args = ap.parse_args(argv)
    for c in args.cards:
        print(json.dumps(evaluate(c, args.split, args.max_rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
