"""The spec model on NeuSight's end-to-end workloads, leave-one-GPU-out.

For each of NeuSight's five NVIDIA training GPUs (P4, P100, T4, V100, A100-40GB PCIe), the
kernel model is trained on the kernel measurements of the *other four* only, then predicts every
labelled end-to-end run of the held-out GPU (BERT-large, GPT-2 large, GPT-3 XL / 2.7B, OPT-1.3B;
inference and training) from its per-operator trace: each traced operation becomes kernels
(``perfseer.specmodel.neusight.op_kernels``; training adds the backward kernels of
``perfseer.specmodel.backward``), the traced layer's kernels count ``num_layer`` times, and the
predicted step is the sum.  The error is against the measured end-to-end latency of the full
model (NeuSight's ``e2e_latency``).  Roofline (``max(FLOPs / peak, bytes / bandwidth)`` per
kernel, summed the same way) is computed on the same kernels.

    python benchmarks/spec_neusight.py --data ../shared/datasets/neusight \
        --json benchmarks/results/spec_neusight.json

Prints per workload and per GPU (mean absolute percentage error) tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

FAMILIES = ("gemm", "vec", "ln", "softmax")  # NeuSight's transformers use no convolution


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "neusight"))
    ap.add_argument("--gpus", default=None, help="comma-separated registry names to hold out (default: all five)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=20.0, help="CPU seconds per kernel family and fold")
    ap.add_argument("--device-features", default="0", choices=("0", "power", "all"))
    ap.add_argument("--max-rows", type=int, default=8000,
                    help="kernel rows per family and training GPU (a seeded sample; 0: all)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from perfseer.devices import get_device

    import functools

    _spec = functools.lru_cache(maxsize=None)(get_device)  # one registry look-up per device name
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel import neusight as ns
    from perfseer.specmodel.net import KernelModel, KernelModelConfig

    kernels = ns.load_kernels(args.data)
    kernels = kernels[kernels["family"].isin(FAMILIES)].reset_index(drop=True)
    if args.max_rows:
        kernels = (kernels.sample(frac=1.0, random_state=0).groupby(["family", "device"]).head(args.max_rows)
                   .reset_index(drop=True))
    workloads = ns.load_workloads(args.data)
    gpus = args.gpus.split(",") if args.gpus else sorted(ns.LABEL_DIRS.values())

    def dev(t):
        return kt.device_frame([_spec(d) for d in t["device"]], ["fp32"] * len(t), t["family"])

    dfeat = {"0": False, "power": "power", "all": "all"}[args.device_features]
    rows, folds = [], {}
    for hold in gpus:
        t0 = time.time()
        tr = kernels[kernels["device"] != hold].reset_index(drop=True)
        cfg = KernelModelConfig(epochs=args.epochs, time_limit_s=args.time_limit, device_features=dfeat,
                                hidden=args.hidden, layers=args.layers)
        model = KernelModel(cfg).fit(tr, dev(tr), tr["latency_us"])
        te = kernels[kernels["device"] == hold].reset_index(drop=True)
        pk = model.predict(te, dev(te))
        kerr = np.abs(pk / te["latency_us"].to_numpy() - 1)
        folds[hold] = {"train_rows": len(tr), "fit_s": round(time.time() - t0, 1),
                       "kernel_mape": {f: float(kerr[te["family"].to_numpy() == f].mean() * 100) for f in FAMILIES}}
        spec = get_device(hold)
        for w in workloads:
            if w.device != hold:
                continue
            k = w.trace
            d = kt.device_frame([spec] * len(k), ["fp32"] * len(k), k["family"])
            p = model.predict(k.drop(columns=["scale", "pass", "node"]), d)
            tf, tm = kt.roofline_us(k, d)
            roof = np.maximum(tf, tm)
            sc = k["scale"].to_numpy()
            pred = float((p * sc).sum() / 1000)
            rl = float((roof * sc).sum() / 1000)
            rows.append({"gpu": hold, "workload": w.name, "phase": w.phase, "measured_ms": w.e2e_ms, "spec_ms": pred,
                         "roofline_ms": rl, "spec_err_pct": abs(pred / w.e2e_ms - 1) * 100,
                         "roofline_err_pct": abs(rl / w.e2e_ms - 1) * 100, "kernels": int(len(k))})
        print(f"held out {hold}: {folds[hold]['fit_s']} s, kernel MAPE "
              + ", ".join(f"{f} {v:.1f}" for f, v in folds[hold]["kernel_mape"].items()), file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    print(_table(df))
    if args.json:
        out = {"command": "python benchmarks/spec_neusight.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "config": vars(args), "folds": folds, "workloads": rows}
        p = Path(args.json)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        os.replace(tmp, p)
    return 0


def _table(df: pd.DataFrame) -> str:
    lines = ["| GPU (held out) | workload | measured ms | spec model ms | error % | roofline error % |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in df.itertuples():
        lines.append(f"| {r.gpu} | {r.workload} | {r.measured_ms:.1f} | {r.spec_ms:.1f} | {r.spec_err_pct:.1f} | "
                     f"{r.roofline_err_pct:.1f} |")
    lines += ["", "| GPU (held out) | phase | runs | spec model MAPE % | roofline MAPE % |", "| --- | --- | --- | --- | --- |"]
    for (g, ph), s in df.groupby(["gpu", "phase"]):
        lines.append(f"| {g} | {ph} | {len(s)} | {s.spec_err_pct.mean():.1f} | {s.roofline_err_pct.mean():.1f} |")
    for ph, s in df.groupby("phase"):
        lines.append(f"| all | {ph} | {len(s)} | {s.spec_err_pct.mean():.1f} | {s.roofline_err_pct.mean():.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
