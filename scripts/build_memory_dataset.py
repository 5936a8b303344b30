"""The graph dataset of the simulator labels: ``datasets/memory_sim/`` (``perfseer train --data memory_sim``).

Reads ``datasets/memory_sim/sim_runs.csv`` (``scripts/memory_labels.py``) and writes, next to it,
the usual dataset files (``graphs.npz`` compact, ``labels.parquet``, ``failures.csv``,
``manifest.json``).  One label row per ``(model, input_shape, batch_size, phase)`` on device
``cuda-sim/fp32``; its metric columns (MiB) are, for inference (prefix none) and for each training
optimizer (prefix ``sgdm_``, ``adamw_``):

- ``reserved_mb`` / ``allocated_mb``: the simulator's peak reserved / allocated;
- ``reserved_extra_mb`` / ``allocated_extra_mb``: the same minus the exactly computable persistent
  bytes (:func:`perfseer.memory.learned.persistent_bytes`: weights and buffers; for training also
  gradients and optimizer state) -- what the learned memory predictor learns;
- ``memory_mb``: the total (peak reserved + the default CUDA context) of inference / of AdamW
  training, so that the table is a valid measurement table.

Graphs are not exported again where a committed dataset has them: ``timm:`` graphs come from
``datasets/timm``, ``space:`` graphs from ``datasets/cpu`` (re-bound to each batch size exactly,
:meth:`perfseer.data.compact.CompactGraphs.at_batch`); ``torchvision:`` models are exported with
``perfseer data build`` (skeleton cache ``--cache``).  Splits: ``split`` by architecture as
everywhere; ``family`` / ``family_split`` by family for every model (timm and torchvision: their
architecture family; ``space:``: the set of stage styles, :func:`memory_labels.space_family`).

    python scripts/build_memory_dataset.py [--out datasets/memory_sim] [--cache .cache/skeletons]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
PREFIX = {"": "", "sgd-momentum": "sgdm_", "adamw": "adamw_"}


def label_rows(runs):
    """One label row per ``(model, input_shape, batch_size, phase)`` from the simulator runs."""
    import pandas as pd

    from perfseer.memory.learned import persistent_bytes

    runs = runs.copy()
    runs["optimizer"] = runs["optimizer"].fillna("")
    out = {}
    for r in runs.itertuples():
        key = (r.model, r.input_shape, int(r.batch_size), r.phase)
        row = out.setdefault(key, {"model": r.model, "input_shape": r.input_shape, "batch_size": int(r.batch_size),
                                   "phase": r.phase, "device": "cuda-sim/fp32", "precision": "fp32",
                                   "source": "perfseer memory simulator (scripts/memory_labels.py)",
                                   "family": r.family, "param_bytes": int(r.param_bytes),
                                   "trainable_param_bytes": int(r.trainable_param_bytes),
                                   "buffer_bytes": int(r.buffer_bytes)})
        p = PREFIX[r.optimizer]
        fixed = persistent_bytes(r.phase, r.optimizer or None, r.param_bytes, r.trainable_param_bytes, r.buffer_bytes)
        row[f"{p}reserved_mb"] = r.peak_reserved / MIB
        row[f"{p}allocated_mb"] = r.peak_allocated / MIB
        row[f"{p}reserved_extra_mb"] = (r.peak_reserved - fixed) / MIB
        row[f"{p}allocated_extra_mb"] = (r.peak_allocated - fixed) / MIB
        row[f"{p}activations_mb"] = r.b_activations / MIB
        if r.phase == "infer" or r.optimizer == "adamw":
            row["memory_mb"] = (r.peak_reserved + r.context) / MIB
    df = pd.DataFrame(list(out.values()))
    if "memory_mb" not in df:
        df["memory_mb"] = float("nan")
    return df[df["memory_mb"].notna()].reset_index(drop=True)


def _graph_sources(datasets: Path):
    from perfseer.data.dataset import load_dataset

    found = {}
    for name in ("timm", "cpu"):
        ds = load_dataset(datasets / name)
        for i, m in enumerate(ds.graphs.meta):
            found.setdefault((m["model"], m["input_shape"]), (ds.graphs, i))
    return found


def main(argv=None) -> int:
    import numpy as np
    import pandas as pd

    from perfseer import __version__
    from perfseer.atomic import atomic_write_text
    from perfseer.data import splits
    from perfseer.data.compact import COMPACT_FILE, pack
    from perfseer.data.dataset import build_dataset, load_dataset
    from perfseer.data.table import write_table
    from perfseer.features import schema
    from perfseer.features.pyg import OP_VOCAB

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="datasets/memory_sim")
    ap.add_argument("--datasets", default="datasets")
    ap.add_argument("--cache", default=".cache/skeletons", help="skeleton cache for the torchvision exports")
    ap.add_argument("--no-export", action="store_true", help="leave out models no committed dataset has a graph of")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out)
    runs_path = out / "sim_runs.csv"
    runs = pd.read_csv(runs_path)
    labels = label_rows(runs)
    sources = _graph_sources(Path(args.datasets))
    missing = labels[[(m, s) not in sources for m, s in zip(labels.model, labels.input_shape)]]
    failures = []
    if len(missing) and not args.no_export:  # torchvision models: export them (once; the cache keeps the skeletons)
        with tempfile.TemporaryDirectory() as tmp:
            table = Path(tmp) / "tv.csv"
            write_table(missing[["model", "input_shape", "batch_size", "phase", "device", "memory_mb"]], table)
            rep = build_dataset(table, Path(tmp) / "ds", workers=0, cache=args.cache, compact=True)
            failures = rep.failures.to_dict("records")
            tv = load_dataset(Path(tmp) / "ds")
            graphs_tv = tv.graphs
            for i, m in enumerate(graphs_tv.meta):
                sources.setdefault((m["model"], m["input_shape"]), (graphs_tv, i))
            datas, meta, index = _collect(labels, sources)
    else:
        datas, meta, index = _collect(labels, sources)
    keys = list(zip(labels.model, labels.input_shape, labels.batch_size))
    graph = np.array([index.get(k, -1) for k in keys], dtype=np.int64)
    labels = labels[graph >= 0].reset_index(drop=True)
    labels["graph"] = graph[graph >= 0]
    labels["split"] = [splits.split_of(splits.architecture_key(m)) for m in labels.model]
    labels["family_split"] = [splits.split_of(f"family:{f}") for f in labels.family]
    counts = pack(datas, meta, out / COMPACT_FILE, OP_VOCAB)
    write_table(labels, out / "labels.parquet")
    atomic_write_text(out / "failures.csv", pd.DataFrame(failures, columns=["model", "input_shape", "stage", "error",
                                                                            "reason", "rows"]).to_csv(index=False))
    import hashlib

    per = {c: {s: int(labels.loc[labels[c] == s, "model"].nunique()) for s in splits.SPLITS}
           for c in ("split", "family_split")}
    manifest = {
        "format": "perfseer.dataset", "format_version": 1, "perfseer_version": __version__,
        "schema_version": schema.SCHEMA_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "table": {"path": runs_path.name, "sha256": hashlib.sha256(runs_path.read_bytes()).hexdigest(),
                  "rows": int(len(runs))},
        "files": {"graphs": COMPACT_FILE, "labels": "labels.parquet", "failures": "failures.csv"},
        "counts": {"rows": int(len(labels)), "models": int(labels.model.nunique()),
                   "families": int(labels.family.nunique()), "graphs": len(datas)},
        "splits": {"split": {"by": "model", "seed": 0, "ratios": {"train": 2.0, "val": 1.0, "test": 1.0},
                             "models": per["split"]},
                   "family_split": {"by": "family (timm/torchvision: perfseer.data.splits.family_of; space: stage "
                                          "styles)", "seed": 0, "ratios": {"train": 2.0, "val": 1.0, "test": 1.0},
                                    "models": per["family_split"]}},
        "compact": counts,
        "graphs_from": "datasets/timm (timm:), datasets/cpu (space:), exported (torchvision:)",
        "wall_time_s": round(time.perf_counter() - start, 1),
    }
    atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    print(f"{len(labels)} label rows, {labels.model.nunique()} models, {labels.family.nunique()} families, "
          f"{len(datas)} graphs; {len(failures)} export failures")
    return 0


def _collect(labels, sources):
    """The graphs of every ``(model, input_shape, batch)`` of ``labels`` with a source graph."""
    datas, meta, index = [], [], {}
    for (m, s), grp in labels.groupby(["model", "input_shape"], sort=False):
        if (m, s) not in sources:
            continue
        graphs, i = sources[(m, s)]
        for b in sorted(set(int(b) for b in grp.batch_size)):
            index[(m, s, b)] = len(datas)
            datas.append(graphs.at_batch(i, b))
            meta.append({"model": m, "input_shape": s, "batch_size": b})
    return datas, meta, index


if __name__ == "__main__":
    sys.exit(main())
