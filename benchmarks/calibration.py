"""A new device from K measurements: every calibration method on the same draws (issue 16).

For each (source predictor, target device): K models of the target device are drawn from the
training split (``random``: uniformly, one draw per seed; ``spanning``: the K-centre selection of
:func:`perfseer.fit.calibrate.spanning_set`, one fixed set), each method of
:mod:`perfseer.fit.calibrate` is fitted on their rows, and the calibrated predictor is scored
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
    python benchmarks/calibration.py report out.json       # the markdown tables of docs/calibration.md
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


def _meta_tasks(src, ds, devices, embed_cache, task_models: int = 500):
    """``[(emb, logy)]`` of each source device on the rows of ``task_models`` training-split models."""
    import torch

    from perfseer.fit import calibrate as C

    tasks = []
    for dev in devices:
        rows = _target_rows(ds.labels, dev)
        rows = rows[rows["split"].astype(str) == "train"]
        keep = set(sorted(rows["model"].astype(str).unique(), key=_hash)[:task_models])
        rows = rows[rows["model"].astype(str).isin(keep)]  # the same hash-chosen models for every device
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

    from perfseer.fit import calibrate as C
    from perfseer.fit.metrics import evaluate

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
    neural = getattr(getattr(src.net, "model", None), "name", "") in ("seernet", "seernet-multi")

    def embed_rows(df):
        """Trunk embeddings of the rows' graphs, each graph embedded once per run (shared cache)."""
        gi = [int(g) for g in df["graph"]]
        need = sorted({g for g in gi if g not in embed_cache})
        if need:
            e = C.embed(src.net, [ds.graphs[g] for g in need])
            embed_cache.update({g: e[i] for i, g in enumerate(need)})
        return torch.stack([embed_cache[g] for g in gi])

    emb = embed_rows(test) if neural else None
    outputs = C.heads_output(src.net, emb) if neural else src.predict_graphs(tg)
    logp = np.log(np.maximum(outputs[:, cols], 1e-12))
    glob = C.global_design(tg)
    tb.log(console, f"{target}: {len(test)} test rows, {len(pool)} candidates, cached in {time.perf_counter() - t0:.0f} s")
    meta_head = None
    if "meta" in args.methods and neural:
        t0 = time.perf_counter()
        devs = tuple(d for d in meta_devices if d.split("/")[0] != target.split("/")[0])
        key = ("meta", devs)
        if key not in embed_cache:  # the same source devices: the same meta-learned head
            tasks = _meta_tasks(src, ds, list(devs), embed_cache)
            _, heads = C._parts(src.net)
            embed_cache[key] = (C.meta_init(heads[0], tasks, k=10, iterations=args.meta_iterations, seed=0), len(tasks))
        meta_head, n_tasks = embed_cache[key]
        tb.log(console, f"  meta-init over {n_tasks} source devices in {time.perf_counter() - t0:.0f} s")

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
            cemb = embed_rows(cal_rows) if neural else None
            cout = C.heads_output(src.net, cemb) if neural else None
            for method in args.methods:
                if method in ("head", "full", "meta") and not neural:
                    continue
                if method == "full" and (d >= args.full_draws or k > args.full_max_k or sel_name != "random"):
                    continue  # whole-network refits: the costliest method, run on fewer draws
                cfg = C.CalibrationConfig(method=method, coverage=args.coverage, seed=d,
                                          selection="spanning" if sel_name == "spanning" else "random")
                t0 = time.perf_counter()
                cal = C.calibrate(src, cg, cal_rows["latency_ms"].to_numpy(), cal_rows["model"].astype(str).tolist(),
                                  config=cfg, meta_head=meta_head, source_outputs=cout, embeddings=cemb)
                fit_s = time.perf_counter() - t0
                if method == "loglinear":
                    e = emb.double().numpy() if cal.correction.embedding else None
                    pred = np.exp(cal.correction.predict_log(logp, glob, e))
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


HELP_META_TRAIN = ("1080ti", "silver_4114", "silver_4210r", "samsung_a50", "pixel3", "essential_ph_1", "samsung_s7")


