"""Fit the host cost of ``torch.nn.DataParallel`` (:func:`perfseer.parallel.step.dataparallel_overhead`)
on pytorch-gpu-benchmark's 1-4 GPU runs, and write ``perfseer/parallel/data/dataparallel.json``.

Data: ``gpu-benchmark/`` (github.com/ryujaehun/pytorch-gpu-benchmark, MIT): torchvision CNNs at
batch 12 per GPU through ``nn.DataParallel`` on 1-4 TITAN Xp and 1-4 RTX 2080 Ti, fp32 and fp16,
inference and training without an optimizer step; the median of each CSV column (ms).

With the measured single-GPU step as the per-GPU compute (each GPU runs 12 samples either way),
the extra time of ``N`` GPUs is DataParallel's own: the batch copied to GPU 0 and scattered, the
module replicated (parameters broadcast, a Python cost per module and tensor), outputs gathered,
gradients reduced to GPU 0.  The bytes go at the PCIe ring bandwidth of the collective model;
``per_tensor_ms`` (per parameter or buffer tensor and extra replica), ``per_module_ms`` and
``per_replica_ms`` and ``bandwidth_scale`` are a non-negative least squares on the relative error,
Huber-reweighted (a run far off every model, such as the TITAN Xp's fp32 4-GPU runs at 2-4 times
their 3-GPU time, does not drive the fit).
The fit uses one GPU model (``--fit-on``, default the TITAN Xp); the other is held out.

Run ``python -m perfseer.fit.dataparallel [--data DIR] [--fit-on titan-xp|rtx2080ti]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from perfseer.parallel import step as st
from perfseer.parallel.collectives import collective_cost
from perfseer.parallel.plan import ModelFacts, make_plan

DEFAULT_DATA = Path("/work/shared/datasets/gpu-benchmark")
#: registry GPU -> the benchmark's file prefix
FILES = {"titan-xp": "results/TITANXP/TITAN Xp", "rtx2080ti": "new_results/GeForce RTX 2080 Ti"}
PRECISIONS = {"float": 4, "half": 2}
PHASES = {"train": "train", "inference": "infer"}
PER_GPU_BATCH = 12
HUBER = 0.10  # relative residual beyond which a row's weight falls as 1/residual
SOURCE = ("github.com/ryujaehun/pytorch-gpu-benchmark commit 3f47a9e (MIT): torchvision models, batch 12 per GPU, "
          "nn.DataParallel on 1-4 GPUs; median of each column")


def load(data: Path = DEFAULT_DATA) -> pd.DataFrame:
    """One row per (gpu, precision, phase, model, gpus): the median step (ms) and the 1-GPU one."""
    rows = []
    for gpu, prefix in FILES.items():
        for prec in PRECISIONS:
            for ph, phase in PHASES.items():
                med = {}
                for n in (1, 2, 3, 4):
                    f = Path(data) / f"{prefix}_{n}_gpus__{prec}_model_{ph}_benchmark.csv"
                    if f.exists():
                        med[n] = pd.read_csv(f).median()
                if 1 not in med:
                    continue
                for n, m in med.items():
                    for model, ms in m.items():
                        if model in med[1] and np.isfinite(ms):
                            rows.append({"gpu": gpu, "precision": prec, "phase": phase, "model": model, "gpus": n,
                                         "ms": float(ms), "ms_1": float(med[1][model])})
    return pd.DataFrame(rows)


@lru_cache(maxsize=None)
def model_counts(name: str) -> tuple[int, int, int]:
    """``(parameters, tensors (parameters and buffers), modules)`` of a torchvision model (built on
    the meta device)."""
    import torch  # deferred: heavy
    import torchvision

    with torch.device("meta"):
        m = torchvision.models.get_model(name)
    return (sum(p.numel() for p in m.parameters()), sum(1 for _ in m.parameters()) + sum(1 for _ in m.buffers()),
            sum(1 for _ in m.modules()))


def _features(r) -> tuple[list[float], ModelFacts]:
    params, tensors, modules = model_counts(r.model)
    width = PRECISIONS[r.precision]
    facts = ModelFacts(name=r.model, params=params, param_bytes=params * width, param_tensors=tensors)
    n = r.gpus
    node = "pcie-4"
    bus = collective_cost("all_reduce", float(facts.param_bytes), n, gpu=r.gpu, node=node).bus_gbs * 1e9
    input_bytes = PER_GPU_BATCH * n * 3 * 224 * 224 * width
    train = r.phase == "train"
    bytes_ms = 1e3 * (2 * input_bytes * (n - 1) / n + facts.param_bytes * (2 if train else 1)) / bus
    return [tensors * (n - 1) + (tensors if train else 0), modules * (n - 1), float(n - 1), bytes_ms], facts


def fit(df: pd.DataFrame) -> dict:
    rows = df[df["gpus"] > 1]
    A, y = [], []
    for r in rows.itertuples():
        feats, _ = _features(r)
        A.append(feats)
        y.append(r.ms - r.ms_1)
    A, y = np.array(A), np.array(y)
    ms = rows["ms"].to_numpy()
    w = 1.0 / ms
    for _ in range(10):  # Huber-weighted: a run far off every model (a disturbed machine) does not drive the fit
        sol, _ = nnls(A * w[:, None], y * w)
        rel = np.abs(A @ sol - y) / ms
        w = 1.0 / ms / np.maximum(1.0, rel / HUBER)
    a, mod, b, c = sol
    return {"per_tensor_ms": float(a), "per_module_ms": float(mod), "per_replica_ms": float(b),
            "bandwidth_scale": float(1.0 / c) if c > 0 else 1e3, "rows": int(len(rows))}


def predict(df: pd.DataFrame, consts: dict) -> np.ndarray:
    """The step (ms) of each row: the measured 1-GPU step plus the runtime's DataParallel cost."""
    out = []
    for r in df.itertuples():
        _, facts = _features(r)
        params, tensors, modules = model_counts(r.model)
        plan = make_plan(r.gpus, "dataparallel", node="pcie-4")
        o = st.dataparallel_overhead(facts.with_(param_tensors=tensors), plan, r.phase, r.gpu,
                                     PER_GPU_BATCH * r.gpus * 3 * 224 * 224 * PRECISIONS[r.precision],
                                     consts=consts, modules=modules)
        out.append(r.ms_1 + sum(o.values()))
    return np.array(out)


