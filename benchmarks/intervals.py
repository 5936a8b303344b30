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
  networks and the final one (different data, seed and epochs), ``exp(mean ± 1.645 sd)`` of
  their log predictions.
- a family-split run (``rtx3090-infer-family``: trained on the family split's train, early-stopped
  on its validation families).  **Unseen families**: (a) ``q`` from its validation rows (other
  unseen families), coverage on the test families; (b) the shipped rule: the random split's ``q``
  (the k-fold networks' median) in domain and ``q * ood_factor`` out of domain, with
  ``ood_factor`` calibrated on the validation families' out-of-domain rows (the conformal
  quantile of ``|log residual| / q``), coverage on the test families.

    python benchmarks/intervals.py --kfold .cache/trust/rtx3090-amp-nchw-pt240.infer \\
        --family .cache/trust/rtx3090-amp-nchw-pt240.infer.family --json benchmarks/results/intervals_3090.json

- a leave-families-out report (``--lfo``, from ``benchmarks/leave_families_out.py``, folds merged):
  every fold's networks were trained without its test families *and* without its validation
  families.  **Unseen families, family-calibrated**: per fold and method, ``q`` from the fold's
  validation rows (other unseen families), coverage on its test families, pooled over the folds
  (each measurement once).  **Unseen families, the shipped rule's brackets**: the bundled card's
  random-split ``q`` applied to the same test predictions with no widening (every row in domain)
  and widened by the card's ``ood_factor`` (every row out of domain); the shipped rule lies
  between the two.  **The card's factor from validation families**: per fold, the conformal
  quantile of ``|log residual| / q`` over the fold's validation rows (families its networks never
  saw) as the factor, coverage on its test families, pooled; and the factor over all folds'
  validation rows (``ood_factor_from_val_families``: what a card of that method can record).

    python benchmarks/intervals.py --lfo benchmarks/data/lfo_timm-3090-infer.json benchmarks/data/lfo_timm-i9.json
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
    from perfseer.fit.intervals import embeddings

    labels = sel.labels
    rows = [int(g.row) for g in train]
    ops = {OP_VOCAB[int(i)] for g in train for i in g.op_type.unique().tolist()}
    d, stored = dom.build_domain(train, ops, labels["batch_size"].to_numpy()[rows], _shapes(sel, train),
                                 embeddings(p.net, train), embeddings(p.net, val))
    v = dom.verdicts(d, query, _ops(query), _shapes(sel, query), embeddings(p.net, query), stored)
    return np.array([x[0] for x in v]), v


def kfold_part(stage_dir: Path, card: dict) -> dict:
    from perfseer.fit.recipe import kfold_of
    from perfseer.runtime.predictor import load_predictor
    from perfseer.fit.data import targets_of
    from perfseer.trust import intervals as itv
    from perfseer.fit.intervals import selection_for

    sel = selection_for(card)
    k = card["training"]["kfold"]["k"]
    seed = card["training"]["kfold"]["seed"]
    models = sel.labels["model"].astype(str).to_numpy()
    fold = kfold_of([models[int(g.row)] for g in sel.train], k, seed)
    y_all, yv = targets_of(sel.train)[:, 0], targets_of(sel.val)[:, 0]
    factor = float((card.get("intervals") or {}).get("ood_factor", itv.DEFAULT_OOD_FACTOR))
    cov_in, cov_all, ood, qs, val_preds, conf_val = [], [], [], [], [], []
    done = [j for j in range(k) if (stage_dir / f"fold{j}.json").is_file()]
    if not done:
        raise SystemExit(f"no finished fold in {stage_dir}")
    for j in done:
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
    if (stage_dir / "final.json").is_file():  # the final network never saw validation either
        val_preds.append(load_predictor(stage_dir / "final.json").predict_graphs(sel.val)[:, 0])
    ood_all = np.concatenate(ood)
    ca, ci = np.concatenate(cov_all), np.concatenate(cov_in)
    L = np.log(np.stack(val_preds))
    mu, sd = L.mean(0), L.std(0, ddof=1)
    ens = {"coverage": float(np.mean((np.log(yv) >= mu - Z90 * sd) & (np.log(yv) <= mu + Z90 * sd)) * 100),
           "median_half_width_log": float(np.median(Z90 * sd)), "members": len(val_preds)}
    return {"rows": int(len(ca)), "folds": k, "folds_used": done, "q_per_fold": qs, "ood_factor": factor,
            "random_split": {"coverage_shipped_rule": float(ca.mean() * 100), "coverage_no_widening": float(ci.mean() * 100),
                             "out_of_domain_pct": float(ood_all.mean() * 100),
                             "coverage_in_domain": float(ca[~ood_all].mean() * 100) if (~ood_all).any() else None,
                             "coverage_out_of_domain": float(ca[ood_all].mean() * 100) if ood_all.any() else None},
            "on_validation": {"conformal": {"coverage": float(np.mean([c["coverage"] for c in conf_val])),
                                            "half_width_log": float(np.mean([c["half_width_log"] for c in conf_val]))},
                              "ensemble": ens}}


