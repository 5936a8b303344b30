"""Rewrite a compact graph dataset as if it had been extracted with ``PERFSEER_GEMM_FOLD=1``.

Re-extracting every model costs CPU-hours; the fold only changes two hyper-parameter columns of
``MatMul`` nodes whose second operand is a 2-D weight (the node's ``weight_bytes`` are
``in_features * out_features`` elements of 1, 2, 4 or 8 bytes): ``mm_m`` becomes ``mm_batch * mm_m`` and ``mm_batch`` becomes 1.
Both columns are stored as ``base + slope * (b - b0)`` and at most one of them depends on the batch
size, so the product is affine too: base ``B0 M0``, slope ``B0 s_M + M0 s_B``.  Every other column,
the edges, the labels and the rest of the manifest are copied unchanged; the manifest records the
rewrite.  ``tests/data/test_gemm_fold.py`` checks the result against a dataset built with the switch
on.

    python scripts/gemm_fold_dataset.py --data benchmarks/results/r7/data/timm --out .cache/gemmfold/timm
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from perfseer.atomic import atomic_write_text
from perfseer.data.compact import COMPACT_FILE


def fold_arrays(arrays: dict) -> tuple[dict, int]:
    """The compact arrays with every weight ``MatMul`` node folded; ``(arrays, nodes changed)``."""
    from perfseer.features.perfgraph import PRIMARY_NODE_COLUMNS
    from perfseer.features.schema import NODE_FEATURES

    header = json.loads(str(arrays["header"]))
    vocab = header["op_vocab"]
    if "MatMul" not in vocab:
        return dict(arrays), 0
    prim = list(PRIMARY_NODE_COLUMNS)
    p = len(prim)
    col = {n: prim.index(NODE_FEATURES.index(n)) for n in ("mm_m", "mm_batch", "weight_bytes", "in_features",
                                                           "out_features")}
    rows = arrays["node_rows"].astype(np.float64)
    node_row = arrays["node_row"].astype(np.int64)
    r = rows[:, [col["weight_bytes"], col["in_features"], col["out_features"], col["mm_batch"], p + col["mm_batch"]]]
    itemsize = r[:, 0] / np.maximum(r[:, 1] * r[:, 2], 1.0)
    weight2d = (r[:, 0] > 0) & np.isin(itemsize, (1.0, 2.0, 4.0, 8.0))
    foldable = weight2d & ((r[:, 3] != 1) | (r[:, 4] != 0))  # per distinct row
    is_mm = arrays["op_type"] == vocab.index("MatMul")
    sel = np.flatnonzero(is_mm & foldable[node_row])
    new = rows[node_row[sel]].copy()
    b0, sb = new[:, col["mm_batch"]].copy(), new[:, p + col["mm_batch"]].copy()
    m0, sm = new[:, col["mm_m"]].copy(), new[:, p + col["mm_m"]].copy()
    if np.any((sb != 0) & (sm != 0)):
        raise SystemExit("a MatMul with both mm_m and mm_batch growing with the batch size: not affine once folded")
    new[:, col["mm_m"]], new[:, p + col["mm_m"]] = b0 * m0, b0 * sm + m0 * sb
    new[:, col["mm_batch"]], new[:, p + col["mm_batch"]] = 1.0, 0.0
    table = np.concatenate([rows, new]).astype(np.float32)
    node_row = node_row.copy()
    node_row[sel] = len(rows) + np.arange(len(sel))
    uniq, inv = np.unique(table, axis=0, return_inverse=True)  # the format keeps rows distinct
    out = dict(arrays)
    out["node_rows"], out["node_row"] = uniq.astype(np.float32), inv.reshape(-1)[node_row].astype(np.int32)
    return out, int(len(sel))


def fold_dataset(src: str | os.PathLike, dst: str | os.PathLike) -> int:
    """Write ``src`` (a compact dataset folder) folded to ``dst``; returns the nodes changed."""
    src, dst = Path(src), Path(dst)
    if not (src / COMPACT_FILE).is_file():
        raise SystemExit(f"{src} holds no {COMPACT_FILE}: pass a compact dataset (perfseer data compact)")
    if dst.resolve() == src.resolve():
        raise SystemExit("--out must differ from --data (the source is read while the result is written)")
    with np.load(src / COMPACT_FILE, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    folded, changed = fold_arrays(arrays)
    dst.mkdir(parents=True, exist_ok=True)
    tmp = dst / (COMPACT_FILE + ".tmp.npz")
    np.savez_compressed(tmp, **folded)
    os.replace(tmp, dst / COMPACT_FILE)
    for f in src.iterdir():
        if f.name not in (COMPACT_FILE, "manifest.json") and f.is_file():
            shutil.copy2(f, dst / f.name)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["gemm_fold"] = {"from": str(src), "matmul_nodes_changed": changed,
                             "rule": "PERFSEER_GEMM_FOLD=1 (perfseer.features.ops.linear.matmul)"}
    atomic_write_text(dst / "manifest.json", json.dumps(manifest, indent=1))
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a compact dataset folder")
    ap.add_argument("--out", required=True, help="the folded copy's folder")
    args = ap.parse_args(argv)
    changed = fold_dataset(args.data, args.out)
    print(f"{args.out}: {changed} MatMul nodes folded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
