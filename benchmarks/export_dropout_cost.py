"""What recording a training step's dropouts adds to exporting a PyTorch model.

Every export of a PyTorch module runs one extra training-mode forward on fake tensors
(:func:`perfseer.graph.torch_export.training_dropouts`) to find the dropouts a training step
applies.  This times a whole export (:func:`perfseer.sources.load.load_skeleton`) of each model and the
part of it spent in that pass, one process, after one warm-up export.

    python benchmarks/export_dropout_cost.py --models timm:resnet50,timm:vit_base_patch16_224,hf:gpt2 \\
        --json benchmarks/data/export_dropout_cost.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402


def measure(models: list[str]) -> list[dict]:
    import perfseer.graph.torch_export as te
    from perfseer.sources.load import load_skeleton

    original = te.training_dropouts
    spent: list[float] = []

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t)

    te.training_dropouts = timed
    try:
        load_skeleton(models[0])  # warm-up: imports and first-call costs
        rows = []
        for m in models:
            spent.clear()
            t = time.perf_counter()
            load_skeleton(m)
            total = time.perf_counter() - t
            rows.append({"model": m, "export_s": round(total, 3), "dropout_pass_s": round(sum(spent), 3),
                         "share_pct": round(100 * sum(spent) / total, 1)})
        return rows
    finally:
        te.training_dropouts = original


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", type=tb.parse_list, default=["timm:resnet50", "timm:vit_base_patch16_224", "hf:gpt2"])
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = measure(args.models)
    for r in rows:
        print(f"{r['model']}: export {r['export_s']:.2f} s, of which the dropout pass {r['dropout_pass_s']:.2f} s "
              f"({r['share_pct']:.1f} %)")
    if args.json:
        tb.write_json(args.json, {"benchmark": "export_dropout_cost", "environment": tb.environment(), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