def family_part(card_path: Path, q_random: float) -> dict:
    from perfseer.runtime.predictor import load_predictor
    from perfseer.fit.data import targets_of
    from perfseer.trust import intervals as itv
    from perfseer.fit.intervals import selection_for

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


def test_part(cards) -> list[dict]:
    """Coverage on the test split of cards fitted on train only; the test rows of families that
    have no model in the fitted rows are unseen families (a random split by architecture leaves
    some small families entirely in validation and test)."""
    from perfseer.runtime.predictor import load_predictor
    from perfseer.fit.data import targets_of
    from perfseer.fit.intervals import selection_for

    out = []
    for card in cards:
        p = load_predictor(card)
        sel = selection_for(p.card)
        fam = sel.labels["family"].astype(str).to_numpy() if "family" in sel.labels else None
        seen = {fam[int(g.row)] for g in sel.train} if fam is not None else set()
        test = sel.test
        y, pred = targets_of(test), p.predict_graphs(test)
        verdicts, checked = p.assess(test, pred, _ops(test), _shapes(sel, test) if "input_shape" in sel.labels else None)
        inside = np.array([v[0] for v in verdicts])
        unseen = np.array([fam is not None and fam[int(g.row)] not in seen and fam[int(g.row)] != "nan" for g in test])
        for c, t in enumerate(p.targets):
            lo = np.array([checked[i][c]["interval"][0] for i in range(len(test))])
            hi = np.array([checked[i][c]["interval"][1] for i in range(len(test))])
            hit = (y[:, c] >= lo) & (y[:, c] <= hi)
            v = np.array([checked[i][c]["value"] for i in range(len(test))])
            ape = np.abs(v / y[:, c] - 1) * 100
            part = lambda m: {"n": int(m.sum()), "coverage90": float(hit[m].mean() * 100) if m.any() else None,  # noqa: E731
                              "mape": float(ape[m].mean()) if m.any() else None,
                              "out_of_domain_pct": float((~inside[m]).mean() * 100) if m.any() else None}
            out.append({"predictor": p.name, "target": t.key, "n": int(len(test)), "mape": float(ape.mean()),
                        "coverage90": float(hit.mean() * 100), "out_of_domain_pct": float((~inside).mean() * 100),
                        "coverage90_in_domain": float(hit[inside].mean() * 100) if inside.any() else None,
                        "coverage90_out_of_domain": float(hit[~inside].mean() * 100) if (~inside).any() else None,
                        "unseen_families": part(unseen), "seen_families": part(~unseen),
                        "q": p.card["intervals"]["targets"][t.key]["q"], "ood_factor": p.card["intervals"].get("ood_factor")})
    return out


