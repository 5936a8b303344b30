"""Do the 90 % intervals hold?  Split-conformal against a seed-free ensemble, on the random split
and on unseen families.

Inputs are networks trained by ``scripts/retrain_shipped.sh``:

- a k-fold run (``NAME --kfold 3``): fold ``j``'s network was trained on the other folds of
  train + test (by architecture) and early-stopped on the validation split.
  **Random split, as shipped**: ``q`` from fold ``j``'s validation residuals, the domain from its
  training rows (embedding threshold on validation), intervals widened by ``ood_factor`` out of
  domain; coverage on fold ``j``'s held-out rows, pooled over the folds.
  **Conformal against ensemble**, both on the validation rows (no fold network trained on them):
  conformal intervals of fold ``j`` calibrated on its held-out fold; the ensemble of the k fold
  networks, ``exp(mean ± 1.645 sd)`` of their log predictions.
- a family-split run (``rtx3090-infer-family``: trained on the family split's train, early-stopped
  on its validation families).  **Unseen families**: (a) ``q`` from its validation rows (other
  unseen families), coverage on the test families; (b) the shipped rule: the random split's ``q``
  (the k-fold networks' median) in domain and ``q * ood_factor`` out of domain, with
  ``ood_factor`` calibrated on the validation families' out-of-domain rows (the conformal
  quantile of ``|log residual| / q``), coverage on the test families.

    python benchmarks/intervals.py --kfold .cache/trust/rtx3090-amp-nchw-pt240.infer \\
        --family .cache/trust/rtx3090-amp-nchw-pt240.infer.family --json benchmarks/results/intervals_3090.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402

Z90 = 1.6448536269514722


def _ops(graphs):
    from perfseer.features.pyg import OP_VOCAB

    return [[OP_VOCAB[int(k)] for k in g.op_type.unique().tolist()] for g in graphs]


def _shapes(sel, graphs):
    s = sel.labels["input_shape"].astype(str).to_numpy()
    return [s[int(g.row)] for g in graphs]


def _verdicts(p, sel, train, val, query):
    """In-domain flags of ``query`` for network ``p`` trained on ``train`` (threshold from ``val``)."""
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.trust import domain as dom
    from perfseer.trust.calibrate import embeddings

    labels = sel.labels
    rows = [int(g.row) for g in train]
    ops = {OP_VOCAB[int(i)] for g in train for i in g.op_type.unique().tolist()}
    d, stored = dom.build_domain(train, ops, labels["batch_size"].to_numpy()[rows], _shapes(sel, train),
                                 embeddings(p.net, train), embeddings(p.net, val))
    v = dom.verdicts(d, query, _ops(query), _shapes(sel, query), embeddings(p.net, query), stored)
    return np.array([x[0] for x in v]), v


def kfold_part(stage_dir: Path, card: dict) -> dict:
    from perfseer.predictor import kfold_of, load_predictor
    from perfseer.training.data import targets_of
    from perfseer.trust import intervals as itv
    from perfseer.trust.calibrate import selection_for

    sel = selection_for(card)
    k = card["training"]["kfold"]["k"]
    seed = card["training"]["kfold"]["seed"]
    models = sel.labels["model"].astype(str).to_numpy()
    fold = kfold_of([models[int(g.row)] for g in sel.train], k, seed)
    y_all, yv = targets_of(sel.train)[:, 0], targets_of(sel.val)[:, 0]
    factor = float((card.get("intervals") or {}).get("ood_factor", itv.DEFAULT_OOD_FACTOR))
    cov_in, cov_all, ood, qs, val_preds, conf_val = [], [], [], [], [], []
    for j in range(k):
        p = load_predictor(stage_dir / f"fold{j}.json")
        held = np.flatnonzero(fold == j)
        train = [g for g, f in zip(sel.train, fold) if f != j]
        hg = [sel.train[i] for i in held]
        pv = p.predict_graphs(sel.val)[:, 0]
        ph = p.predict_graphs(hg)[:, 0]
        val_preds.append(pv)
        q = itv.calibrate(yv, pv)["q"]
        qs.append(q)
        inside, _ = _verdicts(p, sel, train, sel.val, hg)
        lo, hi = itv.bounds(ph, q, inside, factor)
        lo1, hi1 = itv.bounds(ph, q, np.ones(len(ph), bool))
        y = y_all[held]
        cov_all.append(((y >= lo) & (y <= hi)))
        cov_in.append(((y >= lo1) & (y <= hi1)))
        ood.append(~inside)
        q_held = itv.calibrate(y, ph)["q"]  # calibrated on the held-out fold, tested on validation
        lo2, hi2 = itv.bounds(pv, q_held, np.ones(len(pv), bool))
        conf_val.append({"coverage": itv.coverage(yv, lo2, hi2), "half_width_log": q_held})
    ood_all = np.concatenate(ood)
    ca, ci = np.concatenate(cov_all), np.concatenate(cov_in)
    L = np.log(np.stack(val_preds))
    mu, sd = L.mean(0), L.std(0, ddof=1)
    ens = {"coverage": float(np.mean((np.log(yv) >= mu - Z90 * sd) & (np.log(yv) <= mu + Z90 * sd)) * 100),
           "median_half_width_log": float(np.median(Z90 * sd)), "members": k}
    return {"rows": int(len(ca)), "folds": k, "q_per_fold": qs, "ood_factor": factor,
            "random_split": {"coverage_shipped_rule": float(ca.mean() * 100), "coverage_no_widening": float(ci.mean() * 100),
                             "out_of_domain_pct": float(ood_all.mean() * 100),
                             "coverage_in_domain": float(ca[~ood_all].mean() * 100) if (~ood_all).any() else None,
                             "coverage_out_of_domain": float(ca[ood_all].mean() * 100) if ood_all.any() else None},
            "on_validation": {"conformal": {"coverage": float(np.mean([c["coverage"] for c in conf_val])),
                                            "half_width_log": float(np.mean([c["half_width_log"] for c in conf_val]))},
                              "ensemble": ens}}


def family_part(card_path: Path, q_random: float) -> dict:
    from perfseer.predictor import load_predictor
    from perfseer.training.data import targets_of
    from perfseer.trust import intervals as itv
    from perfseer.trust.calibrate import selection_for

    p = load_predictor(card_path)
    sel = selection_for(p.card)
    yv, yt = targets_of(sel.val)[:, 0], targets_of(sel.test)[:, 0]
    pv, pt = p.predict_graphs(sel.val)[:, 0], p.predict_graphs(sel.test)[:, 0]
    q_fam = itv.calibrate(yv, pv)["q"]
    lo, hi = itv.bounds(pt, q_fam, np.ones(len(pt), bool))
    in_val, _ = _verdicts(p, sel, sel.train, sel.val, sel.val)
    in_test, _ = _verdicts(p, sel, sel.train, sel.val, sel.test)
    rv = np.abs(np.log(yv / pv))
    factor = (itv.conformal_quantile(rv[~in_val] / q_random) if (~in_val).sum() >= itv.min_rows() else None)
    out = {"rows_val": int(len(yv)), "rows_test": int(len(yt)), "q_family_val": q_fam, "q_random": q_random,
           "ratio_q_family_to_random": q_fam / q_random,
           "test_mape": float(np.mean(np.abs(pt / yt - 1)) * 100),
           "coverage_family_calibrated": itv.coverage(yt, lo, hi),
           "out_of_domain_pct_val": float((~in_val).mean() * 100), "out_of_domain_pct_test": float((~in_test).mean() * 100),
           "ood_factor_calibrated": factor}
    for name, f in (("shipped_rule_calibrated_factor", factor), ("shipped_rule_factor_2", 2.0)):
        if f is None:
            continue
        lo, hi = itv.bounds(pt, q_random, in_test, f)
        inside = (yt >= lo) & (yt <= hi)
        out[name] = {"factor": f, "coverage": float(inside.mean() * 100),
                     "coverage_in_domain": float(inside[in_test].mean() * 100) if in_test.any() else None,
                     "coverage_out_of_domain": float(inside[~in_test].mean() * 100) if (~in_test).any() else None}
    return out


def main() -> None:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kfold", required=True, help="output folder of a k-fold run (NAME.json and .stages/NAME/)")
    ap.add_argument("--family", default=None, help="output folder of the family-split run")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tb.set_threads(1)
    folder = Path(args.kfold)
    card_path = next(p for p in folder.glob("*.json"))
    card = json.loads(card_path.read_text())
    res = {"predictor": card["name"], "kfold": kfold_part(folder / ".stages" / card["name"], card)}
    q_random = float(np.median(res["kfold"]["q_per_fold"]))
    if args.family:
        fam = next(p for p in Path(args.family).glob("*.json"))
        res["family"] = family_part(fam, q_random)
    res["environment"] = tb.environment()
    tb.write_json(args.json, res)
    k = res["kfold"]
    r = k["random_split"]
    print(f"{card['name']}: random split (k-fold held-out, {k['rows']} rows, q from validation): "
          f"{r['coverage_shipped_rule']:.1f} % covered ({r['coverage_no_widening']:.1f} % without widening), "
          f"{r['out_of_domain_pct']:.1f} % out of domain")
    v = k["on_validation"]
    print(f"  on validation: conformal {v['conformal']['coverage']:.1f} % (half-width {v['conformal']['half_width_log']:.3f}), "
          f"{v['ensemble']['members']}-network ensemble {v['ensemble']['coverage']:.1f} % "
          f"(median half-width {v['ensemble']['median_half_width_log']:.3f})")
    if "family" in res:
        f = res["family"]
        print(f"  unseen families: test MAPE {f['test_mape']:.2f} %, q family/random {f['q_family_val']:.3f}/{q_random:.3f}; "
              f"family-calibrated {f['coverage_family_calibrated']:.1f} %; out of domain {f['out_of_domain_pct_test']:.1f} %")
        for name in ("shipped_rule_calibrated_factor", "shipped_rule_factor_2"):
            if name in f:
                print(f"  {name} (factor {f[name]['factor']:.2f}): {f[name]['coverage']:.1f} % "
                      f"(in domain {f[name]['coverage_in_domain']}, out {f[name]['coverage_out_of_domain']})")


if __name__ == "__main__":
    tb.run_main(main)
