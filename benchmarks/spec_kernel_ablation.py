"""Kernel-level leave-one-GPU-out of the spec model's kernel MLPs, with and without an extra
feature: does ``log10(bytes / L2)`` (the working set against the GPU's L2) help a GPU never seen?

For each of NeuSight's five NVIDIA GPUs and each seed, the MLP of one kernel family is trained on
the other four GPUs' kernels (at most 8,000 rows per GPU, seeded sample) and scored (MAPE %) on
all sampled kernels of the held-out GPU.

    python benchmarks/spec_kernel_ablation.py --data ../shared/datasets/neusight --family vec
    python benchmarks/spec_kernel_ablation.py --data ../shared/datasets/neusight --family gemm
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--family", default="vec", choices=("gemm", "conv", "vec", "ln", "softmax"))
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--max-rows", type=int, default=8000)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from perfseer.devices import get_device
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel import neusight as ns
    from perfseer.specmodel import net

    k = ns.load_kernels(args.data)
    k = k[k["family"] == args.family]
    k = k.sample(frac=1.0, random_state=0).groupby("device").head(args.max_rows).reset_index(drop=True)
    specs = {d: get_device(d) for d in k["device"].unique()}

    def dev(t):
        return kt.device_frame([specs[d] for d in t["device"]], ["fp32"] * len(t), t["family"])

    base = kt.features

    def with_l2(family, table, d, device_features=False):
        x, t_roof = base(family, table, d, device_features)
        l2 = np.log10(np.maximum(table["bytes"].to_numpy() / (d["l2_mib"].to_numpy() * 2**20), 1e-9))
        return np.concatenate([x, l2[:, None].astype(np.float32)], axis=1), t_roof

    print(f"| {args.family} kernels, held-out GPU | " + " | ".join(["without L2 term", "with log10(bytes / L2)"]) + " |")
    print("| --- | --- | --- |")
    for hold in sorted(specs):
        tr, te = k[k["device"] != hold].reset_index(drop=True), k[k["device"] == hold].reset_index(drop=True)
        cells = []
        for feats in (base, with_l2):
            net.kt.features = feats
            errs = []
            for seed in (int(s) for s in args.seeds.split(",")):
                m = net.KernelModel(net.KernelModelConfig(epochs=30, time_limit_s=20, seed=seed))
                m.fit(tr, dev(tr), tr["latency_us"])
                errs.append(float(np.mean(np.abs(m.predict(te, dev(te)) / te["latency_us"].to_numpy() - 1)) * 100))
            net.kt.features = base
            cells.append(" / ".join(f"{e:.1f}" for e in errs))
        print(f"| {hold} | {cells[0]} | {cells[1]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