def lfo_part(paths) -> dict:
    """Interval coverage on unseen families from leave-families-out reports (see the module docstring)."""
    import json

    from perfseer.runtime.predictor import list_predictors, load_predictor
    from perfseer.trust import intervals as itv

    cards = {}
    for info in list_predictors():
        try:
            p = load_predictor(info["name"])
        except Exception:  # noqa: BLE001 -- a card this perfseer cannot read has no q to offer
            continue
        for t in p.targets:
            cards.setdefault((t.device, t.phase), (p.name, p.card.get("intervals") or {}, t.key))
    out = {}
    for path in paths:
        rep = json.loads(Path(path).read_text())
        for name, S in rep["settings"].items():
            card = cards.get((S["devices"][0], S["phase"]))
            res = out.setdefault(name, {"report": str(path), "folds": len(S["folds"]), "methods": {}})
            if card is not None:
                iv = card[1]
                res["card"] = {"name": card[0], "q": iv["targets"][card[2]]["q"],
                               "ood_factor": iv.get("ood_factor", itv.DEFAULT_OOD_FACTOR)}
            methods = list(dict.fromkeys(r["method"] for f in S["folds"] for r in f["results"] if "error" not in r))
            for m in methods:
                rows = [(f, next((r for r in f["results"] if r["method"] == m and "error" not in r), None))
                        for f in S["folds"]]
                if any(r is None for _, r in rows):
                    continue
                hit, per_fold, rand0, rand1, widths, fit, ratios = [], [], [], [], [], [], []
                for f, r in rows:
                    y, pt = np.asarray(f["test_rows"]["y"]), np.asarray(r["pred_test"])
                    q = itv.calibrate(f["val_y"], r["pred_val"])["q"]
                    lo, hi = itv.bounds(pt, q, np.ones(len(pt), bool))
                    h = (y >= lo) & (y <= hi)
                    hit.append(h)
                    widths.append(q)
                    per_fold.append({"q": q, "coverage": float(h.mean() * 100), "rows": int(len(y))})
                    if "card" in res:
                        for acc, inside in ((rand0, True), (rand1, False)):
                            lo, hi = itv.bounds(pt, res["card"]["q"], np.full(len(pt), inside), res["card"]["ood_factor"])
                            acc.append((y >= lo) & (y <= hi))
                        # the card's factor calibrated on this fold's validation families (the conformal
                        # quantile of |log residual| / card q), scored on its test families
                        ratio = np.abs(np.log(np.asarray(f["val_y"]) / np.asarray(r["pred_val"]))) / res["card"]["q"]
                        ratios.append(ratio)
                        lo, hi = itv.bounds(pt, res["card"]["q"], np.zeros(len(pt), bool), itv.conformal_quantile(ratio))
                        fit.append((y >= lo) & (y <= hi))
                h = np.concatenate(hit)
                res["methods"][m] = {"coverage_family_calibrated": float(h.mean() * 100), "rows": int(len(h)),
                                     "mean_q": float(np.mean(widths)), "per_fold": per_fold}
                if rand0:
                    res["methods"][m]["coverage_card_q_in_domain"] = float(np.concatenate(rand0).mean() * 100)
                    res["methods"][m]["coverage_card_q_widened"] = float(np.concatenate(rand1).mean() * 100)
                    res["methods"][m]["coverage_card_q_factor_from_val_families"] = float(np.concatenate(fit).mean() * 100)
                    res["methods"][m]["ood_factor_from_val_families"] = float(itv.conformal_quantile(np.concatenate(ratios)))
    return out


