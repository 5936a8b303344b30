"""Bundled predictors: each card's k-fold score by architecture (and its old test score), read from
the cards shipped in ``src/perfseer/predictors/``.

A card retrained by ``scripts/retrain_shipped.sh`` (train + test fitted, validation for early
stopping) has no test split of its own: it keeps the replaced predictor's test score
(``scores["previous_test"]``) and scores its recipe by a k-fold cross-validation by architecture
(``scores["kfold"]``: pooled out-of-fold scores with the per-fold mean and sd).  Cards fitted on
train only show their own test score.  Nothing is trained or predicted: the table is exact.
"""

from __future__ import annotations

from perfseer import list_predictors, load_predictor

from benchmarks.runner import Context, Step, Suite, f, md_table


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
        out.append({"card": card["name"], "target": key, "fit": fit, "fit_rows": (tr.get("rows") or {}).get("train"),
                    "old_test_mape": o.get("mape"), "old_test_spearman": o.get("spearman"),
                    "val_mape": ((sc.get("val") or {}).get(key) or {}).get("mape"), "k": kmeta.get("k"),
                    "kfold_mape_mean": k.get("mape_fold_mean"), "kfold_mape_sd": k.get("mape_fold_sd"),
                    "kfold_mape_pooled": k.get("mape"), "kfold_spearman": k.get("spearman")})
    return out


def _cards(ctx: Context) -> dict:
    rows = []
    for item in list_predictors():
        rows += rows_of(load_predictor(item["name"]).card)
    return {"rows": rows}


def steps(ctx: Context) -> list[Step]:
    return [Step("cards", lambda: _cards(ctx))]


def render(ctx: Context, res: dict[str, dict]) -> str:
    rows = res["cards"]["rows"]
    table = []
    for r in rows:
        metric, _, device = r["target"].partition("@")
        many = len({x["target"].partition("@")[2] for x in rows if x["card"] == r["card"]}) > 1
        kfold = (f"{r['kfold_mape_mean']:.2f} ± {r['kfold_mape_sd']:.2f} (k={r['k']})"
                 if r["kfold_mape_mean"] is not None else "-")
        sp = r["kfold_spearman"] if r["kfold_spearman"] is not None else r["old_test_spearman"]
        table.append([f"`{r['card']}`", f"{metric} {device.rpartition(':')[0]}" if many else metric,
                      f"{r['fit_rows']:,}" if r["fit_rows"] else "-", r["fit"], kfold,
                      f(r["old_test_mape"], 2), f(sp, 3)])
    return ("## Bundled predictors\n\n"
            "Each bundled card's error on architectures it never saw (MAPE = mean absolute percentage error). "
            "Cards fitted on train + test are scored by 3-fold cross-validation by architecture with the same "
            "recipe (mean ± sd over folds); *old test* is the test split's score of the card trained on train "
            "only that it replaced (a card fitted on train only: its own test score). "
            "Read from the shipped cards (`src/perfseer/predictors/*.json`), exact.\n\n"
            + md_table(["predictor", "target", "fit rows", "fit on", "k-fold MAPE %", "old test MAPE %",
                        "Spearman"], table))


SUITE = Suite(
    name="predictors",
    description="bundled cards' k-fold and test scores (the README's accuracy table)",
    reads="src/perfseer/predictors/*.json (the shipped cards)",
    time_full="~10 s", time_quick="~10 s (the same: nothing to cut)",
    steps=steps, render=render)
