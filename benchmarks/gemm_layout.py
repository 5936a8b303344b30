"""How the PerfGraph describes a weight GEMM, per model family: a lead for generalisation.

A ``MatMul`` whose second operand is a 2-D weight (``nn.Linear`` on an N-D activation) is one GEMM
in PyTorch (``at::matmul`` folds the leading dimensions of the activation into M), but the
``MatMul`` cost function describes it by the activation's layout: ``mm_batch`` = the product of the
leading dimensions but the last two, ``mm_m`` = the second-to-last.  So the same physical GEMM reads
``mm_batch = B, mm_m = N`` in a ViT (``[B, N, C]``) and ``mm_batch = B H, mm_m = W`` in a network
that applies its MLP channels-last (``[B, H, W, C]``).  This prints, per family of one device's
rows, the share of the FLOPs in weight MatMuls with ``mm_batch > 1`` and the median ``mm_batch`` of
those nodes::

    python benchmarks/gemm_layout.py --data timm --device rtx3090/amp-nchw-pt240 --top 30
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np


def family_table(data: str, device: str) -> list[dict]:
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.features.schema import NODE_FEATURES

    ds = load_dataset(resolve_dataset(data))
    rows = ds.labels[ds.labels["device"].astype(str) == device]
    if rows.empty:
        raise SystemExit(f"{data} has no rows of device {device!r}")
    mm = OP_VOCAB.index("MatMul")
    col = {n: NODE_FEATURES.index(n) for n in ("weight_bytes", "mm_batch", "flops")}
    acc = defaultdict(lambda: {"rows": 0, "share": 0.0, "batches": []})
    for gi, fam in zip(rows["graph"], rows["family"]):
        g = ds.graphs[int(gi)]
        x, op = np.asarray(g.x, dtype=np.float64), np.asarray(g.op_type)
        sel = (op == mm) & (x[:, col["weight_bytes"]] > 0) & (x[:, col["mm_batch"]] > 1)
        a = acc[str(fam)]
        a["rows"] += 1
        a["share"] += float(x[sel, col["flops"]].sum() / max(x[:, col["flops"]].sum(), 1.0))
        a["batches"].extend(x[sel, col["mm_batch"]].tolist())
    return sorted(({"family": f, "rows": a["rows"], "share": a["share"] / a["rows"],
                    "median_mm_batch": float(np.median(a["batches"])) if a["batches"] else 0.0}
                   for f, a in acc.items()), key=lambda r: -r["share"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="timm")
    ap.add_argument("--device", default="rtx3090/amp-nchw-pt240")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args(argv)
    table = family_table(args.data, args.device)
    print(f"{'family':18s} {'rows':>5s} {'FLOP share':>10s} {'median mm_batch':>16s}")
    for r in table[: args.top]:
        print(f"{r['family']:18s} {r['rows']:5d} {r['share']:10.2f} {r['median_mm_batch']:16.0f}")
    covered = sum(r["share"] > 0.5 for r in table)
    print(f"{covered} of {len(table)} families have most of their FLOPs in such nodes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
