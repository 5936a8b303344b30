"""The spec model on timm inference, leave-one-GPU-out over the RTX GPUs of the timm benchmark.

Settings (``datasets/timm``, AMP, NCHW, eager): ``rtx3090/amp-nchw-pt240``,
``rtx4090/amp-nchw-pt291``, ``rtx5090/amp-nchw-pt291``, ``rtxpro6000maxq/amp-nchw-pt291``.

- **zero-shot**: the kernel model (trained on NeuSight's kernels of P4/P100/T4/V100/A100 only:
  no RTX measurement at all) composed over each model's PerfGraph at FP16, from the GPU's spec
  sheet;
- **calibrated**: plus a whole-model linear correction of ``log10`` latency
  (:func:`perfseer.runtime.spec.calibration_features`: log predicted ms, log kernel
  count, GEMM/conv share; no device feature) fitted on the *other three* GPUs' runs of the
  train and validation split models.

Scores are on the held-out GPU's test-split models (split by architecture, as the measured-device
SeerNets of the README), so the columns compare like with like: the SeerNets are trained on
that GPU's measurements of the other models, the spec model on none of that GPU.

    python -m benchmarks.lib.spec_timm_logo --json benchmarks/results/spec_timm_logo.json \
        --fit-all benchmarks/results/spec_timm_calibration.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SETTINGS = ("rtx3090/amp-nchw-pt240", "rtx4090/amp-nchw-pt291", "rtx5090/amp-nchw-pt291",
            "rtxpro6000maxq/amp-nchw-pt291")
# README, "Bundled predictors": test MAPE % / Spearman of the measured-device SeerNets (same split)
SEERNET = {"rtx3090/amp-nchw-pt240": (6.52, 0.994), "rtx4090/amp-nchw-pt291": (7.54, 0.994),
           "rtx5090/amp-nchw-pt291": (7.42, 0.995)}


def _atomic_json(path, obj) -> None:
    from perfseer.atomic import atomic_write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(obj, indent=1) + "\n")


def spearman(a, b) -> float:
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def fit_calibration(f: np.ndarray, y: np.ndarray, ridge: float = 1e-3) -> np.ndarray:
    """Least squares (with a small ridge) of ``y`` (log10 measured / predicted) on features ``f``."""
    a = f.T @ f + ridge * np.eye(f.shape[1])
    return np.linalg.solve(a, f.T @ y)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="timm", help="dataset name or folder (default: datasets/timm)")
    ap.add_argument("--spec-model", default=None, help="spec-model card (default: the bundled one)")
    ap.add_argument("--calib-models", type=int, default=400, help="train/val models per GPU used for calibration")
    ap.add_argument("--json", default=None)
    ap.add_argument("--fit-all", default=None, help="also fit the calibration on all four GPUs and write it here")
    ap.add_argument("--trust", default=None,
                    help="write the interval calibrations (amp-zero-shot, amp-calibrated: log residuals of the held-out "
                         "GPUs' test runs) here for the spec card (scripts/train_spec_model.py --attach-only --trust)")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.devices import get_device
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel.compose import node_kernels
    from perfseer.runtime.spec import calibration_features, load_spec_model

    sm = load_spec_model(args.spec_model)
    ds = load_dataset(resolve_dataset(args.data))
    lab = ds.labels
    lab = lab[lab["device"].isin(SETTINGS) & (lab["phase"] == "infer")].copy()
    lab = lab[lab["latency_ms"].notna()]
    # calibration rows: a hashed sample of train/val models; scored rows: every test model
    models = sorted(lab.loc[lab["split"] != "test", "model"].unique(), key=lambda m: hash_key(m))
    calib_models = set(models[: args.calib_models])
    lab = lab[(lab["split"] == "test") | lab["model"].isin(calib_models)]
    graphs = sorted(lab["graph"].unique())
    print(f"{len(lab)} rows, {len(graphs)} graphs", file=sys.stderr, flush=True)
    tables = {}
    for i, g in enumerate(graphs):
        d = ds.graphs[int(g)]
        ops = [OP_VOCAB[int(o)] for o in d.op_type]
        tables[g] = node_kernels(d.x.numpy().astype(np.float64), ops, "fp16", d.edge_index.numpy())
        if i % 200 == 0:
            print(f"  kernels of {i}/{len(graphs)} graphs", file=sys.stderr, flush=True)
    preds, feats = {}, {}
    for dev_str in SETTINGS:
        spec = get_device(dev_str)
        big = pd.concat([tables[g].assign(graph=g) for g in graphs], ignore_index=True)
        dev = kt.device_frame([spec] * len(big), ["fp16"] * len(big), big["family"])
        us = sm.kernels.predict(big.drop(columns=["node", "op", "graph"]), dev)
        big["us"] = us
        for g, part in big.groupby("graph"):
            preds[(dev_str, g)] = float(part["us"].sum()) / 1000
            feats[(dev_str, g)] = calibration_features(part, part["us"].to_numpy())
        print(f"  predicted {dev_str}", file=sys.stderr, flush=True)
    lab["zero_shot_ms"] = [preds[(d, g)] for d, g in zip(lab["device"], lab["graph"])]
    F = np.stack([feats[(d, g)] for d, g in zip(lab["device"], lab["graph"])])
    y = np.log10(lab["latency_ms"].to_numpy() / lab["zero_shot_ms"].to_numpy())
    rows, coefs, resid = [], {}, {"zero": {}, "cal": {}}
    for hold in SETTINGS:
        fit = ((lab["device"] != hold) & (lab["split"] != "test")).to_numpy()
        coef = fit_calibration(F[fit], y[fit])
        coefs[hold] = coef.tolist()
        te = ((lab["device"] == hold) & (lab["split"] == "test")).to_numpy()
        meas = lab["latency_ms"].to_numpy()[te]
        zs = lab["zero_shot_ms"].to_numpy()[te]
        cal = zs * 10 ** (F[te] @ coef)
        resid["zero"][hold] = np.log(meas / zs)
        resid["cal"][hold] = np.log(meas / cal)
        s = SEERNET.get(hold)
        rows.append({"gpu": hold, "test_rows": int(te.sum()),
                     "zero_shot_mape": float(np.mean(np.abs(zs / meas - 1)) * 100), "zero_shot_spearman": spearman(zs, meas),
                     "calibrated_mape": float(np.mean(np.abs(cal / meas - 1)) * 100), "calibrated_spearman": spearman(cal, meas),
                     "seernet_mape": s[0] if s else None, "seernet_spearman": s[1] if s else None})
    df = pd.DataFrame(rows)
    print("| held-out GPU | test rows | zero-shot MAPE % | Spearman | calibrated on the other 3 MAPE % | Spearman | "
          "measured-device SeerNet MAPE % | Spearman |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in df.itertuples():
        print(f"| {r.gpu} | {r.test_rows} | {r.zero_shot_mape:.1f} | {r.zero_shot_spearman:.3f} | {r.calibrated_mape:.1f} | "
              f"{r.calibrated_spearman:.3f} | {r.seernet_mape if r.seernet_mape is not None else '-'} | "
              f"{r.seernet_spearman if r.seernet_spearman is not None else '-'} |")
    cmd = "python -m benchmarks.lib.spec_timm_logo " + " ".join(argv if argv is not None else sys.argv[1:])
    cov = interval_coverage(resid)
    print()
    print("| held-out GPU | kind | q from the other GPUs' runs (x/÷) | 90 % interval holds % |")
    print("| --- | --- | --- | --- |")
    for kind, per in cov.items():
        for g, v in per.items():
            qs = f"{v['q']:.3f} ({np.exp(v['q']):.2f})" if v["q"] is not None else "-"
            print(f"| {g} | {kind} | {qs} | {v['coverage_pct']:.1f} |")
    if args.trust:
        from perfseer.trust import intervals as itv

        out = {"source": f"{cmd}: test-split timm runs of the held-out RTX GPU (AMP inference; calibrated: fitted on "
                         f"the other three GPUs), pooled over {', '.join(SETTINGS)}", "coverage": cov}
        for kind, key in (("amp-zero-shot", "zero"), ("amp-calibrated", "cal")):
            r = np.concatenate(list(resid[key].values()))
            out[kind] = {"q": itv.conformal_quantile(r), "n": int(len(r)), "median_abs": float(np.median(np.abs(r)))}
        _atomic_json(args.trust, out)
    if args.json:
        _atomic_json(args.json, {"command": cmd, "spec_model": sm.name, "rows": rows, "calibration_by_fold": coefs})
    if args.fit_all:
        fit = (lab["split"] != "test").to_numpy()
        coef = fit_calibration(F[fit], y[fit])
        _atomic_json(args.fit_all, {"source": f"{cmd}: timm AMP inference of {', '.join(SETTINGS)} "
                                              f"(train/val split models, {int(fit.sum())} runs)",
                                    "calibration": {"fp16": {"coef": coef.tolist()}, "bf16": {"coef": coef.tolist()}}})
    return 0


def interval_coverage(resid: dict) -> dict:
    """Per kind and held-out GPU: the 90 % conformal quantile of the *other* GPUs' log residuals
    and the share of this GPU's runs inside it."""
    from perfseer.trust import intervals as itv

    out = {}
    for kind, per in (("amp-zero-shot", resid["zero"]), ("amp-calibrated", resid["cal"])):
        out[kind] = {}
        for g, r in per.items():
            q = itv.conformal_quantile(np.concatenate([v for h, v in per.items() if h != g]))
            out[kind][g] = {"runs": int(len(r)), "q": q, "coverage_pct": float(np.mean(np.abs(r) <= q) * 100)}
        allr = np.concatenate([np.abs(r) <= out[kind][g]["q"] for g, r in per.items()])
        out[kind]["all"] = {"runs": int(len(allr)), "q": None, "coverage_pct": float(allr.mean() * 100)}
    return out


def hash_key(m: str) -> str:
    import hashlib

    return hashlib.sha256(f"spec-calib:{m}".encode()).hexdigest()


if __name__ == "__main__":
    sys.exit(main())
