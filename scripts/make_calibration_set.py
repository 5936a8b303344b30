"""Choose the calibration set: ~20 models that span the PerfGraph feature space (issue 16).

Candidates: the timm models of the committed timm dataset benchmarked at 3x224x224 (inference,
fused form) and the 342 PerfSeer model-space networks of the committed CPU dataset (built at
3x32x32; their per-sample FLOPs and memory access are scaled by 49 to 3x224x224).  Each is described by five batch-free log features — FLOPs per
sample, memory access per sample, parameters, node count and arithmetic intensity — and the K-centre
selection of :func:`perfseer.fit.calibrate.spanning_set` (standardised features; start at
the candidate nearest the median, then repeatedly the candidate farthest from every pick) keeps
``--k`` of them.  K-centre puts a calibration model near every candidate, which is what the
calibrated card's domain check and the correction's slopes need; random picks crowd the dense
middle (ResNet/ConvNeXt-sized models) and leave the ends (tiny mobile nets, ViT-L at 384) out.

Writes one reference per line (each after a comment giving its size), the file ``perfseer collect
run --models FILE --input-shape 3x224x224`` reads (see docs/guide/calibrate.md).

Example::

    python scripts/make_calibration_set.py --k 20 --out datasets/calibration/calibration-set-20.txt
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from perfseer.data.dataset import load_dataset, resolve_dataset
from perfseer.features.schema import GLOBAL_FEATURES
from perfseer.fit.calibrate import spanning_set

G = {n: i for i, n in enumerate(GLOBAL_FEATURES)}


def features(graphs) -> np.ndarray:
    u = np.stack([g.u.reshape(-1).double().numpy() for g in graphs])
    b = np.maximum(u[:, G["batch_size"]], 1)
    cols = [u[:, G["flops_total"]] / b, u[:, G["memory_access_total"]] / b, u[:, G["params"]],
            u[:, G["num_nodes"]], u[:, G["arithmetic_intensity"]]]
    return np.log(np.maximum(np.stack(cols, 1), 1e-9))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-gflops", type=float, default=100.0, help="per sample (default 100)")
    ap.add_argument("--max-mparams", type=float, default=350.0, help="millions of parameters (default 350)")
    args = ap.parse_args()
    refs, shapes, graphs = [], [], []
    scale = []
    for name, shape in (("timm", "3x224x224"), ("cpu", "3x32x32")):
        ds = load_dataset(resolve_dataset(name))
        rows = ds.labels[(ds.labels["phase"].astype(str) == "infer") & (ds.labels["input_shape"].astype(str) == shape)]
        rows = rows.drop_duplicates(["model", "input_shape"])
        refs += rows["model"].astype(str).tolist()
        shapes += ["3x224x224"] * len(rows)
        graphs += [ds.graphs[int(g)] for g in rows["graph"]]
        scale += [1.0 if name == "timm" else (224 / 32) ** 2] * len(rows)
    X = features(graphs)
    # the model-space networks were built at 3x32x32; at 3x224x224 (all convolutional, global pooling)
    # their FLOPs and activation traffic grow with the pixel count, 49x
    X[:, 0] += np.log(scale)
    X[:, 1] += np.log(scale)
    # measurable in seconds on any GPU (and in minutes on a CPU): K-centre would otherwise pick the
    # extremes, a 7-billion-parameter ViT and SAM at 1024x1024
    ok = np.flatnonzero((X[:, 0] <= np.log(args.max_gflops * 1e9)) & (X[:, 2] <= np.log(args.max_mparams * 1e6)))
    picked = [int(ok[i]) for i in spanning_set(X[ok], args.k)]
    picked.sort(key=lambda i: X[i, 0])
    lines = [f"# perfseer collect run --models THIS_FILE --input-shape 3x224x224 ... (docs/guide/calibrate.md)",
             f"# {args.k} models chosen by K-centre over {len(ok)} of {len(refs)} candidates (<= {args.max_gflops:g} "
             f"GFLOPs per sample, <= {args.max_mparams:g} M parameters; scripts/make_calibration_set.py)",
             "# each model at 3x224x224, after a comment line with its size"]
    for i in picked:
        lines.append(f"# {np.exp(X[i, 0]) / 1e9:.3g} GFLOPs, {np.exp(X[i, 2]) / 1e6:.3g} M parameters, "
                     f"{int(np.exp(X[i, 3]))} nodes")
        lines.append(refs[i])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
