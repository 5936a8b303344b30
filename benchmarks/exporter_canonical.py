"""The same network through two exporters: how far apart are the PerfGraphs and the predictions?

For each model (a small sample of timm and torchvision networks; real weights on the CPU, since the
legacy exporter needs them) three ONNX graphs are compared:

* ``dynamo``: perfseer's own export (``perfseer.extract("timm:NAME")``), the canonical form;
* ``legacy``: ``torch.onnx.export(dynamo=False)`` with its defaults (opset 17, constant folding on,
  which fuses every eval-mode BatchNorm into its convolution);
* ``legacy-nofold``: the same with ``do_constant_folding=False`` (BatchNorm kept).

Each legacy graph is extracted with and without perfseer's canonicalisation
(:mod:`perfseer.graph.canonical`) and predicted by a bundled predictor at one batch size; the
table gives the relative difference to the dynamo prediction, the node counts, and the operator
types that still differ.

    python benchmarks/exporter_canonical.py [--models timm:NAME torchvision:NAME ...]
        [--predictor rtx3090-amp-nchw-pt240.infer] [--batch 32]

Writes benchmarks/results/exporter_canonical.json.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import warnings
from collections import Counter
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
MODELS = ["torchvision:resnet18", "torchvision:mobilenet_v3_small", "timm:vit_tiny_patch16_224",
          "timm:convnext_atto", "timm:efficientnet_b0"]


def legacy_export(ref: str, fold: bool):
    import onnx
    import torch

    from perfseer.sources.zoo import build_zoo_model

    zoo, name = ref.split(":", 1)
    module, shape, _ = build_zoo_model(zoo, name, meta=False)
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(1, *shape),), buf, dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "N"}}, opset_version=17, do_constant_folding=fold)
    return onnx.load_from_string(buf.getvalue())


def predict(predictor, pg, batch: int) -> float:
    return float(predictor.predict(pg, batch=batch)[0]["value"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--predictor", default="rtx3090-amp-nchw-pt240.infer")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)

    import perfseer
    from perfseer.graph import canonical

    predictor = perfseer.load_predictor(args.predictor)
    rows = []
    print(f"{'model':32} {'legacy graph':14} {'raw %':>8} {'canonical %':>12} {'nodes (dyn)':>12}  op types still differing")
    for ref in args.models:
        dyn = perfseer.extract(ref, batch=args.batch)
        base = predict(predictor, dyn, args.batch)
        dyn_ops = Counter(dyn.op_types)
        for label, fold in (("legacy", True), ("legacy-nofold", False)):
            proto = legacy_export(ref, fold)
            row = {"model": ref, "graph": label, "dynamo_ms": base, "dynamo_nodes": dyn.num_nodes}
            for on in (False, True):
                canonical.ENABLED = on
                pg = perfseer.extract(proto, batch=args.batch)
                key = "canonical" if on else "raw"
                row[f"{key}_ms"] = predict(predictor, pg, args.batch)
                row[f"{key}_pct"] = 100 * (row[f"{key}_ms"] / base - 1)
                row[f"{key}_nodes"] = pg.num_nodes
                if on:
                    ops = Counter(pg.op_types)
                    row["differing_ops"] = {op: [ops.get(op, 0), dyn_ops.get(op, 0)] for op in sorted(set(ops) | set(dyn_ops))
                                            if ops.get(op, 0) != dyn_ops.get(op, 0)}
            canonical.ENABLED = True
            rows.append(row)
            diff = ", ".join(f"{op} {a}/{b}" for op, (a, b) in row["differing_ops"].items())
            print(f"{ref:32} {label:14} {row['raw_pct']:+8.1f} {row['canonical_pct']:+12.1f} "
                  f"{row['canonical_nodes']:5d} ({dyn.num_nodes:4d})  {diff}", flush=True)
    for label in ("legacy", "legacy-nofold"):
        sel = [r for r in rows if r["graph"] == label]
        if sel:
            mean = {k: sum(abs(r[f"{k}_pct"]) for r in sel) / len(sel) for k in ("raw", "canonical")}
            print(f"mean |difference|, {label}: raw {mean['raw']:.1f} %, canonical {mean['canonical']:.1f} %")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "exporter_canonical.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
