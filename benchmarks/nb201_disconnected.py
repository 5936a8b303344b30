"""Why the Raspberry Pi 4 dominates the NAS-Bench-201 calibration MAPE: input-disconnected cells.

A NAS-Bench-201 cell whose output has no path of non-``none`` edges from its input computes a
constant: the whole network's output no longer depends on the image.  The Raspberry Pi 4 and
Pixel 3 runtimes of HELP's measurements evaluate such a network almost for free (a constant-folding
converter removes it), every other device runs it at its usual cost.  This script counts those
architectures per device, their latency relative to the device's median, and the K-shot
calibration MAPE with and without them, from the files of ``calibration_sweep.py cache`` and
``calibration_intervals.py rows`` (default variant ``auto``).  When the cache has the ``live``
column (``calibration_sweep.py live``), the general rule of :mod:`perfseer.graph.liveness`
(the network's output does not depend on its input, read from its ONNX graph) must mark the same
rows as the cell rule here; a calibrated card puts those rows outside its domain (flag
``output-independent-of-input``), so "without them" is the MAPE over the rows the card calls in-domain
for this reason.

Example::

    python benchmarks/nb201_disconnected.py --cache cache_nb201.npz --rows rows_nb201.npz --k 10
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
import calibration_sweep as cs  # noqa: E402


def disconnected(arch: str) -> bool:
    """True when the cell's output (node 3) has no path of non-``none`` edges from its input."""
    from perfseer.sources.nas.nb201 import parse_nb201

    reach = {0}
    for i, ops in enumerate(parse_nb201(arch.split(":", 1)[-1]), start=1):
        if any(op != "none" and j in reach for j, op in enumerate(ops)):
            reach.add(i)
    return 3 not in reach


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--rows", required=True)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--selection", default="kcentre-glob")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    z = cs.load_cache(args.cache)
    r = np.load(args.rows, allow_pickle=False)
    meta, off = json.loads(str(r["meta"])), r["test_off"]
    out = []
    print("| device | role | disconnected test archs | their median latency / device median (min, 10th, 90th "
          "percentile, max) | "
          f"MAPE % (K = {args.k}, {args.selection}) | without them | Spearman | without them |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    from scipy.stats import spearmanr

    for target in dict.fromkeys(z["target"].tolist()):
        m = (z["target"] == target) & (z["split"] == "test")
        y = z["y"][m]
        dis = np.array([disconnected(a) for a in z["model"][m]])
        if "live" in z:  # the general rule, read from the ONNX graph (perfseer.graph.liveness), must agree
            flagged = z["live"][z["graph_index"][m], 2] > 0
            if not np.array_equal(flagged, dis):
                raise SystemExit(f"{target}: the liveness flag marks {int(flagged.sum())} rows, the cell rule "
                                 f"{int(dis.sum())}")
        ratio = float(np.exp(np.median(np.log(y[dis])) - np.median(np.log(y)))) if dis.any() else float("nan")
        spread = (np.exp(np.quantile(np.log(y[dis]), [0, 0.1, 0.9, 1]) - np.median(np.log(y))).round(4).tolist()
                  if dis.any() else [])
        mape, mape_wo, rho, rho_wo = [], [], [], []
        for i, mm in enumerate(meta):
            if mm["target"] != target or mm["k"] != args.k or mm["selection"] != args.selection:
                continue
            res = r["test_r"][off[i]:off[i + 1]].astype(float)  # log y - log prediction, the cache's order
            pred = y * np.exp(-res)
            ape = np.abs(pred / y - 1) * 100
            mape.append(ape.mean())
            mape_wo.append(ape[~dis].mean())
            rho.append(spearmanr(y, pred).statistic)
            rho_wo.append(spearmanr(y[~dis], pred[~dis]).statistic)
        rec = {"target": target, "role": str(z["role"][m][0]), "test_rows": int(m.sum()),
               "disconnected": int(dis.sum()), "latency_ratio": ratio,
               "latency_ratio_min_p10_p90_max": spread, "mape": float(np.mean(mape)),
               "mape_without": float(np.mean(mape_wo)), "spearman": float(np.mean(rho)),
               "spearman_without": float(np.mean(rho_wo)), "draws": len(mape)}
        out.append(rec)
        print(f"| {target} | {rec['role']} | {rec['disconnected']} of {rec['test_rows']} | {ratio:.3f} "
              f"({', '.join(f'{v:.3g}' for v in spread)}) | "
              f"{rec['mape']:.2f} | {rec['mape_without']:.2f} | {rec['spearman']:.3f} | {rec['spearman_without']:.3f} |")
    tb.write_json(args.json, {"benchmark": "nb201-disconnected", "args": vars(args), "results": out})
    return 0


if __name__ == "__main__":
    tb.run_main(main)
