"""A new device from K measurements: every calibration method on the same draws (issue 16).

For each (source predictor, target device): K models of the target device are drawn from the
training split (``random``: uniformly, one draw per seed; ``spanning``: the K-centre selection of
:func:`perfseer.training.calibrate.spanning_set`, one fixed set), each method of
:mod:`perfseer.training.calibrate` is fitted on their rows, and the calibrated predictor is scored
on the target device's test-split rows (architectures never used for calibration and, for the
bundled sources, never seen in the source's training either): MAPE, Spearman, the share of rows
inside the 90 % interval, the share flagged outside the calibration domain.

Settings:

``nb201``
    HELP's NAS-Bench-201 protocol: the source is a SeerNet-Multi trained on HELP's meta-training
    devices (``--source``, a card from ``perfseer train``; see docs/calibration.md), the
    validation devices are HELP's meta-validation ones (Titan X at batch 256, Gold 6240; they
    choose the default method) and the test devices HELP's meta-test ones (Titan RTX at batch
    256, Gold 6226, Pixel 2, Raspberry Pi 4, Eyeriss ASIC, FPGA), scored on ``--test-archs``
    test-split architectures.
``timm``
    bundled source predictors: RTX 3090 -> RTX 4090 and RTX 4090 -> RTX Pro 6000 (test), and
    RTX 3090 -> RTX 5090 (validation).

The ``meta`` method's head is meta-learned (Reptile) over the source devices other than the
target's GPU, on the source trunk's embeddings of their training-split graphs.

Example::

    python benchmarks/calibration.py --setting timm --k 10,20,50 --draws 3 --json out.json
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402

HELP_VAL = ("titanx@256", "gold_6240")
HELP_TEST = ("titan_rtx@256", "gold_6226", "pixel2", "raspi4", "eyeriss", "fpga")
# HELP (Lee et al. 2021), Table 2, NAS-Bench-201, 10 samples of the new device: Spearman
HELP_PUBLISHED = {"titan_rtx@256": 0.987, "gold_6226": 0.989, "pixel2": 0.802, "raspi4": 0.890,
                  "eyeriss": 0.940, "fpga": 0.985}
TIMM_PAIRS = (("rtx3090-amp-nchw-pt240.infer", "rtx5090/amp-nchw-pt291", "val"),
              ("rtx3090-amp-nchw-pt240.infer", "rtx4090/amp-nchw-pt291", "test"),
              ("rtx4090-amp-nchw-pt291.infer", "rtxpro6000maxq/amp-nchw-pt291", "test"))


def _hash(s: str) -> str:
    return hashlib.sha256(f"perfseer-calib-v1:{s}".encode()).hexdigest()


def _target_rows(labels, device: str, phase: str = "infer"):
    dev, _, batch = device.partition("@")
    rows = labels[(labels["device"].astype(str) == dev) & (labels["phase"].astype(str) == phase)
                  & labels["latency_ms"].notna() & (labels["latency_ms"] > 0)]
    if batch:
        rows = rows[rows["batch_size"] == int(batch)]
    return rows.reset_index(drop=True)


def _meta_tasks(src, ds, devices, embed_cache):
    """``[(emb, logy)]`` of each source device on its training-split rows."""
    import torch

    from perfseer.training import calibrate as C

    tasks = []
    for dev in devices:
        rows = _target_rows(ds.labels, dev)
        rows = rows[rows["split"].astype(str) == "train"]
        if len(rows) < 20:
            continue
        gi = rows["graph"].to_numpy()
        need = [int(g) for g in np.unique(gi) if int(g) not in embed_cache]
        if need:
            emb = C.embed(src.net, [ds.graphs[g] for g in need])
            embed_cache.update({g: emb[i] for i, g in enumerate(need)})
        tasks.append((torch.stack([embed_cache[int(g)] for g in gi]), np.log(rows["latency_ms"].to_numpy())))
    return tasks


def run_pair(src_ref, src, ds, target, role, args, console, meta_devices, embed_cache):
    import torch

    from perfseer.predictor import Target
    from perfseer.training import calibrate as C
    from perfseer.training.metrics import evaluate

    rows = _target_rows(ds.labels, target)
    pool = rows[rows["split"].astype(str) == "train"]
    test = rows[rows["split"].astype(str) == "test"]
    if args.test_archs:
        keep = sorted(test["model"].astype(str).unique(), key=_hash)[:args.test_archs]
        test = test[test["model"].astype(str).isin(keep)]
    test = test.reset_index(drop=True)
    tg = [ds.graphs[int(g)] for g in test["graph"]]
    y = test["latency_ms"].to_numpy()
    cols = [i for i, t in enumerate(src.targets) if t.metric == "latency_ms"]
    t0 = time.perf_counter()
    logp = np.log(np.maximum(src.predict_graphs(tg)[:, cols], 1e-12))
    glob = C.global_design(tg)
    neural = getattr(getattr(src.net, "model", None), "name", "") in ("seernet", "seernet-multi")
    emb = C.embed(src.net, tg) if neural else None
    tb.log(console, f"{target}: {len(test)} test rows, {len(pool)} candidates, cached in {time.perf_counter() - t0:.0f} s")
    meta_head = None
    if "meta" in args.methods and neural:
        t0 = time.perf_counter()
        tasks = _meta_tasks(src, ds, [d for d in meta_devices if d.split("/")[0] != target.split("/")[0]], embed_cache)
        _, heads = C._parts(src.net)
        meta_head = C.meta_init(heads[0], tasks, k=10, iterations=args.meta_iterations, seed=0)
        tb.log(console, f"  meta-init over {len(tasks)} source devices in {time.perf_counter() - t0:.0f} s")

    # the candidates' graphs, one per model (the spanning set is chosen on batch-free features)
    cand_models = np.array(sorted(pool["model"].astype(str).unique(), key=_hash))
    first = pool.drop_duplicates("model").set_index("model")
    cand_glob = C.global_design([ds.graphs[int(first.at[m, "graph"])] for m in cand_models])
    out = []
    for k in args.k:
        draws = []
        if "random" in args.selection:
            for d in range(args.draws):
                rng = np.random.default_rng(1000 * k + d)
                draws.append(("random", d, list(rng.choice(cand_models, size=min(k, len(cand_models)), replace=False))))
        if "spanning" in args.selection:
            draws.append(("spanning", 0, [cand_models[i] for i in C.spanning_set(cand_glob, k)]))
        for sel_name, d, models in draws:
            cal_rows = pool[pool["model"].astype(str).isin(models)]
            cg = [ds.graphs[int(g)] for g in cal_rows["graph"]]
            for method in args.methods:
                if method in ("head", "full", "meta") and not neural:
                    continue
                if method == "full" and d >= args.full_draws:
                    continue
                cfg = C.CalibrationConfig(method=method, coverage=args.coverage, seed=d)
                t0 = time.perf_counter()
                cal = C.calibrate(src, cg, cal_rows["latency_ms"].to_numpy(), cal_rows["model"].astype(str).tolist(),
                                  config=cfg, meta_head=meta_head)
                fit_s = time.perf_counter() - t0
                if method == "loglinear":
                    pred = np.exp(cal.correction.predict_log(logp, glob))
                elif method in ("head", "meta"):
                    ts = cal.net.target_scaler
                    with torch.no_grad():
                        z = cal.net.model.head(emb).reshape(-1).double().numpy()
                    pred = np.exp(z * ts.std_[0] + ts.mean_[0])
                else:
                    pred = cal.predict(tg)
                f = cal.interval["factor"]
                inside = (y >= pred / f) & (y <= pred * f)
                in_dom = np.array([not r for r in C.domain_check(cal.domain, tg)])
                e = evaluate(y, pred)
                out.append({"source": src_ref, "target": target, "role": role, "k": k, "selection": sel_name, "draw": d,
                            "method": method, "rows": len(cal_rows), "mape": e["mape"], "spearman": e["spearman"],
                            "coverage": float(inside.mean()), "factor": f, "basis": cal.interval["basis"],
                            "in_domain": float(in_dom.mean()),
                            "coverage_in_domain": float(inside[in_dom].mean()) if in_dom.any() else None,
                            "coverage_out_domain": float(inside[~in_dom].mean()) if (~in_dom).any() else None,
                            "loo_mape": float(np.mean(np.abs(np.exp(-cal.residuals) - 1)) * 100),
                            "fit_s": round(fit_s, 2)})
                r = out[-1]
                tb.log(console, f"  K={k} {sel_name}#{d} {method}: MAPE {r['mape']:.2f} rho {r['spearman']:.3f} "
                                f"cover {r['coverage']:.2f} x{f:.2f} in-dom {r['in_domain']:.2f} ({fit_s:.1f} s)")
    return out


def summarise(results, console) -> None:
    import pandas as pd

    df = pd.DataFrame(results)
    if df.empty:
        return
    g = df.groupby(["role", "source", "target", "selection", "k", "method"])
    s = g.agg(mape=("mape", "mean"), mape_sd=("mape", "std"), spearman=("spearman", "mean"),
              coverage=("coverage", "mean"), factor=("factor", "mean"), in_domain=("in_domain", "mean"),
              draws=("draw", "count"), fit_s=("fit_s", "mean")).reset_index()
    console.print(s.to_string(index=False, float_format=lambda v: f"{v:.3f}"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", choices=("nb201", "timm"), required=True)
    ap.add_argument("--source", default=None, help="nb201: the source card (perfseer train ... --out)")
    ap.add_argument("--targets", default=None, help="comma-separated target devices (default: the setting's)")
    ap.add_argument("--k", type=lambda t: [int(v) for v in t.split(",")], default=[10])
    ap.add_argument("--draws", type=tb.positive(int), default=3, help="random draws per K")
    ap.add_argument("--full-draws", type=int, default=1, help="draws that also run the (slow) full fine-tuning")
    ap.add_argument("--selection", default="random,spanning")
    ap.add_argument("--methods", default="loglinear,head,full,meta")
    ap.add_argument("--coverage", type=float, default=0.9)
    ap.add_argument("--test-archs", type=int, default=0, help="score on at most N test architectures (0: all)")
    ap.add_argument("--meta-iterations", type=tb.positive(int), default=1000)
    ap.add_argument("--threads", type=tb.positive(int), default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    args.methods = tb.parse_list(args.methods)
    args.selection = tb.parse_list(args.selection)
    tb.set_threads(args.threads)
    from rich.console import Console

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.predictor import load_predictor

    console = Console(stderr=True)
    results = []
    start = time.perf_counter()
    if args.setting == "nb201":
        if not args.source:
            ap.error("--setting nb201 needs --source CARD")
        ds = load_dataset(resolve_dataset("nb201"))
        src = load_predictor(args.source)
        targets = ([(t, "test") for t in tb.parse_list(args.targets)] if args.targets
                   else [(t, "val") for t in HELP_VAL] + [(t, "test") for t in HELP_TEST])
        # HELP's meta-training tasks: each source device at each of its batch sizes
        meta_devices = [f"{d}@{b}" for d in dict.fromkeys(t.device for t in src.targets)
                        for b in sorted(ds.labels.loc[ds.labels["device"].astype(str) == d, "batch_size"].unique())]
        cache: dict = {}
        for target, role in targets:
            results += run_pair(args.source, src, ds, target, role, args, console, meta_devices, cache)
    else:
        ds = load_dataset(resolve_dataset("timm"))
        infer = sorted(ds.labels.loc[ds.labels["phase"].astype(str) == "infer", "device"].astype(str).unique())
        pairs = TIMM_PAIRS if not args.targets else [p for p in TIMM_PAIRS if p[1] in tb.parse_list(args.targets)]
        for src_ref, target, role in pairs:
            src = load_predictor(src_ref)
            results += run_pair(src_ref, src, ds, target, role, args, console, infer, {})
    summarise(results, console)
    tb.write_json(args.json, {"benchmark": "calibration", "args": vars(args), "environment": tb.environment(),
                              "wall_s": round(time.perf_counter() - start, 1), "results": results})
    return 0


if __name__ == "__main__":
    tb.run_main(main)