def train_source(args, console) -> None:
    """The NAS-Bench-201 source: SeerNet-Multi with one head per HELP meta-training device, trained
    on the graphs of ``--source-archs`` training architectures at batch 1, 32 and 256 (the 1080 Ti
    was measured at all three, HELP's ``1080ti_1/32/256``; the CPUs and phones at batch 1 only).  A
    graph's missing targets are left out of the loss (masked MSE on standardised log targets),
    which ``perfseer train`` cannot do; validation on as many validation architectures picks the
    epoch.  Written as an ordinary predictor card."""
    import math

    import torch
    from torch_geometric.data import Batch

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.models.registry import build_model
    from perfseer.runtime.predictor import Predictor, Target
    from perfseer.runtime.scaling import FeatureScaler, TargetScaler
    from perfseer.runtime.net import NeuralPredictor, _model_input

    ds = load_dataset(resolve_dataset("nb201"))
    L = ds.labels
    L = L[L["device"].astype(str).isin(HELP_META_TRAIN) & (L["phase"].astype(str) == "infer")]
    Y = L.pivot_table(index="graph", columns="device", values="latency_ms", aggfunc="first")[list(HELP_META_TRAIN)]
    meta = L.drop_duplicates("graph").set_index("graph")[["model", "split"]]
    Y = Y.join(meta)

    def part(split, n):
        m = sorted(Y.loc[Y["split"].astype(str) == split, "model"].astype(str).unique(), key=_hash)[:n]
        return Y[Y["model"].astype(str).isin(set(m))]

    tr, va = part("train", args.source_archs), part("val", args.source_archs // 2)
    graphs_tr = [ds.graphs[int(g)] for g in tr.index]
    fs = FeatureScaler().fit(graphs_tr)
    logy = np.log(tr[list(HELP_META_TRAIN)].to_numpy(dtype=float))
    mean, std = np.nanmean(logy, 0), np.nanstd(logy, 0)
    ts = TargetScaler(["latency_ms"] * len(HELP_META_TRAIN))
    ts.mean_, ts.std_ = mean, std

    def prep(df):
        z = (np.log(df[list(HELP_META_TRAIN)].to_numpy(dtype=float)) - mean) / std
        return [_model_input(fs.transform(ds.graphs[int(g)]), torch.tensor(z[i:i + 1], dtype=torch.float32))
                for i, g in enumerate(df.index)]

    dtr, dva = prep(tr), prep(va)
    torch.manual_seed(0)
    model = build_model("seernet-multi", num_targets=len(HELP_META_TRAIN), hidden_dim=64, head_hidden_dim=64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=5, min_lr=1e-6)

    def masked(pred, y):
        ok = torch.isfinite(y)
        return ((torch.where(ok, pred - y, torch.zeros_like(y)) ** 2).sum(0) / ok.sum(0).clamp(min=1)).mean()

    best, best_state, start, gen, epoch, bad = math.inf, None, time.perf_counter(), torch.Generator().manual_seed(0), 0, 0
    while epoch < args.source_epochs and time.perf_counter() - start < args.source_time_limit and bad < 20:
        model.train()
        for idx in torch.randperm(len(dtr), generator=gen).split(32):
            b = Batch.from_data_list([dtr[i] for i in idx.tolist()])
            loss = masked(model(b), b.y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            v = float(np.mean([float(masked(model(bb := Batch.from_data_list(dva[i:i + 128])), bb.y))
                               for i in range(0, len(dva), 128)]))
        sched.step(v)
        epoch += 1
        if v < best:
            best, bad, best_state = v, 0, {k: t.detach().clone() for k, t in model.state_dict().items()}
        else:
            bad += 1
        tb.log(console, f"source epoch {epoch}: val {v:.4f} (best {best:.4f})")
    model.load_state_dict(best_state)
    model.eval()
    net = NeuralPredictor(model, fs, ts)
    seen = {OP_VOCAB[int(i)] for g in graphs_tr for i in g.op_type.unique().tolist()}
    targets = [Target("latency_ms", d, "infer") for d in HELP_META_TRAIN]
    va_pred = net.predict([ds.graphs[int(g)] for g in va.index])
    scores = {}
    for j, t in enumerate(targets):
        yv = va[HELP_META_TRAIN[j]].to_numpy(dtype=float)
        ok = np.isfinite(yv)
        from perfseer.fit.metrics import evaluate
        scores[t.key] = evaluate(yv[ok], va_pred[ok, j])
    training = {"dataset": "datasets/nb201", "devices": list(HELP_META_TRAIN), "batch_sizes": [1, 256],
                "rows": {"train": len(dtr), "val": len(dva)}, "archs": {"train": args.source_archs, "val": args.source_archs // 2},
                "loss": "masked MSE on standardised log targets", "epochs_run": epoch, "best_val_loss": best,
                "wall_time_s": round(time.perf_counter() - start, 1), "built_by": "benchmarks/calibration.py --train-source"}
    pred = Predictor.from_training("nb201-help-meta-train.infer", "seernet-multi", net, targets, seen, training, {"val": scores})
    tb.log(console, f"wrote {pred.save(Path(args.source).parent)}")


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


def report(paths: list[str]) -> str:
    """Markdown tables (docs/calibration.md) from the JSON files of earlier runs."""
    import json

    import pandas as pd

    df = pd.concat([pd.DataFrame(json.loads(Path(p).read_text())["results"]) for p in paths], ignore_index=True)
    out = []
    # 1. the default method, chosen on the validation devices only (random draws, mean MAPE)
    val = df[(df["role"] == "val") & (df["selection"] == "random")]
    if not val.empty:
        v = val.groupby(["target", "method"])["mape"].mean().unstack()
        out.append("Validation devices, random draws, mean MAPE % (chooses the default):\n")
        out.append(_md(v.reset_index(), "target"))
        full = v.dropna(axis=1)  # a method not run on every validation device is not ranked
        out.append(f"\nmean over the validation devices (methods run on all of them): " + ", ".join(
            f"{m} {x:.2f}" for m, x in full.mean().sort_values().items()) + "; lowest per device: " + ", ".join(
            f"{t} {r.idxmin()}" for t, r in v.iterrows()) + "\n")
    test = df[df["role"] == "test"]
    for sel in ("random", "spanning"):
        t = test[test["selection"] == sel]
        if t.empty:
            continue
        g = t.groupby(["target", "k", "method"]).agg(mape=("mape", "mean"), rho=("spearman", "mean"),
                                                      cover=("coverage", "mean"), n=("draw", "count"))
        g["cell"] = [f"{a:.2f} / {b:.3f}" for a, b in zip(g["mape"], g["rho"])]
        w = g["cell"].unstack("method").fillna("—").reset_index()
        if "titan_rtx@256" in set(t["target"]):
            w["HELP Spearman"] = w["target"].map(HELP_PUBLISHED).map(lambda x: f"{x:.3f}" if x == x else "")
        out.append(f"\nTest devices, {sel} calibration models, MAPE % / Spearman (mean of "
                   f"{int(g['n'].max())} draw(s)):\n")
        out.append(_md(w, "target"))
        mean = t.groupby(["k", "method"]).agg(mape=("mape", "mean"), rho=("spearman", "mean"),
                                               cover=("coverage", "mean"), factor=("factor", "mean"),
                                               in_domain=("in_domain", "mean")).reset_index()
        out.append(f"\nMean over the test devices ({sel}): MAPE %, Spearman, 90 % interval coverage, "
                   f"interval factor, share of test rows in the calibration domain:\n")
        out.append(_md(mean, "k"))
    return "\n".join(out)


def _md(df, first) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + " --- |" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "report":
        print(report(sys.argv[2:]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", choices=("nb201", "timm"), required=True)
    ap.add_argument("--source", default=None, help="nb201: the source card (perfseer train ... --out)")
    ap.add_argument("--source-dir", default=None,
                    help="timm: read each source card as DIR/NAME.json instead of the bundled NAME (e.g. the "
                         "train-only cards of docs/calibration.md); a card fitted on the test split is refused")
    ap.add_argument("--targets", default=None, help="comma-separated target devices (default: the setting's)")
    ap.add_argument("--k", type=lambda t: [int(v) for v in t.split(",")], default=[10])
    ap.add_argument("--draws", type=tb.positive(int), default=3, help="random draws per K")
    ap.add_argument("--full-draws", type=int, default=1, help="draws that also run the (slow) full fine-tuning")
    ap.add_argument("--full-max-k", type=int, default=50, help="run full fine-tuning only up to this K")
    ap.add_argument("--selection", default="random,spanning")
    ap.add_argument("--methods", default="loglinear,head,full,meta")
    ap.add_argument("--coverage", type=float, default=0.9)
    ap.add_argument("--test-archs", type=int, default=0, help="score on at most N test architectures (0: all)")
    ap.add_argument("--meta-iterations", type=tb.positive(int), default=1000)
    ap.add_argument("--threads", type=tb.positive(int), default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--train-source", action="store_true",
                    help="nb201: first train the source (HELP's meta-training devices) and write it as --source")
    ap.add_argument("--source-archs", type=tb.positive(int), default=600)
    ap.add_argument("--source-epochs", type=tb.positive(int), default=300)
    ap.add_argument("--source-time-limit", type=tb.positive(float), default=600)
    args = ap.parse_args(argv)
    args.methods = tb.parse_list(args.methods)
    args.selection = tb.parse_list(args.selection)
    tb.set_threads(args.threads)
    from rich.console import Console

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.runtime.predictor import load_predictor

    console = Console(stderr=True)
    results = []
    start = time.perf_counter()
    if args.setting == "nb201":
        if not args.source:
            ap.error("--setting nb201 needs --source CARD")
        if args.train_source:
            train_source(args, console)
            if args.k == [0]:
                return 0
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
        caches: dict = {}
        for src_ref, target, role in pairs:
            if args.source_dir:
                src_ref = str(Path(args.source_dir) / f"{src_ref}.json")
            src = load_predictor(src_ref)
            fit = (src.card.get("training") or {}).get("fit_splits") or []
            if "test" in fit:  # one split per model across devices: the target's test models would not be new
                raise SystemExit(f"source {src_ref} was trained on the test split too (fit_splits {fit}); "
                                 "pass --source-dir with train-only cards (docs/calibration.md)")
            results += run_pair(src_ref, src, ds, target, role, args, console, infer, caches.setdefault(src_ref, {}))
    summarise(results, console)
    tb.write_json(args.json, {"benchmark": "calibration", "args": vars(args), "environment": tb.environment(),
                              "wall_s": round(time.perf_counter() - start, 1), "results": results})
    return 0


if __name__ == "__main__":
    tb.run_main(main)
