"""Fit the power model's constants (:mod:`perfseer.energy.power`) and score it on held-out models.

Data (:mod:`benchmarks.lib.energy_data`): the H200 steps (NVML power and utilisation, the spec
model's kernels for each) and the ML.ENERGY A100-SXM4-40GB serving runs (per-GPU power, a decoding
step's FLOPs and bytes from the architecture).  Two stages, both least squares:

1. utilisation (``host_us_per_kernel`` for inference and training, ``kappa`` on the kernels'
   time on the GPU, ``gpu_us_per_kernel``, ``u_max``) on the H200 steps' NVML utilisation, in points, given
   the measured step time;
2. power (``a0``, ``a_c``, ``a_cc``, ``a_m``, shared by both GPUs, and the serving utilisation's ``kappa``)
   on the relative error of the H200 power (with stage 1's predicted utilisation, as a prediction
   has it) and of the A100 per-GPU power, each data set weighted equally.

Validation holds out whole models: ``--folds`` groups by model (the H200 architecture, the served
LLM) and each fold's rows are predicted by constants fitted without them.  The constants shipped
(``src/perfseer/energy/data/power-constants.json``) are fitted on every row.

    python -m benchmarks.lib.energy_fit --work .bench-work/energy-h200 --json fit.json \\
        --write-constants src/perfseer/energy/data/power-constants.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[2]
H200_IDLE_W = 80.0  # datasets/h200/nvidia-smi.txt: 80 W, P0, no process, before the run
SERVING_GPU = "a100-40gb-sxm"


def _fold(key: str, folds: int) -> int:
    return int(hashlib.sha256(f"perfseer-energy-v1:{key}".encode()).hexdigest()[:8], 16) % folds


def load(work: Path, limit: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(h200, serving)`` frames with what the fit needs (``limit``: the first H200 rows only)."""
    from benchmarks.lib.energy_data import h200_records, mlenergy_table, mlenergy_work
    from perfseer.devices import get_device

    recs = [r for r in h200_records(work, log=lambda m: None, limit=limit) if "error" not in r]
    h = pd.DataFrame([{**{k: v for k, v in r.items() if k != "activity"}, **r["activity"]} for r in recs])
    s = mlenergy_work(mlenergy_table())
    spec = get_device(SERVING_GPU)
    t_flop = s["flops"] / (spec.peak("bf16") * 1e12)
    t_mem = s["bytes"] / (spec.mem_bandwidth_gbs * 1e9)
    s["roof_share"] = np.maximum(t_flop, t_mem) / s["tpot_s"]
    s["c"], s["m"] = t_flop / s["tpot_s"], t_mem / s["tpot_s"]
    return h, s


def predict_util(h: pd.DataFrame, u: dict) -> np.ndarray:
    per = np.where(h["phase"].to_numpy() == "train", u["host_us_per_kernel_train"], u["host_us_per_kernel"])
    n = h["kernels"].to_numpy()
    t = h["latency_ms"].to_numpy()
    busy = np.maximum(u["kappa"] * h["gpu_ms"].to_numpy() + n * u["gpu_us_per_kernel"] / 1000, t - n * per / 1000)
    return u["u_max"] * np.minimum(1.0, np.maximum(busy, 0) / t)


def _g(p: dict, c, m, cc=0.0):
    """The busy power's share: ``c`` compute (``cc`` of it on the CUDA cores), ``m`` memory."""
    return np.clip(p["a0"] + p["a_c"] * (c - cc) + p["a_cc"] * cc + p["a_m"] * m, 0.0, 1.0)


def predict_h200_power(h: pd.DataFrame, u: dict, p: dict, util: np.ndarray | None = None) -> np.ndarray:
    tdp = 700.0
    uu = predict_util(h, u) if util is None else util
    c, m = h["compute"].to_numpy(), h["memory"].to_numpy()
    cc = np.minimum(h["compute_cuda"].to_numpy(), c)
    return np.clip(H200_IDLE_W + (tdp - H200_IDLE_W) * uu * _g(p, c, m, cc), H200_IDLE_W, tdp)


def serving_util(s: pd.DataFrame, p: dict) -> np.ndarray:
    return np.minimum(p["u_max_serving"], p["kappa_serving"] * s["roof_share"].to_numpy())


def predict_serving_power(s: pd.DataFrame, p: dict, idle_fraction: float) -> np.ndarray:
    from perfseer.devices import get_device

    tdp = float(get_device(SERVING_GPU).tdp_w)
    idle = idle_fraction * tdp
    u = serving_util(s, p)
    c = np.minimum(1.0, s["c"].to_numpy() / u)
    m = np.minimum(1.0, s["m"].to_numpy() / u)
    return np.clip(idle + (tdp - idle) * u * _g(p, c, m), idle, tdp)


