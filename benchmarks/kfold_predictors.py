"""The bundled predictors' k-fold scores next to their old test scores, read from the cards.

A predictor retrained by ``scripts/retrain_shipped.sh`` (train + test fitted, validation for early
stopping) has no test split of its own: its card keeps the replaced predictor's test score
(``scores["previous_test"]``, trained on train only) and scores its recipe by a k-fold
cross-validation by architecture (``scores["kfold"]``: pooled out-of-fold scores with the per-fold
mean and sd; ``training["kfold"]``: k, the fold rule, each fold).  Cards not retrained show their
own test score and no k-fold score.  Nothing is trained or predicted here.

    python benchmarks/kfold_predictors.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json


def rows_of(card: dict) -> list[dict]:
    """One row per target of a card: old test MAPE, k-fold MAPE (mean ± sd over folds, pooled),
    Spearman (test; k-fold pooled), fitted rows, fitted splits, k."""
    sc, tr = card.get("scores") or {}, card.get("training") or {}
    kf, kmeta = sc.get("kfold") or {}, tr.get("kfold") or {}
    fit = "+".join(tr.get("fit_splits") or ["train"])
    old = sc.get("previous_test") if fit != "train" else sc.get("test")
    out = []
    for t in card.get("targets") or []:
        key = f"{t['metric']}@{t['device']}:{t['phase']}"
        o, k = (old or {}).get(key) or {}, kf.get(key) or {}
        folds = [f["mape"][key] for f in kmeta.get("folds") or [] if key in f.get("mape", {})]
        out.append({"card": card["name"], "target": key, "fit": fit, "fit_rows": (tr.get("rows") or {}).get("train"),
                    "old_test_mape": o.get("mape"), "old_test_spearman": o.get("spearman"),
                    "val_mape": ((sc.get("val") or {}).get(key) or {}).get("mape"),
                    "k": kmeta.get("k"), "folds_done": kmeta.get("folds_done"), "fold_mapes": folds,
                    "kfold_mape_mean": k.get("mape_fold_mean"), "kfold_mape_sd": k.get("mape_fold_sd"),
                    "kfold_mape_pooled": k.get("mape"), "kfold_spearman": k.get("spearman")})
    return out


def main(argv=None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from perfseer.runtime.predictor import list_predictors, load_predictor

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    rows = []
    for item in list_predictors():
        rows += rows_of(load_predictor(item["name"]).card)

    def f(v, fmt=".2f"):
        return "—" if v is None else format(v, fmt)

    t = Table(title="bundled predictors: old test MAPE and k-fold MAPE by architecture", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("card", "target", "old test MAPE %", "k-fold MAPE % (mean ± sd)", "pooled", "Spearman (old test / k-fold)",
              "fit rows", "fit", "val MAPE %"):
        t.add_column(c, justify="left" if c in ("card", "target", "fit") else "right")
    for r in rows:
        if r["kfold_mape_mean"] is not None:
            kfold = f"{r['kfold_mape_mean']:.2f} ± {r['kfold_mape_sd']:.2f} (k={r['k']})"
        elif r["fold_mapes"]:
            kfold = f"{len(r['fold_mapes'])}/{r['k']} folds: " + ", ".join(f"{m:.2f}" for m in r["fold_mapes"])
        else:
            kfold = "—"
        metric, _, device = r["target"].partition("@")
        many = len({x["target"].partition("@")[2] for x in rows if x["card"] == r["card"]}) > 1
        t.add_row(r["card"], f"{metric} {device.rpartition(':')[0]}" if many else metric, f(r["old_test_mape"]),
                  kfold, f(r["kfold_mape_pooled"]), f"{f(r['old_test_spearman'], '.3f')} / {f(r['kfold_spearman'], '.3f')}",
                  f(r["fit_rows"], ","), r["fit"], f(r["val_mape"]))
    Console(width=200).print(t)
    if args.json:
        from perfseer.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