def main() -> None:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", nargs="*", default=[], metavar="CARD",
                    help="calibrated cards trained on the train split only: coverage on their test split "
                         "(perfseer evaluate --split test)")
    ap.add_argument("--kfold", default=None, help="output folder of a k-fold run (NAME.json and .stages/NAME/)")
    ap.add_argument("--family", default=None, help="output folder of the family-split run")
    ap.add_argument("--q-random", type=float, default=None,
                    help="the random split's q for the shipped rule on unseen families (default: from --test/--kfold)")
    ap.add_argument("--lfo", nargs="*", default=[], metavar="REPORT",
                    help="leave-families-out reports (benchmarks/leave_families_out.py --merge): coverage on "
                         "unseen families with networks trained without them")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tb.set_threads(1)
    res = {"test": test_part(args.test)}
    if args.lfo:
        res["lfo"] = lfo_part(args.lfo)
        for name, S in res["lfo"].items():
            c = S.get("card")
            print(f"{name}: unseen families, {S['folds']} folds" + (f"; card {c['name']} q {c['q']:.3f}, ood_factor "
                                                                     f"{c['ood_factor']:.2f}" if c else ""))
            for m, r in S["methods"].items():
                extra = (f"; card q: {r['coverage_card_q_in_domain']:.1f} % in domain, "
                         f"{r['coverage_card_q_widened']:.1f} % widened") if "coverage_card_q_in_domain" in r else ""
                print(f"  {m}: q from validation families {r['coverage_family_calibrated']:.1f} % of {r['rows']} "
                      f"(mean q {r['mean_q']:.3f}; per fold "
                      + " / ".join(f"{p['coverage']:.0f}" for p in r["per_fold"]) + ")" + extra)
    for r in res["test"]:
        u = r["unseen_families"]
        print(f"{r['predictor']} {r['target']}: test split {r['n']} rows, MAPE {r['mape']:.2f} %, 90 % intervals hold "
              f"{r['coverage90']:.1f} % (in domain {_pct(r['coverage90_in_domain'])}, out {_pct(r['coverage90_out_of_domain'])}), "
              f"out of domain {r['out_of_domain_pct']:.1f} %, q {r['q']:.3f}; unseen families: {u['n']} rows, "
              f"coverage {_pct(u['coverage90'])}, MAPE {_pct(u['mape'])}, out of domain {_pct(u['out_of_domain_pct'])}")
    q_random = float(np.median([r["q"] for r in res["test"]])) if res["test"] else None
    if args.kfold:
        folder = Path(args.kfold)
        card_path = next(p for p in folder.glob("*.json"))
        card = json.loads(card_path.read_text())
        res["predictor"] = card["name"]
        res["kfold"] = kfold_part(folder / ".stages" / card["name"], card)
        q_random = float(np.median(res["kfold"]["q_per_fold"]))
    if args.family:
        fam = next(p for p in Path(args.family).glob("*.json"))
        res["family"] = family_part(fam, q_random if args.q_random is None else args.q_random)
    res["environment"] = tb.environment()
    tb.write_json(args.json, res)
    if "family" in res:
        _print_family(res["family"])
    if "kfold" not in res:
        return
    k = res["kfold"]
    r = k["random_split"]
    print(f"{card['name']}: random split (k-fold held-out, {k['rows']} rows, q from validation): "
          f"{r['coverage_shipped_rule']:.1f} % covered ({r['coverage_no_widening']:.1f} % without widening), "
          f"{r['out_of_domain_pct']:.1f} % out of domain")
    v = k["on_validation"]
    print(f"  on validation: conformal {v['conformal']['coverage']:.1f} % (half-width {v['conformal']['half_width_log']:.3f}), "
          f"{v['ensemble']['members']}-network ensemble {v['ensemble']['coverage']:.1f} % "
          f"(median half-width {v['ensemble']['median_half_width_log']:.3f})")


def _pct(v) -> str:
    return "-" if v is None else f"{v:.1f} %"


def _print_family(f: dict) -> None:
    print(f"unseen families: test MAPE {f['test_mape']:.2f} %, q family/random {f['q_family_val']:.3f}/{f['q_random']:.3f}; "
          f"family-calibrated {f['coverage_family_calibrated']:.1f} %; out of domain {f['out_of_domain_pct_test']:.1f} %")
    for name in ("shipped_rule_calibrated_factor", "shipped_rule_factor_2"):
        if name in f:
            print(f"  {name} (factor {f[name]['factor']:.2f}): {f[name]['coverage']:.1f} % "
                  f"(in domain {f[name]['coverage_in_domain']}, out {f[name]['coverage_out_of_domain']})")


if __name__ == "__main__":
    tb.run_main(main)
