"""Global-feature models on the leave-families-out folds: do they extrapolate to new families
better than the GBM?  (docs/generalisation.md, "ideas tried").

    python benchmarks/lfo_global_models.py --json benchmarks/data/lfo_global_models.json

Same folds as ``benchmarks/leave_families_out.py`` (fold ``k`` tests, ``k + 1`` validates, the
rest train), on the 20 global features ``u`` in ``sign(x) log(1 + |x|)``, log target:

- ``ridge``: ridge regression on the standardised features, the penalty chosen on validation
  (a log-log linear model: it extrapolates linearly where trees stay flat);
- ``gbm_linear``: LightGBM with linear models in the leaves (``linear_tree``);
- ``gbm_per_flop``: the GBM fitted to ``log(latency / (FLOPs + 1))`` (a target per FLOP: the
  trees model throughput, the FLOPs carry the scale);
- ``ridge+gbm``: ridge, then a GBM on its residuals.

Every LightGBM early-stops on the validation families (50 rounds), as the ``gbm`` baseline does.
Prints validation and test MAPE per fold and the pooled test MAPE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402

LGB = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 5, "seed": 0,
       "num_threads": 1, "deterministic": True, "force_col_wise": True, "verbosity": -1, "min_data_in_bin": 1}


def ridge(X, y, Xv, yv):
    """Ridge on standardised X, penalty from a log grid by validation MAPE; returns predict(X)."""
    mu, sd = X.mean(0), X.std(0) + 1e-9
    Z, ym = (X - mu) / sd, y.mean()
    best = None
    for a in np.logspace(-3, 3, 13):
        w = np.linalg.solve(Z.T @ Z + a * np.eye(Z.shape[1]), Z.T @ (y - ym))
        err = np.mean(np.abs(np.exp((Xv - mu) / sd @ w + ym - yv) - 1))
        if best is None or err < best[0]:
            best = (err, w)
    return lambda A: (A - mu) / sd @ best[1] + ym


def gbm(X, y, Xv, yv, **extra):
    import lightgbm as lgb

    tr = lgb.Dataset(X, y, free_raw_data=False)
    b = lgb.train(LGB | extra, tr, 500, valid_sets=[lgb.Dataset(Xv, yv, reference=tr)],
                  callbacks=[lgb.early_stopping(50, verbose=False)])
    return lambda A: b.predict(A, num_iteration=b.best_iteration)


def fold_models(X, y, off):
    """``{name: (val log-prediction, test log-prediction)}``; ``off`` is log(FLOPs + 1) per split."""
    out = {}
    r = ridge(X["train"], y["train"], X["val"], y["val"])
    out["ridge"] = (r(X["val"]), r(X["test"]))
    g = gbm(X["train"], y["train"], X["val"], y["val"], linear_tree=True, linear_lambda=1.0)
    out["gbm_linear"] = (g(X["val"]), g(X["test"]))
    g = gbm(X["train"], y["train"] - off["train"], X["val"], y["val"] - off["val"])
    out["gbm_per_flop"] = (g(X["val"]) + off["val"], g(X["test"]) + off["test"])
    g = gbm(X["train"], y["train"] - r(X["train"]), X["val"], y["val"] - r(X["val"]))
    out["ridge+gbm"] = (r(X["val"]) + g(X["val"]), r(X["test"]) + g(X["test"]))
    return out


def main(argv=None) -> int:
    import leave_families_out as lfo

    from perfseer.data.splits import model_family
    from perfseer.models.estimator import global_features, signed_log1p
    from perfseer.fit.data import select, targets_of

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", type=tb.parse_settings, default=tb.parse_settings(lfo.DEFAULT_SETTINGS))
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--fold-seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    report = {"benchmark": "lfo_global_models", "environment": tb.environment(), "settings": {}}
    for S in args.settings:
        view, _ = tb.setting_view(S)
        lab = view.labels.copy()
        lab["family"] = [model_family(m) for m in lab["model"].astype(str)]
        lab = lab[lab["family"].notna()].reset_index(drop=True)
        res = {"folds": [], "pooled": {}}
        pooled: dict[str, list] = {}
        for k in range(args.folds):
            lab2 = lab.copy()
            lab2["family_split"] = lfo.fold_splits(lab2["family"], args.folds, k, args.fold_seed)
            sel = select(tb.View(view.graphs, lab2), S.metric, list(S.devices), S.phase, "family_split")
            raw = {s: global_features(sel.split(s)) for s in ("train", "val", "test")}
            X = {s: signed_log1p(v) for s, v in raw.items()}
            off = {s: np.log(v[:, 3] + 1) for s, v in raw.items()}  # flops_total
            y = {s: np.log(targets_of(sel.split(s))[:, 0]) for s in raw}
            fold = {"fold": k}
            for name, (pv, pt) in fold_models(X, y, off).items():
                mv = float(np.mean(np.abs(np.exp(pv - y["val"]) - 1)) * 100)
                ape = np.abs(np.exp(pt - y["test"]) - 1) * 100
                fold[name] = {"val_mape": mv, "test_mape": float(ape.mean())}
                pooled.setdefault(name, []).append(ape)
            res["folds"].append(fold)
            print(S.name, k + 1, " | ".join(f"{n} {v['val_mape']:.1f}/{v['test_mape']:.1f}"
                                             for n, v in fold.items() if n != "fold"), flush=True)
        res["pooled"] = {n: float(np.concatenate(a).mean()) for n, a in pooled.items()}
        print(S.name, "pooled test MAPE:", ", ".join(f"{n} {v:.2f}" for n, v in res["pooled"].items()))
        report["settings"][S.name] = res
        tb.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    tb.run_main(main)
