"""Learned GPU memory on held-out families: what to predict, with what, against ONNX liveness.

On ``datasets/memory_sim`` (simulator labels, ``scripts/memory_labels.py`` then
``scripts/build_memory_dataset.py``), split by family (``family_split``: every model of a test
family is unseen in training), per phase:

- ``seernet-extra``: SeerNet-Multi predicts the peak minus the exactly computable persistent bytes
  (``*_extra_mb`` targets), the persistent bytes are added back (:mod:`perfseer.memory.learned`);
- ``seernet-total``: SeerNet-Multi predicts the peaks themselves (``*_mb``);
- ``gbm-extra`` / ``gbm-total``: LightGBM on the 20 global features (:mod:`perfseer.models.gbm`);
- ``onnx-liveness`` (inference): the ONNX graph's liveness analysis replayed through the same
  allocator model (:mod:`perfseer.memory.onnx_liveness`), one export per test model;
- ``activation-sum``: ``log(rest) = a + b log(sum of the graph's node output bytes)`` fitted on
  the training families (one feature, the obvious physical one);
- ``weights-rule``: the rule of thumb of ``accelerate estimate-memory`` (inference: the weights;
  training with Adam: 4 x the weights; SGD with momentum: 3 x), for scale.

Scores are on the **peak reserved bytes** (what the total is made of, before the constant CUDA
context, which would shrink every error): MAPE, the share within 10 % and the worst error, over
the test families' rows; also the architecture split (``split``) for the SeerNet and GBM extras.
With ``--ship``, the ``seernet-extra`` network of each phase (trained on the family split's
training families, validation families for early stopping, calibrated intervals and domain from
the validation split) is written as the bundled card ``memory-sim.PHASE``.

Results: ``benchmarks/data/memory_learned.json`` (and the liveness cache
``benchmarks/data/memory_learned_liveness.csv``, resumable).  Neural training is bounded by epochs
(``--epochs``, early stopping after 20 epochs without a better validation loss), never by time.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/memory_learned.py [--ship] [--epochs 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

MIB = 1 << 20
DATA = Path(__file__).resolve().parent / "data"
METRICS = {"infer": [("", None)], "train": [("sgdm_", "sgd-momentum"), ("adamw_", "adamw")]}


def targets(phase: str, kind: str) -> list[str]:
    """Target columns: ``kind`` "extra" or "total"; reserved then allocated per optimizer."""
    suffix = "_extra_mb" if kind == "extra" else "_mb"
    return [f"{p}{what}{suffix}" for p, _ in METRICS[phase] for what in ("reserved", "allocated")]


def persistent_mib(labels, phase: str, optimizer: str | None) -> np.ndarray:
    from perfseer.memory.learned import persistent_bytes

    return np.array([persistent_bytes(phase, optimizer, r.param_bytes, r.trainable_param_bytes, r.buffer_bytes)
                     for r in labels.itertuples()], dtype=np.float64) / MIB


def scores(pred: np.ndarray, true: np.ndarray) -> dict:
    err = np.abs(pred - true) / true * 100
    return {"n": int(len(true)), "mape": float(err.mean()), "median_ape": float(np.median(err)),
            "within10": float((err <= 10).mean() * 100), "max_ape": float(err.max())}


def reserved_predictions(pred: np.ndarray, cols: list[str], rows, phase: str, kind: str) -> dict[str, np.ndarray]:
    """Per optimizer prefix, the predicted peak reserved (MiB) of ``rows``."""
    out = {}
    for p, opt in METRICS[phase]:
        v = pred[:, cols.index(f"{p}reserved{'_extra' if kind == 'extra' else ''}_mb")]
        out[p] = v + persistent_mib(rows, phase, opt) if kind == "extra" else v
    return out


def fit_and_score(ds, phase, method, kind, split_column, epochs, ship=False):
    from perfseer.fit.data import select
    from perfseer.fit.methods import train_method
    from perfseer.fit.trainer import TrainConfig

    cols = targets(phase, kind)
    tc = TrainConfig(max_epochs=epochs, early_stopping_patience=20, num_threads=1, progress=False, seed=0)
    t0 = time.perf_counter()
    name = "seernet-multi" if method == "seernet" else method
    config = {"hidden_dim": 64} if method == "seernet" else {}
    if ship:
        from perfseer.fit.recipe import train_predictor

        predictor, fitted = train_predictor(ds, method=name, devices="cuda-sim/fp32", phase=phase, metrics=cols,
                                            split_column=split_column, name=f"memory-sim.{phase}",
                                            model_config=config, train_config=tc)
    else:
        predictor = None
    sel = select(ds, cols, "cuda-sim/fp32", phase, split_column)
    if not ship:
        fitted = train_method(name, sel.train, sel.val, config, train_config=tc, targets=cols)
    rows = sel.labels.iloc[[int(g.row) for g in sel.test]]
    pred = fitted.predict(sel.test)
    res = reserved_predictions(pred, cols, rows, phase, kind)
    out = {"fit_s": round(time.perf_counter() - t0, 1), "rows": {s: len(sel.split(s)) for s in ("train", "val", "test")},
           "test_models": int(rows.model.nunique()), "test_families": int(rows.family.nunique()),
           "epochs_run": getattr(fitted.train_result, "epochs_run", None)}
    for p, opt in METRICS[phase]:
        out[opt or "infer"] = scores(res[p], rows[f"{p}reserved_mb"].to_numpy())
    return out, predictor, rows


def activation_sum(ds, phase, split_column) -> dict:
    """A one-feature baseline: ``log(extra) = a + b log(sum of the graph's node output bytes)``,
    least squares on the training families, persistent bytes added back."""
    from perfseer.features import schema
    from perfseer.fit.data import select

    cols = targets(phase, "extra")
    sel = select(ds, cols, "cuda-sim/fp32", phase, split_column)
    k = schema.NODE_FEATURES.index("output_bytes")

    def feat(graphs):
        return np.log(np.array([float(g.x[:, k].sum()) for g in graphs]) / MIB)

    x_tr, y_tr = feat(sel.train), np.log(np.concatenate([g.y.numpy() for g in sel.train]))
    a = np.vstack([np.ones_like(x_tr), x_tr]).T
    coef = np.linalg.lstsq(a, y_tr, rcond=None)[0]  # [2, T]
    x_te = feat(sel.test)
    pred = np.exp(np.vstack([np.ones_like(x_te), x_te]).T @ coef)
    rows = sel.labels.iloc[[int(g.row) for g in sel.test]]
    res = reserved_predictions(pred, cols, rows, phase, "extra")
    return {
        (opt or "infer"): scores(res[p_], rows[f"{p_}reserved_mb"].to_numpy()) for p_, opt in METRICS[phase]}


def weights_rule(rows, phase) -> dict:
    out = {}
    w = (rows.param_bytes + rows.buffer_bytes).to_numpy() / MIB
    for p, opt in METRICS[phase]:
        k = {None: 1, "sgd-momentum": 3, "adamw": 4}[opt]
        out[opt or "infer"] = scores(k * w, rows[f"{p}reserved_mb"].to_numpy())
    return out


def liveness(rows, cache: Path) -> dict:
    """ONNX-liveness peak reserved of the inference test rows (cached per model and batch)."""
    import pandas as pd

    from perfseer.atomic import atomic_write_text
    from perfseer.graph.extract import extract_graph
    from perfseer.sources.load import load_skeleton
    from perfseer.memory.breakdown import analyse
    from perfseer.memory.onnx_liveness import graph_trace
    from perfseer.memory.overheads import overheads_for

    done = pd.read_csv(cache).to_dict("records") if cache.exists() and cache.stat().st_size else []
    have = {(d["model"], int(d["batch_size"])) for d in done}
    over = overheads_for(None)
    for (model, shape), grp in rows.groupby(["model", "input_shape"], sort=False):
        batches = [int(b) for b in grp.batch_size if (model, int(b)) not in have]
        if not batches:
            continue
        dims = tuple(int(d) for d in shape.split("x"))
        try:
            skel = load_skeleton(model, input_shape=dims)
            for b in batches:
                g = extract_graph(skel, batch=b, input_shape=None if skel.input_shape_applied else dims)
                r = analyse(graph_trace(g), over)
                done.append({"model": model, "batch_size": b, "peak_reserved": r.peak_reserved,
                             "peak_allocated": r.peak_allocated, "error": ""})
        except Exception as e:  # noqa: BLE001 - recorded
            done += [{"model": model, "batch_size": b, "peak_reserved": None, "peak_allocated": None,
                      "error": f"{type(e).__name__}: {str(e)[:200]}"} for b in batches]
        atomic_write_text(cache, pd.DataFrame(done).to_csv(index=False))
        print(f"  liveness {model[:60]}", flush=True)
    d = pd.DataFrame(done)
    m = rows.merge(d, on=["model", "batch_size"], how="left")
    ok = m.peak_reserved.notna()
    out = {"infer": scores(m.peak_reserved[ok].to_numpy() / MIB, m.reserved_mb[ok].to_numpy()),
           "failed": int((~ok).sum())}
    return out


def main(argv=None) -> int:
    from perfseer.data.dataset import load_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="datasets/memory_sim")
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--ship", action="store_true", help="write the seernet-extra cards as memory-sim.PHASE")
    ap.add_argument("--phases", default="infer,train")
    ap.add_argument("--no-liveness", action="store_true")
    ap.add_argument("--out", default=str(DATA / "memory_learned.json"))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    ds = load_dataset(args.data)
    DATA.mkdir(parents=True, exist_ok=True)
    out_path = Path(args.out)
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    results["dataset"] = {"rows": int(len(ds.labels)), "models": int(ds.labels.model.nunique()),
                          "families": int(ds.labels.family.nunique()), "epochs": args.epochs}
    for phase in args.phases.split(","):
        res = results.setdefault(phase, {})
        for split_column in ("family_split", "split"):
            for method in ("seernet", "gbm"):
                for kind in ("extra", "total"):
                    if split_column == "split" and kind == "total":
                        continue
                    key = f"{split_column}/{method}-{kind}"
                    ship = args.ship and key == "family_split/seernet-extra"
                    if key in res and not ship:
                        continue
                    r, predictor, rows = fit_and_score(ds, phase, method, kind, split_column, args.epochs, ship)
                    res[key] = r
                    if predictor is not None:
                        from perfseer.runtime.predictor import BUNDLED

                        predictor.card["role"] = "memory-fallback"  # not served as a latency predictor
                        predictor.card["basis"] = (f"simulator-trained predictor {predictor.name} (rest of the peak "
                                                   "beyond the exact persistent bytes)")
                        predictor.save(BUNDLED)
                        print(f"wrote {BUNDLED / predictor.name}.json", flush=True)
                    if split_column == "family_split" and method == "seernet" and kind == "extra":
                        res["family_split/weights-rule"] = weights_rule(rows, phase)
                        res["family_split/activation-sum"] = activation_sum(ds, phase, "family_split")
                        if phase == "infer" and not args.no_liveness:
                            res["family_split/onnx-liveness"] = liveness(rows, DATA / "memory_learned_liveness.csv")
                    print(phase, key, json.dumps(r), flush=True)
                    _save(out_path, results)
    _save(out_path, results)
    print(table(results))
    return 0


def _save(path: Path, results: dict) -> None:
    from perfseer.atomic import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(results, indent=1) + "\n")


def table(results: dict) -> str:
    """The markdown table of docs/memory.md: peak reserved on held-out families."""
    lines = ["| phase | optimizer | method | split | rows | MAPE % | median % | within 10 % | worst % |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for phase in ("infer", "train"):
        for key, r in results.get(phase, {}).items():
            split, method = key.split("/")
            for opt in ("infer", "sgd-momentum", "adamw"):
                s = r.get(opt)
                if not s:
                    continue
                lines.append(f"| {phase} | {'' if opt == 'infer' else opt} | {method} | "
                             f"{'families' if split == 'family_split' else 'architectures'} | {s['n']} | "
                             f"{s['mape']:.1f} | {s['median_ape']:.1f} | {s['within10']:.0f} | {s['max_ape']:.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