UTIL0 = {"host_us_per_kernel": 10.0, "host_us_per_kernel_train": 40.0, "kappa": 2.0, "gpu_us_per_kernel": 3.0,
         "u_max": 0.97}
POWER0 = {"a0": 0.5, "a_c": 0.4, "a_cc": 0.4, "a_m": 0.3, "kappa_serving": 3.0, "u_max_serving": 1.0}


def fit_util(h: pd.DataFrame) -> dict:
    keys = list(UTIL0)

    def res(v):
        return (predict_util(h, dict(zip(keys, v))) - h["util_pct"].to_numpy() / 100) * 100

    r = least_squares(res, [UTIL0[k] for k in keys], bounds=([1.0, 1.0, 0.5, 0.0, 0.7], [300.0, 300.0, 20.0, 50.0, 1.0]))
    return dict(zip(keys, map(float, r.x)))


def fit_power(h: pd.DataFrame, s: pd.DataFrame, u: dict, idle_fraction: float) -> dict:
    keys = ["a0", "a_c", "a_cc", "a_m", "kappa_serving"]
    wh, ws = 1 / np.sqrt(max(len(h), 1)), 1 / np.sqrt(max(len(s), 1))

    def res(v):
        p = dict(zip(keys, v), u_max_serving=1.0)
        parts = []
        if len(h):
            parts.append(wh * (predict_h200_power(h, u, p) / h["power_w"].to_numpy() - 1))
        if len(s):
            parts.append(ws * (predict_serving_power(s, p, idle_fraction) / s["power_w"].to_numpy() - 1))
        return np.concatenate(parts)

    r = least_squares(res, [POWER0[k] for k in keys], bounds=([0.0, -1.0, -1.0, -1.0, 0.5], [1.0, 2.0, 2.0, 2.0, 20.0]))
    return {**dict(zip(keys, map(float, r.x))), "u_max_serving": 1.0}


def _mape(pred, y) -> float:
    return float(np.mean(np.abs(np.asarray(pred) / np.asarray(y) - 1)) * 100)