def table(df: pd.DataFrame, pred: np.ndarray) -> list[dict]:
    d = df.copy()
    d["pred"] = pred
    d["err"] = (d["pred"] - d["ms"]) / d["ms"]
    out = []
    for key, g in d.groupby(["gpu", "phase", "precision", "gpus"]):
        a = g["err"].abs()
        out.append({"gpu": key[0], "phase": key[1], "precision": key[2], "gpus": int(key[3]), "models": int(len(g)),
                    "mean_abs_pct": round(100 * float(a.mean()), 1), "median_abs_pct": round(100 * float(a.median()), 1),
                    "within_10pct": round(float((a <= 0.10).mean()), 3)})
    return out


def build(data: Path = DEFAULT_DATA, fit_on: str = "titan-xp") -> tuple[dict, list[dict]]:
    df = load(data)
    train = df[df["gpu"] == fit_on]
    held = df[(df["gpu"] != fit_on) & (df["gpus"] > 1)]
    consts = fit(train)
    rows = table(held, predict(held, consts)) + table(train[train["gpus"] > 1], predict(train[train["gpus"] > 1], consts))
    for r in rows:
        r["split"] = "held-out GPU" if r["gpu"] != fit_on else "fitted on"
    consts.update({"format": "perfseer.dataparallel", "format_version": 1, "source": SOURCE, "fit_on": fit_on,
                   "fitted_by": "python -m perfseer.fit.dataparallel", "table": rows})
    return consts, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfseer.fit.dataparallel", description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--fit-on", default="titan-xp", choices=sorted(FILES))
    ap.add_argument("--out", type=Path, default=st.DATAPARALLEL_FACTS)
    args = ap.parse_args(argv)
    consts, rows = build(args.data, args.fit_on)
    args.out.write_text(json.dumps({k: (float(f"{v:.5g}") if isinstance(v, float) else v) for k, v in consts.items()},
                                   indent=1) + "\n")
    for r in rows:
        print(r)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
