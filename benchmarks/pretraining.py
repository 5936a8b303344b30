"""Graph auto-encoder pre-training (TraPPM) against none, at 50 / 200 / all labelled timm models.

Two steps:

``pretrain``
    pre-trains SeerNet's trunk (:mod:`perfseer.models.gae`) on unlabelled PerfGraphs — one graph
    per timm/torchvision ``(model, resolution)`` of the committed timm dataset, plus NAS-Bench-201,
    FBNet and model-space graphs (``--nas N`` of each, hash-chosen) — and writes the card.  No
    label is read.
``finetune``
    trains SeerNet on RTX 3090 inference (``timm``, split by architecture) from the pre-trained
    trunk and from scratch, on N training models (``--sizes``, a seeded random subset; ``all``:
    the whole training split), same seeds, same budget; test MAPE and Spearman.

Example::

    python benchmarks/pretraining.py pretrain --out benchmarks/results/pretrain --epochs 20 --time-limit 0
    python benchmarks/pretraining.py finetune --card benchmarks/results/pretrain/gae-timm-nas.json \\
        --sizes 50,200,all --seeds 0,1,2 --epochs 300 --patience 20 --time-limit 0 --json out.json --resume
    python benchmarks/pretraining.py report out.json     # the tables of docs/calibration.md

``--time-limit 0`` is no time limit: runs end by ``--epochs`` or early stopping (``--patience``);
``--resume`` keeps the runs already in ``--json`` (each is written as it finishes) and runs the rest.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402

DEVICE = "rtx3090/amp-nchw-pt240"


def nonnegative(text: str) -> float:
    v = float(text)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return v


def unlabelled(nas: int) -> tuple[list, dict]:
    from perfseer.data.dataset import load_dataset, resolve_dataset

    graphs, counts = [], {}
    for name, per in (("timm", None), ("nb201", nas), ("fbnet", nas), ("cpu", nas)):
        ds = load_dataset(resolve_dataset(name))
        first = ds.labels.drop_duplicates(["model", "input_shape"])
        if per is not None:
            keep = sorted(first["model"].astype(str), key=lambda m: tb.stable_key(m))[:per]
            first = first[first["model"].astype(str).isin(set(keep))]
        idx = sorted({int(g) for g in first["graph"]})
        graphs += [ds.graphs[i] for i in idx]
        counts[name] = len(idx)
    return graphs, counts


def cmd_pretrain(args, console) -> None:
    from perfseer.fit.pretrain import PretrainConfig, pretrain, save_pretrained

    graphs, counts = unlabelled(args.nas)
    tb.log(console, f"pre-training on {len(graphs)} unlabelled graphs {counts}")
    cfg = PretrainConfig(epochs=args.epochs, time_limit_s=args.time_limit or None, seed=args.seed)
    gae, fs, hist = pretrain(graphs, {"hidden_dim": args.hidden, "head_hidden_dim": args.hidden}, cfg,
                             progress=lambda h: tb.log(console, str(h)))
    path = save_pretrained(args.out, args.name, gae, fs, {"graphs": counts, "labels_read": False}, hist, cfg)
    tb.log(console, f"wrote {path}")


def cmd_finetune(args, console) -> list[dict]:
    import torch

    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.models.registry import build_model
    from perfseer.fit.data import select
    from perfseer.fit.metrics import evaluate
    from perfseer.fit.pretrain import init_from_pretrained
    from perfseer.fit.trainer import TrainConfig, train

    sel = select(load_dataset(resolve_dataset("timm")), "latency_ms", DEVICE, "infer", "split")
    models = sel.labels["model"].astype(str).to_numpy()
    train_models = sorted({models[int(g.row)] for g in sel.train})
    y_test = np.array([float(g.y[0, 0]) for g in sel.test])
    # epoch selection on --val-models hash-chosen validation models: every epoch scores it, and on a
    # shared 2-core CPU the full 286-graph split cost more than the training steps of 50 models
    val_keep = set(sorted({models[int(g.row)] for g in sel.val}, key=tb.stable_key)[:args.val_models])
    val = [g for g in sel.val if models[int(g.row)] in val_keep]
    out = []
    done = {}
    if args.resume and args.json and Path(args.json).exists():  # (size, seed, init) runs already written
        import json

        out = json.loads(Path(args.json).read_text())["results"]
        done = {(r["size"], r["seed"], r["init"]) for r in out}
        tb.log(console, f"resuming: {len(done)} runs already in {args.json}")
    for size in args.sizes:
        for seed in args.seeds:
            n = len(train_models) if size == "all" else int(size)
            keep = set(np.random.default_rng(seed).choice(train_models, size=min(n, len(train_models)), replace=False))
            tr = [g for g in sel.train if models[int(g.row)] in keep]
            for init in args.inits:
                if (size, seed, init) in done:
                    continue
                torch.manual_seed(seed)
                model = build_model("seernet", num_targets=1, hidden_dim=args.hidden, head_hidden_dim=args.hidden)
                fs = init_from_pretrained(model, args.card) if init == "gae" else None
                cfg = TrainConfig(max_epochs=args.epochs, time_limit_s=args.time_limit or None, seed=seed,
                                  early_stopping_patience=args.patience, num_threads=1, progress=False)
                t0 = time.perf_counter()
                res = train(model, tr, val, cfg, targets=["latency_ms"], feature_scaler=fs)
                e = evaluate(y_test, res.predict(sel.test)[:, 0])
                v = res.metrics["val"]["latency_ms"]
                out.append({"size": size, "train_models": len(keep), "seed": seed, "init": init, "test_mape": e["mape"],
                            "test_spearman": e["spearman"], "val_mape": v["mape"], "epochs": res.epochs_run,
                            "best_epoch": res.best_epoch, "stopped": res.stopped,
                            "fit_s": round(time.perf_counter() - t0, 1)})
                tb.log(console, str(out[-1]))
                tb.write_json(args.json, {"benchmark": "pretraining", "partial": True, "args": vars(args),
                                          "results": out})  # kept if the run is cut short
    return out


def summary(results: list[dict]) -> str:
    """Markdown: test MAPE (mean ± sd over seeds) and Spearman per size and start."""
    import pandas as pd

    df = pd.DataFrame(results)
    rows = ["| labelled models | start | seeds | test MAPE % | Spearman | validation MAPE % | epochs run | best epoch "
            "| stopped by |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (size, init), g in df.groupby(["size", "init"], sort=False):
        sd = f" ± {g['test_mape'].std():.2f}" if len(g) > 1 else ""
        vsd = f" ± {g['val_mape'].std():.2f}" if len(g) > 1 else ""
        stops = ", ".join(f"{k} {v}" for k, v in g["stopped"].value_counts().items())
        rows.append(f"| {size} ({int(g['train_models'].iloc[0])}) | {init} | {len(g)} | {g['test_mape'].mean():.2f}{sd} | "
                    f"{g['test_spearman'].mean():.3f} | {g['val_mape'].mean():.2f}{vsd} | "
                    f"{int(g['epochs'].min())}-{int(g['epochs'].max())} | "
                    f"{int(g['best_epoch'].min())}-{int(g['best_epoch'].max())} | {stops} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 2 and sys.argv[1] == "report":
        import json

        print(summary(json.loads(Path(sys.argv[2]).read_text())["results"]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="step", required=True)
    p = sub.add_parser("pretrain")
    p.add_argument("--out", required=True)
    p.add_argument("--name", default="gae-timm-nas")
    p.add_argument("--nas", type=int, default=500, help="graphs of each of NAS-Bench-201, FBNet and the model space")
    p.add_argument("--hidden", type=tb.positive(int), default=64)
    p.add_argument("--epochs", type=tb.positive(int), default=50)
    p.add_argument("--time-limit", type=nonnegative, default=420, help="seconds (0: none, --epochs ends it)")
    p.add_argument("--seed", type=int, default=0)
    f = sub.add_parser("finetune")
    f.add_argument("--card", required=True)
    f.add_argument("--sizes", default="50,200,all")
    f.add_argument("--seeds", default="0,1,2")
    f.add_argument("--inits", default="none,gae")
    f.add_argument("--hidden", type=tb.positive(int), default=64)
    f.add_argument("--epochs", type=tb.positive(int), default=300)
    f.add_argument("--time-limit", type=nonnegative, default=120,
                   help="seconds per run (0: none; --epochs and --patience end it)")
    f.add_argument("--patience", type=tb.positive(int), default=20,
                   help="early stopping after this many epochs without a better validation loss")
    f.add_argument("--resume", action="store_true",
                   help="keep the runs already in --json and run only the missing (size, seed, start)")
    f.add_argument("--val-models", type=tb.positive(int), default=100)
    f.add_argument("--json", default=None)
    for q in (p, f):
        q.add_argument("--threads", type=tb.positive(int), default=1)
    args = ap.parse_args(argv)
    tb.set_threads(args.threads)
    from rich.console import Console

    console = Console(stderr=True)
    start = time.perf_counter()
    if args.step == "pretrain":
        cmd_pretrain(args, console)
        return 0
    args.sizes = tb.parse_list(args.sizes)
    args.seeds = [int(s) for s in tb.parse_list(args.seeds)]
    args.inits = tb.parse_list(args.inits)
    results = cmd_finetune(args, console)
    import pandas as pd

    df = pd.DataFrame(results)
    s = df.groupby(["size", "init"]).agg(test_mape=("test_mape", "mean"), sd=("test_mape", "std"),
                                          spearman=("test_spearman", "mean"), val_mape=("val_mape", "mean"),
                                          seeds=("seed", "count")).reset_index()
    console.print(s.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    tb.write_json(args.json, {"benchmark": "pretraining", "args": vars(args), "environment": tb.environment(),
                              "wall_s": round(time.perf_counter() - start, 1), "results": results})
    return 0


if __name__ == "__main__":
    tb.run_main(main)