def cross_validate(h: pd.DataFrame, s: pd.DataFrame, folds: int, idle_fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Out-of-fold predictions: each model's rows predicted by constants fitted without that model."""
    h, s = h.copy(), s.copy()
    h["fold"] = [_fold(a, folds) for a in h["arch"]]
    s["fold"] = [_fold(m, folds) for m in s["model"]]
    for k in range(folds):
        ht, st = h[h["fold"] != k], s[s["fold"] != k]
        u = fit_util(ht)
        p = fit_power(ht, st, u, idle_fraction)
        hi, si = h["fold"] == k, s["fold"] == k
        h.loc[hi, "util_pred"] = predict_util(h[hi], u) * 100
        h.loc[hi, "power_pred"] = predict_h200_power(h[hi], u, p)
        s.loc[si, "power_pred"] = predict_serving_power(s[si], p, idle_fraction)
    h["energy_pred"] = h["power_pred"] * h["latency_ms"] / 1000
    s["energy_per_token_pred"] = s["power_pred"] * s["gpus"] / s["tokens_per_s"]
    return h, s


def scores(h: pd.DataFrame, s: pd.DataFrame) -> dict:
    out = {"h200": {"rows": int(len(h)), "models": int(h["arch"].nunique()),
                    "energy_mape": _mape(h["energy_pred"], h["energy_j"]),
                    "util_mae_points": float(np.mean(np.abs(h["util_pred"] - h["util_pct"]))),
                    "by_setting": {}},
           "serving": {"rows": int(len(s)), "models": int(s["model"].nunique()),
                       "energy_per_token_mape": _mape(s["energy_per_token_pred"], s["energy_per_token_j"]),
                       "by_task": {}}}
    for (ph, pr), g in h.groupby(["phase", "precision"]):
        out["h200"]["by_setting"][f"{ph} {pr}"] = {
            "rows": int(len(g)), "energy_mape": _mape(g["energy_pred"], g["energy_j"]),
            "util_mae_points": float(np.mean(np.abs(g["util_pred"] - g["util_pct"])))}
    for task, g in s.groupby("task"):
        out["serving"]["by_task"][task] = {"rows": int(len(g)),
                                           "energy_per_token_mape": _mape(g["energy_per_token_pred"], g["energy_per_token_j"])}
    return out


def cross_validate_end_to_end(h: pd.DataFrame, s: pd.DataFrame, folds: int, idle_fraction: float) -> pd.DataFrame:
    """Out-of-fold H200 energy per step with the spec model's latency as the step time."""
    h = h.copy()
    h["fold"] = [_fold(a, folds) for a in h["arch"]]
    s = s.copy()
    s["fold"] = [_fold(m, folds) for m in s["model"]]
    spec_rows = h.assign(latency_ms=h["spec_ms"])
    for k in range(folds):
        u = fit_util(h[h["fold"] != k])
        p = fit_power(h[h["fold"] != k], s[s["fold"] != k], u, idle_fraction)
        i = h["fold"] == k
        h.loc[i, "power_pred_e2e"] = predict_h200_power(spec_rows[i], u, p)
        h.loc[i, "util_pred_e2e"] = predict_util(spec_rows[i], u) * 100
    h["energy_pred_e2e"] = h["power_pred_e2e"] * h["spec_ms"] / 1000
    return h


def write_constants(path: Path, res: dict, h: pd.DataFrame, s: pd.DataFrame) -> None:
    """The fitted constants into the fact file, with the fit's provenance."""
    import time

    doc = json.loads(path.read_text())
    doc["utilization"] = {k: round(v, 5) for k, v in res["constants"]["utilization"].items()}
    doc["power"] = {k: round(v, 5) for k, v in res["constants"]["power"].items()}
    doc["fit"] = {
        "command": "python -m benchmarks.lib.energy_fit --write-constants src/perfseer/energy/data/power-constants.json",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "data": [f"datasets/h200/h200-torch-cuda.csv: {len(h)} steps of {h['arch'].nunique()} models on an NVIDIA "
                 "H200 (NVML energy and utilisation; this project's measurements, 2026-11-27)",
                 f"../shared/datasets/mlenergy: {len(s)} vLLM serving runs of {s['model'].nunique()} LLMs on "
                 "A100-SXM4-40GB (ML.ENERGY leaderboard v2, Apache-2.0; per-GPU power from energy per request)"],
        "fitted_on": "every row; the scores below hold out whole models (5 folds by model, each fold predicted "
                     "by constants fitted without it)",
        "held_out_scores": {"h200_energy_per_step_mape_pct": round(res["cv"]["h200"]["energy_mape"], 2),
                            "h200_util_mae_points": round(res["cv"]["h200"]["util_mae_points"], 2),
                            "a100_serving_energy_per_token_mape_pct":
                                round(res["cv"]["serving"]["energy_per_token_mape"], 2)},
        "notes": "the H200 rows use the measured step time and the spec model's kernels on h200; the serving rows "
                 "the measured time per output token and a decoding step's FLOPs and bytes "
                 "(perfseer.energy.llm.decode_work, benchmarks/lib/energy_data.py ARCHITECTURES)",
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=str(ROOT / ".bench-work" / "energy-h200"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--write-constants", default=None)
    ap.add_argument("--limit", type=int, default=None, help="the first H200 rows only (a quick run)")
    args = ap.parse_args(argv)
    from perfseer.energy.power import constants

    idle_fraction = constants()["idle"]["classes"]["hbm"]["idle_fraction"]
    h, s = load(Path(args.work), args.limit)
    hcv, scv = cross_validate(h, s, args.folds, idle_fraction)
    res = {"cv": scores(hcv, scv), "folds": args.folds}
    e2e = cross_validate_end_to_end(h, s, args.folds, idle_fraction)
    res["cv"]["h200_spec_latency"] = {
        "rows": int(len(e2e)), "energy_mape": _mape(e2e["energy_pred_e2e"], e2e["energy_j"]),
        "latency_mape": _mape(e2e["spec_ms"], e2e["latency_ms"]),
        "util_mae_points": float(np.mean(np.abs(e2e["util_pred_e2e"] - e2e["util_pct"]))),
        "by_setting": {f"{ph} {pr}": {"rows": int(len(g)), "energy_mape": _mape(g["energy_pred_e2e"], g["energy_j"]),
                                      "latency_mape": _mape(g["spec_ms"], g["latency_ms"])}
                       for (ph, pr), g in e2e.groupby(["phase", "precision"])}}
    u = fit_util(h)
    p = fit_power(h, s, u, idle_fraction)
    res["constants"] = {"utilization": u, "power": p}
    # to another GPU: the power constants fitted on the A100 serving runs alone, scored on every H200
    # step (the utilisation constants are the H200's: they are fitted on NVML utilisation, not energy)
    pa = fit_power(h.iloc[0:0], s, u, idle_fraction)
    pred = predict_h200_power(h, u, pa) * h["latency_ms"] / 1000
    res["transfer"] = {"a100_only_constants": pa, "h200_energy_mape": _mape(pred, h["energy_j"]),
                       "h200_energy_mean_ratio": float(np.mean(pred / h["energy_j"]))}
    print(json.dumps(res, indent=1))
    if args.write_constants:
        write_constants(Path(args.write_constants), res, h, s)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
