"""Give predictor cards their domain of validity and 90 % intervals from the data they were trained on.

Cards trained before ``perfseer train`` computed these (``card["domain"]``, ``card["intervals"]``)
name their dataset, split column, fitted splits and ``max_train_models``; this re-selects those
rows (:func:`perfseer.fit.intervals.selection_for`), computes the domain over the fitted graphs,
the embedding threshold and the conformal quantiles on the validation graphs, and rewrites the card
and its weights file (atomically; the weights are unchanged, the training embeddings are added).

    python scripts/calibrate_predictors.py                      # every bundled predictor
    python scripts/calibrate_predictors.py path/NAME.json --ood-factor 2.1 --ood-source "..."
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    from perfseer.runtime.predictor import BUNDLED, load_predictor
    from perfseer.fit.intervals import calibrate, selection_for

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cards", nargs="*", help="predictor cards (default: the bundled ones)")
    ap.add_argument("--ood-factor", type=float, default=None, help="q's multiplier out of domain (default: keep)")
    ap.add_argument("--ood-source", default=None, help="where --ood-factor was measured")
    ap.add_argument("--inputs-only", action="store_true",
                    help="only fill the domain's input sizes from the dataset's labels (cards calibrated from "
                         "several devices before this was read)")
    ap.add_argument("--factor-only", action="store_true",
                    help="only set --ood-factor / --ood-source on cards already calibrated (no data is read)")
    ap.add_argument("--step-domain", action="store_true",
                    help="only add the step domain of a measured training card (perfseer.fit.stepdomain: the memory "
                         "simulator on a sample of its models; batch relative to the batch its labels were taken at)")
    args = ap.parse_args(argv)
    cards = [Path(c) for c in args.cards] or sorted(BUNDLED.glob("*.json"))
    if args.step_domain:  # only card["domain"]["step"]: the card's weights and other fields are unchanged
        import json
        import os

        from perfseer.errors import PerfseerError
        from perfseer.fit.stepdomain import calibrate_step

        for card in cards:
            c = json.loads(card.read_text())
            if c.get("phases") != ["train"] or not c.get("training", {}).get("dataset"):
                continue
            try:
                c["domain"]["step"] = s = calibrate_step(c)
            except PerfseerError as e:
                print(f"{card}: no step domain: {e.problem}", flush=True)
                continue
            tmp = card.with_name(card.name + ".tmp")
            tmp.write_text(json.dumps(c, indent=1) + "\n")
            os.replace(tmp, card)
            print(f"{card}: step domain {2 ** s['range'][0]:.3g}-{2 ** s['range'][1]:.3g}x the benchmark batch, "
                  f"{100 * s['inside']:.1f} % of {s['rows']} rows inside; memory fit {s['memory']['fit']}")
        return 0
    if args.inputs_only:  # cards whose domain lacks the input sizes: read them from the dataset's labels
        import json
        import os

        from perfseer.data.dataset import load_dataset, resolve_dataset
        from perfseer.trust.domain import inputs_summary

        for card in cards:
            c = json.loads(card.read_text())
            t = c["training"]
            lab = load_dataset(resolve_dataset(t["dataset"].removeprefix("datasets/"))).labels
            lab = lab[lab["device"].astype(str).isin({x["device"] for x in c["targets"]})
                      & lab[t.get("split_column") or "split"].astype(str).isin(t.get("fit_splits") or ["train"])]
            c["domain"]["inputs"] = inputs_summary(lab["input_shape"].astype(str).unique())
            tmp = card.with_name(card.name + ".tmp")
            tmp.write_text(json.dumps(c, indent=1) + "\n")
            os.replace(tmp, card)
            print(f"{card}: inputs {c['domain']['inputs']}")
        return 0
    if args.factor_only:
        import json
        import os

        if args.ood_factor is None:
            ap.error("--factor-only needs --ood-factor")
        for card in cards:
            c = json.loads(card.read_text())
            if not c.get("intervals"):
                print(f"{card}: not calibrated, skipped", file=sys.stderr)
                continue
            c["intervals"]["ood_factor"] = args.ood_factor
            c["intervals"]["ood_factor_source"] = args.ood_source or "set by scripts/calibrate_predictors.py"
            tmp = card.with_name(card.name + ".tmp")
            tmp.write_text(json.dumps(c, indent=1) + "\n")
            os.replace(tmp, card)
        return 0
    for card in cards:
        t0 = time.perf_counter()
        p = load_predictor(card)
        if args.ood_factor is not None:
            p.card.setdefault("intervals", {})["ood_factor"] = args.ood_factor
            p.card["intervals"]["ood_factor_source"] = args.ood_source or "set by scripts/calibrate_predictors.py"
        sel = selection_for(p.card)
        calibrate(p, sel)
        p.save(card.parent, card.name.removesuffix(".json"))
        d, q = p.card["domain"], p.card["intervals"]["targets"]
        emb = d.get("embedding") or {}
        print(f"{p.name}: {d['graphs']} graphs, batch {d['batch_sizes']}, {len(d['op_types'])} op types, "
              f"embedding threshold {emb.get('threshold', float('nan')):.3g}; q90 "
              + ", ".join(f"{k.split('@')[0]}@{k.split('@')[1][:12]} {v['q']:.3f}" for k, v in q.items())
              + f" ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
