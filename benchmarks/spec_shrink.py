"""Where the spec model's leave-one-GPU-out error on NeuSight's workloads comes from, and what
shrinking its kernels toward the roofline bound does to it — every choice scored without the
held-out GPU's labels.

For each kernel configuration (``--configs``, names of ``spec_neusight.CONFIGS``), the kernel
MLPs are fitted on every set of three and four of NeuSight's five NVIDIA GPUs (15 fits, cached
and resumable in ``spec_neusight``'s ``--cache``), and every labelled end-to-end run of each GPU
outside the set is predicted kernel by kernel.  A kernel's prediction is
``t_mlp ** w * t_phys ** (1 - w)`` with ``t_phys = t_roof + floor`` (the roofline bound plus the
family's launch floor on the training GPUs, ``perfseer.specmodel.net.launch_floor_us``): ``w = 1``
is the MLP, ``w = 0`` the physics estimate.  Printed:

1. **GEMM breakdown** (four-GPU models): per held-out GPU, linear layers and attention's batched
   matmuls, their achieved share of the FP32 peak in the traces, the predicted and the roofline
   error (what carries the error, and how efficient each GPU is);
2. **jackknife spread**: the four three-GPU models inside each four-GPU training set, their
   disagreement on the held-out GPU (a label-free signal) against the four-GPU model's error;
3. **out-of-range rule** (``ood_weight``): ``w`` applied only where the held-out GPU is beyond
   the training GPUs' range (bandwidth, FP32 peak or SMs more than 1.5x outside it, the card's
   domain check), per GPU for a grid of ``w``; every (training set, out-of-range GPU) pair of the
   three- and four-GPU fits; and ``w`` chosen by nested leave-one-GPU-out;
4. **uniform shrink**: ``w`` applied on every GPU (what V100 would need), per GPU, and nested;
5. with several configurations, each one's leave-one-GPU-out score and the nested choice among
   them (inner: trained on three of the four training GPUs, scored on the fourth).

    python benchmarks/spec_shrink.py --data ../shared/datasets/neusight --configs full
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import spec_neusight as sn  # noqa: E402

GRID = (1.0, 0.9, 0.8, 0.75, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.0)
V100 = "v100-pcie-32gb"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[1] / ".." / "shared" / "datasets" / "neusight"))
    ap.add_argument("--configs", default="full", help=f"comma-separated, of: {', '.join(sn.CONFIGS)}")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--max-rows", type=int, default=8000)
    ap.add_argument("--cache", default="benchmarks/results/spec_neusight_cache")
    args = ap.parse_args(argv)
    configs = args.configs.split(",")
    bad = [c for c in configs if c not in sn.CONFIGS]
    if bad:
        ap.error(f"unknown configuration(s) {bad}; choose from {', '.join(sn.CONFIGS)}")

    from perfseer.specmodel import neusight as ns

    kernels = ns.load_kernels(args.data)
    kernels = kernels[kernels["family"].isin(sn.FAMILIES)].reset_index(drop=True)
    kernels = (kernels.sample(frac=1.0, random_state=0).groupby(["family", "device"]).head(args.max_rows)
               .reset_index(drop=True))
    workloads = ns.load_workloads(args.data)
    fitter = sn._Fitter(kernels, workloads, args)
    preds = {c: kernel_predictions(fitter, c, workloads, args.cache) for c in configs}
    p = preds[configs[0]]
    print(f"## configuration {configs[0]}\n")
    print(gemm_table(p))
    print()
    print(jackknife_table(p))
    ood = out_of_range(p)
    print()
    print(shrink_table(p, lambda w: np.where(ood, w, 1.0), "out-of-range rule: w only where the held-out GPU is "
                                                          "beyond the training GPUs' range"))
    print()
    print(pairs_table(p, ood))
    print()
    print(shrink_table(p, lambda w: np.full(len(p), w), "uniform shrink: w on every GPU"))
    if len(configs) > 1:
        print()
        print(config_table(preds))
    return 0


# -- predictions -----------------------------------------------------------------------------------
def kernel_predictions(fitter, config: str, workloads, cache) -> pd.DataFrame:
    """One row per (training set, held-out run, kernel): ``logr`` = log10(MLP / roofline)."""
    from perfseer.devices import get_device
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel.net import KernelModel, launch_floor_us

    spec = functools.lru_cache(maxsize=None)(get_device)
    out = []
    for n in (3, 4):
        for train in itertools.combinations(sn.GPUS, n):
            fitter.fit(config, train)
            tk = fitter.kernels[fitter.kernels["device"].isin(train)]
            floor = {f: launch_floor_us(s["latency_us"]) for f, s in tk.groupby("family")}
            model, _ = KernelModel.load(Path(cache) / f"{fitter._key(config, train)}.json")
            model.config.ood_weight = 1.0  # the rule is applied below, from the specs
            for wi, w in enumerate(workloads):
                if w.device in train:
                    continue
                k = w.trace
                d = kt.device_frame([spec(w.device)] * len(k), ["fp32"] * len(k), k["family"])
                pred = model.predict(k.drop(columns=["scale", "pass", "node"]), d)
                tf, tm = kt.roofline_us(k, d)
                t_roof = np.maximum(np.maximum(tf, tm), 1e-6)
                node_fw = w.node_ms.set_index("node")["fw_ms"] if w.node_ms is not None else None
                out.append(pd.DataFrame({
                    "train": ",".join(train), "gpu": w.device, "wi": wi, "phase": w.phase, "measured_ms": w.e2e_ms,
                    "family": k["family"].to_numpy(), "pass": k["pass"].to_numpy(), "scale": k["scale"].to_numpy(),
                    "attention": (k["weights"].to_numpy() == 0) & (k["family"].to_numpy() == "gemm"),
                    "node_fw_ms": (k["node"].map(node_fw).to_numpy(float) if node_fw is not None else np.nan),
                    "troof_us": t_roof, "logr": np.log10(pred / t_roof),
                    "logr_phys": np.log10((t_roof + k["family"].map(floor).to_numpy(float)) / t_roof)}))
    return pd.concat(out, ignore_index=True)


def out_of_range(p: pd.DataFrame) -> np.ndarray:
    """Per row: is the held-out GPU beyond its training set's range (the card's domain check)?"""
    from perfseer.devices import get_device
    from perfseer.specmodel.trust import build_domain, device_reasons

    verdict = {}
    for t, g in set(zip(p["train"], p["gpu"])):
        verdict[(t, g)] = bool(device_reasons(get_device(g), build_domain([get_device(x) for x in t.split(",")])))
    return np.array([verdict[k] for k in zip(p["train"], p["gpu"])])


def end_to_end(p: pd.DataFrame, w: np.ndarray) -> pd.DataFrame:
    ms = p["troof_us"] * 10 ** (w * p["logr"] + (1 - w) * p["logr_phys"]) * p["scale"] / 1000
    g = (p.assign(ms=ms).groupby(["train", "gpu", "wi", "phase"])
         .agg(ms=("ms", "sum"), measured_ms=("measured_ms", "first")).reset_index())
    g["err"] = (g["ms"] / g["measured_ms"] - 1).abs() * 100
    return g


def _score(g: pd.DataFrame, train, gpu: str, phase: str = "infer") -> float:
    s = g[(g["train"] == ",".join(train)) & (g["gpu"] == gpu) & (g["phase"] == phase)]
    return float(s["err"].mean()) if len(s) else float("nan")


def _others(gpu, among=sn.GPUS):
    return tuple(x for x in among if x != gpu)


def _nested(G: dict) -> list:
    """For each held-out GPU, the candidate with the best mean inner score (three-GPU fits scored
    on the fourth training GPU), and its outer score."""
    out = []
    for h in sn.GPUS:
        tr = _others(h)
        inner = {c: float(np.nanmean([_score(g, _others(i, tr), i) for i in tr])) for c, g in G.items()}
        best = min(inner, key=inner.get)
        out.append((h, best, _score(G[best], tr, h), _score(G[best], tr, h, "train")))
    return out


# -- tables ----------------------------------------------------------------------------------------
def gemm_table(p: pd.DataFrame) -> str:
    q = p[(p["train"].str.count(",") == 3) & (p["family"] == "gemm") & (p["phase"] == "infer")].copy()
    q["kind"] = np.where(q["attention"], "attention bmm", "linear")
    q["meas"] = q["node_fw_ms"] * q["scale"]
    q["pred"] = q["troof_us"] * 10 ** q["logr"] * q["scale"] / 1000
    q["roof"] = q["troof_us"] * q["scale"] / 1000
    lines = ["GEMMs of the inference runs, four-GPU model (trace-measured time of each GEMM node against its kernel)", "",
             "| held-out GPU | GEMM kind | share of GEMM time % | achieved share of FP32 peak | spec model error % | "
             "roofline error % |", "| --- | --- | --- | --- | --- | --- |"]
    for g, s in q.groupby("gpu"):
        tot = s["meas"].sum()
        for kind, t in s.groupby("kind"):
            m, pr, rf = t["meas"].sum(), t["pred"].sum(), t["roof"].sum()
            lines.append(f"| {g} | {kind} | {m / tot * 100:.1f} | {rf / m:.2f} | {(pr / m - 1) * 100:+.1f} | "
                         f"{(rf / m - 1) * 100:+.1f} |")
    return "\n".join(lines)


def jackknife_table(p: pd.DataFrame) -> str:
    g = end_to_end(p, np.ones(len(p)))
    g["n"] = g["train"].str.count(",") + 1
    lines = ["| held-out GPU | four-GPU model: mean log10(predicted / measured) | spread of the four three-GPU models "
             "(std of log10 predicted) | roofline: mean log10 |", "| --- | --- | --- | --- |"]
    for h in sn.GPUS:
        s4 = g[(g["gpu"] == h) & (g["n"] == 4) & (g["phase"] == "infer")]
        s3 = g[(g["gpu"] == h) & (g["n"] == 3) & (g["phase"] == "infer")]
        spread = np.log10(s3.pivot_table(index="wi", columns="train", values="ms")).std(axis=1).mean()
        roof = p[(p["gpu"] == h) & (p["train"] == ",".join(_others(h))) & (p["phase"] == "infer")]
        r = (roof.assign(r=roof["troof_us"] * roof["scale"] / 1000).groupby("wi")
             .agg(r=("r", "sum"), m=("measured_ms", "first")))
        lines.append(f"| {h} | {np.log10(s4['ms'] / s4['measured_ms']).mean():+.3f} | {spread:.3f} | "
                     f"{np.log10(r['r'] / r['m']).mean():+.3f} |")
    return "\n".join(lines)


def shrink_table(p: pd.DataFrame, weights, title: str) -> str:
    G = {w: end_to_end(p, weights(w)) for w in GRID}
    return "\n".join([title + " (leave-one-GPU-out inference MAPE %; V100 training step)", "",
                      *_per_gpu_table(G, "w", "nested choice of w (inner leave-one-GPU-out over the four "
                                      "training GPUs): ", lambda w: f"{w:g}", "w=")])


def _per_gpu_table(G: dict, key: str, nested_title: str, label, prefix: str = "") -> list[str]:
    """Rows of per-GPU leave-one-GPU-out MAPE for each candidate of ``G`` (candidate -> end-to-end
    predictions), then the nested choice among them; ``label`` formats a candidate (after
    ``prefix`` in the nested line)."""
    lines = [f"| {key} | " + " | ".join(sn.GPUS) + " | mean of per-GPU | V100 training |",
             "| --- | " + " | ".join("---" for _ in sn.GPUS) + " | --- | --- |"]
    for c, g in G.items():
        per = [_score(g, _others(h), h) for h in sn.GPUS]
        lines.append(f"| {label(c)} | " + " | ".join(f"{v:.1f}" for v in per)
                     + f" | {np.mean(per):.1f} | {_score(g, _others(V100), V100, 'train'):.1f} |")
    res = _nested(G)
    return lines + ["", nested_title + ", ".join(f"{h} {prefix}{label(c)} -> {v:.1f}" for h, c, v, _ in res)
                    + f"; mean {np.mean([r[2] for r in res]):.1f}, V100 training {res[-1][3]:.1f}"]


def pairs_table(p: pd.DataFrame, ood: np.ndarray) -> str:
    a, b = end_to_end(p, np.ones(len(p))), end_to_end(p, np.where(ood, 0.5, 1.0))
    keys = sorted({k for k, o in zip(zip(p["train"], p["gpu"]), ood) if o})
    lines = ["every (training set, out-of-range held-out GPU) pair of the three- and four-GPU fits, inference MAPE %", "",
             "| training GPUs | held-out GPU | MLP (w = 1) | w = 0.5 |", "| --- | --- | --- | --- |"]
    e1, e5 = [], []
    for t, g in keys:
        x, y = _score(a, t.split(","), g), _score(b, t.split(","), g)
        e1.append(x)
        e5.append(y)
        lines.append(f"| {t} | {g} | {x:.1f} | {y:.1f} |")
    lines.append(f"| mean of {len(keys)} pairs | | {np.mean(e1):.1f} | {np.mean(e5):.1f} |")
    return "\n".join(lines)


def config_table(preds: dict) -> str:
    G = {c: end_to_end(p, np.ones(len(p))) for c, p in preds.items()}
    return "\n".join(_per_gpu_table(G, "configuration", "nested choice among them: ", str))


if __name__ == "__main__":
    sys.exit(main())
