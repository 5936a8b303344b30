"""Two checks behind docs/devices.md's reading of the spec model's errors.

1. How efficient each NeuSight training GPU is on large GEMMs (FP32, > 10 GFLOP): the share of
   its FP32 peak the measured kernels reach (quartiles).
2. Whether the composition (trace -> forward + backward kernels) adds up: the bundled model's
   per-pass sums for one labelled trace against the trace's measured per-node times (forward;
   backward + gradient accumulation), layer nodes counted ``num_layer`` times.

    python benchmarks/spec_checks.py --data ../shared/datasets/neusight \
        [--gpu v100-pcie-32gb --workload bert_large-train-512-2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--gpu", default="v100-pcie-32gb")
    ap.add_argument("--workload", default="bert_large-train-512-2")
    args = ap.parse_args(argv)

    from perfseer.devices import get_device
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel import neusight as ns
    from perfseer.runtime.spec import load_spec_model

    k = ns.load_kernels(args.data)
    specs = {d: get_device(d) for d in k["device"].unique()}
    big = k[(k["family"] == "gemm") & (k["flops"] > 1e10)].reset_index(drop=True)
    dev = kt.device_frame([specs[d] for d in big["device"]], ["fp32"] * len(big), big["family"])
    t_flop, _ = kt.roofline_us(big, dev)
    big["share"] = t_flop / big["latency_us"].to_numpy()
    print("| GPU | large GEMMs | share of FP32 peak: 25 % | median | 75 % |")
    print("| --- | --- | --- | --- | --- |")
    for d, g in big.groupby("device"):
        q = g["share"].quantile([0.25, 0.5, 0.75]).to_numpy()
        print(f"| {d} | {len(g)} | {q[0]:.2f} | {q[1]:.2f} | {q[2]:.2f} |")

    sm = load_spec_model()
    w = [x for x in ns.load_workloads(args.data, devices=[args.gpu]) if x.name == args.workload]
    if not w:
        print(f"no workload {args.workload} on {args.gpu}", file=sys.stderr)
        return 2
    w = w[0]
    tr = w.trace
    d = kt.device_frame([get_device(args.gpu)] * len(tr), ["fp32"] * len(tr), tr["family"])
    tr = tr.assign(pred=sm.kernels.predict(tr.drop(columns=["scale", "pass", "node"]), d) * tr["scale"] / 1000)
    folder = {v: k_ for k_, v in ns.LABEL_DIRS.items()}[args.gpu]
    raw = pd.read_csv(Path(args.data) / "labels" / folder / f"{args.workload}.csv.gz").set_index("Name")
    scale = tr.groupby("node")["scale"].first()
    meas = raw.reindex(scale.index)
    fw_meas = float((meas["fw_latency"] * scale).sum())
    bw_meas = float(((meas["bw_latency"] + meas["acc_latency"]) * scale).sum())
    by = tr.groupby("pass")["pred"].sum()
    print(f"\n{args.workload} on {args.gpu}: predicted forward {by.get('fw', 0):.1f} ms, backward {by.get('bw', 0):.1f} ms; "
          f"trace measured (same nodes) forward {fw_meas:.1f} ms, backward {bw_meas:.1f} ms; "
          f"end-to-end measured forward {w.fw_ms:.1f} ms, backward {w.bw_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
