"""Why do unseen families such as ``sequencer``, ``efficientformerv2`` and ``cait`` stay 2-5x
under-predicted by every leave-families-out method?  Three checks (docs/generalisation.md, "Round 5"):

1. **The PerfGraph's counts** of one model per family (``--models``): per operator type the node
   count, FLOPs and memory access; for recurrent nodes (``LSTM``/``GRU``/``RNN``) the MACs against
   the hand count ``D T B G H (I + H)`` and the number of sequential steps ``sum D T`` (a CPU
   runs each step of each direction one after the other).
2. **Eager against compiled**, from the timm dataset's labels: the same (model, batch) on the RTX
   4090 (PyTorch 2.9.1, AMP) with and without ``torch.compile``, and on the RTX 3090, 4090, 5090 in
   eager mode.  A family whose eager time is far above its compiled time, and does not fall on a
   faster GPU, is slow for a reason its ONNX graph does not hold.
3. **What the chosen blend misses**, from a leave-families-out report (``--lfo``, with the stack
   ``--method``): per test row of the families, the measured time, prediction / truth and, for
   models with recurrent nodes, the missing milliseconds per sequential step.

    python benchmarks/lfo_family_check.py --lfo benchmarks/data/lfo_timm-i9.json --json benchmarks/data/lfo_family_check.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
import numpy as np  # noqa: E402

FAMILIES = ("sequencer", "efficientformerv2", "cait")
MODELS = "timm:sequencer2d_s,timm:efficientformerv2_s0@reparam,timm:cait_xxs24_224"
CHOSEN = ("stack+shift:seernet[readout=sum]+seernet+pmgns@200ep-seedmean+pmgns-phys@200ep-seedmean")
RECURRENT = {"LSTM": 4, "GRU": 3, "RNN": 1}


def graph_counts(ref: str) -> dict:
    """Per operator type: nodes, FLOPs, memory access; recurrent nodes against the hand count."""
    from perfseer.api import extract
    from perfseer.features.schema import NODE_FEATURES

    pg = extract(ref, batch=1)
    col = {n: i for i, n in enumerate(NODE_FEATURES)}
    ops: dict[str, dict] = {}
    for op, row in zip(pg.op_types, pg.x):
        d = ops.setdefault(op, {"nodes": 0, "flops": 0.0, "memory_access_bytes": 0.0})
        d["nodes"] += 1
        d["flops"] += float(row[col["flops"]])
        d["memory_access_bytes"] += float(row[col["memory_access_bytes"]])
    rec, steps = [], 0
    for node, row in zip(pg.graph.nodes, pg.x):
        if node.op_type not in RECURRENT:
            continue
        x, w = pg.graph.tensor(node.inputs[0]).shape, pg.graph.tensor(node.inputs[1]).shape
        t, b = (x[1], x[0]) if node.attrs.get("layout", 0) else (x[0], x[1])
        g = RECURRENT[node.op_type]
        d, h = w[0], w[1] // g
        hand = d * t * b * g * h * (x[2] + h)
        steps += d * t
        rec.append({"node": node.name, "x": list(x), "directions": d, "hidden": h, "macs": float(row[col["macs"]]),
                    "macs_hand": float(hand)})
    return {"model": ref, "nodes": pg.num_nodes, "flops": pg.flops, "ops": ops, "recurrent_nodes": len(rec),
            "recurrent_sequential_steps": int(steps),
            "recurrent_macs_match_hand_count": all(abs(r["macs"] - r["macs_hand"]) < 1 for r in rec),
            "recurrent_first": rec[:1]}


def eager_vs_compiled(families) -> list[dict]:
    """Per (model, batch) of the families measured on the RTX 4090 both ways: eager and compiled
    times (pt291), eager on the 3090 / 4090 / 5090 where measured at the same batch."""
    labels = tb.load("timm").labels
    lab = labels[labels["family"].astype(str).isin(families) | labels["model"].isin(["timm:resnet50", "timm:vit_base_patch16_224"])]
    piv = lab.pivot_table(index=["family", "model", "batch_size"], columns="device", values="latency_ms")
    cols = {"eager_4090": "rtx4090/amp-nchw-pt291", "compiled_4090": "rtx4090/amp-nchw-pt291-dynamo",
            "eager_3090": "rtx3090/amp-nchw-pt240", "eager_5090": "rtx5090/amp-nchw-pt291"}
    out = []
    for (fam, model, bs), r in piv.iterrows():
        v = {k: (float(r[c]) if c in r and np.isfinite(r[c]) else None) for k, c in cols.items()}
        if v["eager_4090"] is None or v["compiled_4090"] is None:
            continue
        out.append({"family": str(fam), "model": model, "batch_size": int(bs), **v,
                    "eager_over_compiled_4090": v["eager_4090"] / v["compiled_4090"]})
    return out


def eager_over_compiled_all(top: int = 8) -> dict:
    """RTX 4090 pt291 eager / compiled time over every (model, batch) measured both ways."""
    labels = tb.load("timm").labels
    piv = labels.pivot_table(index=["model", "batch_size"], columns="device", values="latency_ms")
    r = (piv["rtx4090/amp-nchw-pt291"] / piv["rtx4090/amp-nchw-pt291-dynamo"]).dropna().sort_values()
    return {"pairs": int(len(r)), "median": float(r.median()), "p90": float(r.quantile(0.9)),
            "p99": float(r.quantile(0.99)), "largest": [(f"{m} b{b}", float(v)) for (m, b), v in r.tail(top)[::-1].items()]}


def blend_misses(path: str, method: str, families, steps: dict) -> list[dict]:
    rep = json.loads(Path(path).read_text())
    out = []
    for name, S in rep["settings"].items():
        for f in S["folds"]:
            r = next((r for r in f["results"] if r["method"] == method), None)
            if r is None:
                raise SystemExit(f"error: {path}: no method {method!r} in fold {f['fold'] + 1} of {name}")
            tr = f["test_rows"]
            for i, fam in enumerate(tr["family"]):
                if fam not in families:
                    continue
                y, p = tr["y"][i], r["pred_test"][i]
                row = {"setting": name, "model": tr["model"][i], "batch_size": tr["batch_size"][i], "y_ms": y,
                       "pred_over_true": p / y}
                base = tr["model"][i].split("@")[0]
                if steps.get(base):
                    row["sequential_steps"] = steps[base]
                    row["missing_ms_per_step"] = (y - p) / steps[base] if tr["batch_size"][i] == 1 else None
                out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=tb.parse_list, default=tb.parse_list(MODELS), help=f"default {MODELS}")
    ap.add_argument("--steps-models", type=tb.parse_list,
                    default=tb.parse_list("timm:sequencer2d_s,timm:sequencer2d_m,timm:sequencer2d_l"),
                    help="models whose recurrent sequential steps are counted for --lfo's per-step figure")
    ap.add_argument("--lfo", nargs="*", default=[], metavar="JSON", help="leave-families-out reports (merged ones)")
    ap.add_argument("--method", default=CHOSEN, help="the method of --lfo to read (default: round 4's choice)")
    ap.add_argument("--json", default=None, metavar="OUT")
    args = ap.parse_args(argv)

    counts = [graph_counts(m) for m in dict.fromkeys(args.models + args.steps_models)]
    for c in counts:
        print(f"{c['model']}: {c['nodes']} nodes, {c['flops'] / 1e9:.2f} GFLOP; recurrent nodes {c['recurrent_nodes']}, "
              f"sequential steps {c['recurrent_sequential_steps']}, MACs = hand count: {c['recurrent_macs_match_hand_count']}")
        for op, d in sorted(c["ops"].items(), key=lambda kv: -kv[1]["flops"]):
            print(f"    {op:20s} x{d['nodes']:<4d} {d['flops'] / 1e6:12.1f} MFLOP {d['memory_access_bytes'] / 1e6:10.2f} MB")
        for r in c["recurrent_first"]:
            print(f"    first recurrent node {r['node']}: X {r['x']}, D {r['directions']}, H {r['hidden']}: "
                  f"MACs {r['macs']:.0f}, hand count {r['macs_hand']:.0f}")
    ev = eager_vs_compiled(FAMILIES)
    dist = eager_over_compiled_all()
    print(f"\nRTX 4090 pt291 eager / compiled over all {dist['pairs']} (model, batch) pairs measured both ways: median "
          f"{dist['median']:.2f}, 90th percentile {dist['p90']:.2f}, 99th {dist['p99']:.2f}; the largest: "
          + ", ".join(f"{m} {v:.1f}" for m, v in dist["largest"]))
    print("RTX 4090 pt291 eager / compiled (ms), 3090 pt240 and 5090 pt291 eager:")
    for r in ev:
        f = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
        print(f"    {r['model']:40s} b{r['batch_size']:<5d} eager {f(r['eager_4090']):>8s} compiled {f(r['compiled_4090']):>7s} "
              f"ratio {r['eager_over_compiled_4090']:5.1f}   3090 {f(r['eager_3090']):>8s} 5090 {f(r['eager_5090']):>8s}")
    steps = {c["model"]: c["recurrent_sequential_steps"] for c in counts}
    misses = [m for p in args.lfo for m in blend_misses(p, args.method, FAMILIES, steps)]
    if misses:
        print(f"\n{args.method} on the families' test rows:")
        for m in misses:
            extra = f", missing {m['missing_ms_per_step'] * 1e3:.1f} us per sequential step" \
                if m.get("missing_ms_per_step") is not None else ""
            print(f"    {m['setting']:16s} {m['model']:36s} b{m['batch_size']:<5d} {m['y_ms']:9.2f} ms, "
                  f"prediction / truth {m['pred_over_true']:.2f}{extra}")
    tb.write_json(args.json, {"benchmark": "lfo_family_check", "graphs": counts, "eager_vs_compiled": ev,
                              "eager_over_compiled_all": dist,
                              "method": args.method, "blend_misses": misses})
    return 0


if __name__ == "__main__":
    tb.run_main(main)
