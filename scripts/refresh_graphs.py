"""Rebuild the graphs of some models of a committed (compact) graph dataset, keep the rest.

After an extractor change that alters only some models' graphs (weight computation kept as
device operators, :mod:`perfseer.graph.extract`), re-exporting the whole timm dataset would take
CPU-hours.  This rebuilds the listed ``(model, input_shape)`` pairs, at every batch size the
dataset stores for them, and re-packs the dataset with every other graph unchanged.  Labels,
splits and graph indices keep their order.

    python scripts/refresh_graphs.py datasets/timm --screen screen.json --work .cache/refresh \\
        --out datasets/timm [--workers 1]

``--screen`` is ``scripts/screen_weight_compute.py``'s output (pairs with weight computation, or
whose screen failed).  Each rebuilt pair is stored in ``--work`` as it finishes (atomically), so an
interrupted run resumes; a pair that fails to rebuild keeps its old graph and is reported.  The
manifest records what was refreshed, why, and with which versions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np


def _key_file(work: Path, model: str, shape: str) -> Path:
    from perfseer.data.dataset import SkeletonCache

    return work / f"{SkeletonCache.key(model, shape)}.npz"


def _save(path: Path, graphs) -> None:
    arrays = {}
    for b, a in graphs:
        for k, v in a.items():
            arrays[f"{b}/{k}"] = v
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, path)


def _read(path: Path) -> dict[int, dict[str, np.ndarray]]:
    out: dict[int, dict[str, np.ndarray]] = {}
    with np.load(path, allow_pickle=False) as z:
        for name in z.files:
            b, k = name.split("/", 1)
            out.setdefault(int(b), {})[k] = z[name]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", help="a compact dataset folder (datasets/timm)")
    ap.add_argument("--screen", required=True, help="scripts/screen_weight_compute.py output")
    ap.add_argument("--work", required=True, help="folder for the rebuilt pairs (resumable)")
    ap.add_argument("--out", required=True, help="where the refreshed dataset goes (may be the dataset)")
    ap.add_argument("--limit", type=int, default=0, help="rebuild at most N pairs this run")
    ap.add_argument("--pack-only", action="store_true", help="re-pack with the pairs rebuilt so far")
    ap.add_argument("--build-only", action="store_true", help="rebuild pairs, do not re-pack yet")
    ap.add_argument("--reverse", action="store_true",
                    help="rebuild in reverse order (a second process on another core meets the first halfway)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from perfseer.graph.extract import WEIGHT_WORK_ENV

    os.environ[WEIGHT_WORK_ENV] = "1"  # the graphs are rebuilt with weight work kept
    from perfseer.data.compact import COMPACT_FILE, pack
    from perfseer.data.dataset import FAILURES_FILE, MANIFEST_FILE, BuildTask, _atomic_text, _to_data, build_pair, load_dataset
    from perfseer.features.pyg import OP_VOCAB

    src, out, work = Path(args.dataset), Path(args.out), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(src)
    meta = ds.graphs.meta
    screen = json.loads(Path(args.screen).read_text())
    flagged = {k for k, e in screen.items() if e.get("ops") or "error" in e}
    batches: dict[tuple[str, str], list[int]] = {}
    for m in meta:
        key = (m["model"], m["input_shape"])
        if f"{key[0]}|{key[1]}" in flagged:
            batches.setdefault(key, []).append(int(m["batch_size"]))
    todo = [k for k in sorted(batches, reverse=args.reverse) if not _key_file(work, *k).exists()]
    print(f"{len(batches)} pairs flagged, {len(todo)} to rebuild", file=sys.stderr)
    failed = json.loads((work / "failed.json").read_text()) if (work / "failed.json").exists() else {}
    for i, (model, shape) in enumerate([] if args.pack_only else todo[: args.limit or None]):
        if f"{model}|{shape}" in failed or _key_file(work, model, shape).exists():  # (another process)
            continue
        t = time.perf_counter()
        res = build_pair(BuildTask(model, shape, tuple(sorted(set(batches[(model, shape)]))), exported=True))
        if res.failure is not None:
            failed[f"{model}|{shape}"] = f"{res.failure.stage}: {res.failure.error}"[:300]
            _atomic_text(work / "failed.json", json.dumps(failed, indent=1))
            print(f"[{i + 1}/{len(todo)}] {model} {shape}: FAILED {failed[f'{model}|{shape}']}", file=sys.stderr)
            continue
        _save(_key_file(work, model, shape), res.graphs)
        print(f"[{i + 1}/{len(todo)}] {model} {shape}: {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    if args.build_only:
        return 0
    rebuilt = {k: _read(_key_file(work, *k)) for k in batches if _key_file(work, *k).exists()}
    graphs, changed = [], 0
    for i, m in enumerate(meta):
        new = rebuilt.get((m["model"], m["input_shape"]), {}).get(int(m["batch_size"]))
        old = ds.graphs[i]
        if new is None:
            graphs.append(old)
            continue
        g = _to_data(new)
        changed += int(g.num_nodes != old.num_nodes or not torch.allclose(g.x, old.x, rtol=1e-4, atol=1e-3))
        graphs.append(g)
    print(f"{len(rebuilt)} pairs rebuilt; {changed} of their graphs changed", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (COMPACT_FILE + ".tmp.npz")
    counts = pack(graphs, meta, tmp, OP_VOCAB)
    os.replace(tmp, out / COMPACT_FILE)
    if out.resolve() != src.resolve():
        for name in (ds.manifest["files"]["labels"], FAILURES_FILE):
            shutil.copyfile(src / name, out / name)
    manifest = dict(ds.manifest)
    manifest["compact"] = counts
    manifest["extraction"] = {"weight_work": True}  # read by perfseer.data.dataset.dataset_extraction
    from perfseer.data.dataset import _versions

    manifest.setdefault("refreshed", []).append({
        "why": "weight computation kept as device operators (perfseer.graph.extract, round 7)",
        "screen": "scripts/screen_weight_compute.py", "pairs_flagged": len(batches), "pairs_rebuilt": len(rebuilt),
        "graphs_changed": changed, "failed": sorted(failed), "versions": _versions(),
        "date": time.strftime("%Y-%m-%d"),
    })
    _atomic_text(out / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
