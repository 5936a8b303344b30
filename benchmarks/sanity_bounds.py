"""Physical sanity bounds and domain verdicts: are the bounds right, and what do the bundled
predictors answer on models they never saw?

``measured``: every latency measurement of the committed datasets on a device with a spec
(``perfseer.devices``) against its floor and ceiling (``perfseer.trust.bounds``): a floor above a
measurement would be a wrong floor, so the count below the floor must be 0.

``sweep``: every bundled predictor on a sample of each model source — timm (``datasets/timm``),
torchvision (the bundled example graphs: ResNet-18/50, MobileNetV3-S, ViT-B/16), ``nb201:``,
``fbnet:`` and ``space:`` (``datasets/cpu``) — at batch 1, 2, 4, ..., 1024: the values shown
(non-finite ones, ones outside the bounds: both must be 0), how many the bounds clipped, and the
share out of domain per (predictor, source).

    python benchmarks/sanity_bounds.py measured [--json benchmarks/results/sanity_measured.json]
    python benchmarks/sanity_bounds.py sweep --per-source 12 [--json benchmarks/results/sanity_sweep.json]
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402

BATCHES = [2**i for i in range(11)]  # 1 .. 1024


def _ops(g) -> list[str]:
    from perfseer.features.pyg import OP_VOCAB

    return [OP_VOCAB[int(k)] for k in g.op_type.tolist()]


def _pick(items, n: int, salt: str) -> list:
    return sorted(items, key=lambda m: hashlib.sha256(f"{salt}:{m}".encode()).hexdigest())[:n]


def measured(args) -> dict:
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.trust import bounds as bnd

    out = []
    for name in ("timm", "nb201", "cpu"):
        ds = load_dataset(resolve_dataset(name))
        lab = ds.labels[ds.labels["latency_ms"].notna()]
        for (device, phase), rows in lab.groupby(["device", "phase"], observed=True):
            spec = bnd.device_spec(str(device))
            if spec is None:
                out.append({"dataset": name, "device": device, "phase": phase, "rows": len(rows), "spec": None})
                continue
            if len(rows) > args.max_rows:
                rows = rows.sample(args.max_rows, random_state=0)
            floors, ceils, hows, y = [], [], [], rows["latency_ms"].to_numpy(float)
            for gi in rows["graph"].astype(int):
                g = ds.graphs[gi]
                f, c, how = bnd.latency_bounds_ms(bnd.graph_costs(g, _ops(g)), spec, str(phase))
                floors.append(f), ceils.append(c), hows.append(how)
            floors, ceils = np.array(floors), np.array(ceils)
            r = y / floors
            out.append({"dataset": name, "device": str(device), "phase": str(phase), "spec": spec.name,
                        "rows": int(len(y)), "below_floor": int((y < floors).sum()), "above_ceiling": int((y > ceils).sum()),
                        "min_ratio_to_floor": float(r.min()), "median_ratio_to_floor": float(np.median(r)),
                        "max_share_of_ceiling": float((y / ceils).max()),
                        "floor_set_by": {h: hows.count(h) for h in sorted(set(hows))}})
    return {"rows": out}


def _sources(per: int, seed: int) -> dict[str, list]:
    """``source -> [(label, graph_at(batch) -> Data, op types, input shape)]``."""
    import perfseer
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.runtime.predictor import _input_shape

    rng = random.Random(seed)
    out: dict[str, list] = {}
    for source, dsname, prefix in (("timm", "timm", "timm:"), ("space", "cpu", "space:")):
        ds = load_dataset(resolve_dataset(dsname))
        lab = ds.labels[ds.labels["model"].astype(str).str.startswith(prefix)]
        first = lab.sort_values("batch_size").drop_duplicates(["model", "input_shape"])
        picked = _pick(first["model"].astype(str).unique(), per, f"sweep{seed}")
        items = []
        for m in picked:
            r = first[first["model"].astype(str) == m].iloc[0]
            gi = int(r["graph"])
            items.append((m, (lambda b, gi=gi, ds=ds: ds.graphs.at_batch(gi, b)), _ops(ds.graphs[gi]), str(r["input_shape"])))
        out[source] = items
    tv = []
    for name in ("resnet18", "resnet50", "mobilenet_v3_small", "vit_b_16"):
        pg = perfseer.extract(f"example:{name}", batch=1)
        tv.append((f"torchvision:{name}", (lambda b, pg=pg: pg.with_batch(b).to_pyg()), list(pg.op_types), _input_shape(pg)))
    out["torchvision"] = tv
    nb_ops = ("none", "skip_connect", "nor_conv_1x1", "nor_conv_3x3", "avg_pool_3x3")
    fb_blocks = ("k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6", "skip")
    for source, refs in (
            ("nb201", [(lambda o: f"nb201:|{o[0]}~0|+|{o[1]}~0|{o[2]}~1|+|{o[3]}~0|{o[4]}~1|{o[5]}~2|")(
                [rng.choice(nb_ops) for _ in range(6)]) for _ in range(per)]),
            ("fbnet", ["fbnet:" + " ".join(rng.choice(fb_blocks) for _ in range(22)) for _ in range(per)])):
        items = []
        for ref in refs:
            pg = perfseer.extract(ref, batch=1)
            items.append((ref, (lambda b, pg=pg: pg.with_batch(b).to_pyg()), list(pg.op_types), _input_shape(pg)))
        out[source] = items
    return out


def sweep(args) -> dict:
    from perfseer.runtime.predictor import list_predictors, load_predictor
    from perfseer.trust import bounds as bnd

    sources = _sources(args.per_source, args.seed)
    graphs = {s: [(label, [f(b) for b in BATCHES], ops, shape) for label, f, ops, shape in items]
              for s, items in sources.items()}
    rows, worst = [], []
    for item in list_predictors():
        if args.predictors and item["name"] not in args.predictors:
            continue
        p = load_predictor(item["path"])
        trained_on = p.card["training"].get("dataset", "")
        for source, items in graphs.items():
            gs = [g for _, gl, _, _ in items for g in gl]
            ops = [o for _, gl, o, _ in items for _ in gl]
            shapes = [s for _, gl, _, s in items for _ in gl]
            values = p.predict_graphs(gs)
            verdicts, checked = p.assess(gs, values, ops, shapes)
            shown = np.array([[checked[i][c]["value"] for c in range(len(p.targets))] for i in range(len(gs))])
            clipped = int(np.sum(~np.isclose(shown, values, rtol=1e-9, atol=0) | ~np.isfinite(values)))
            raw_bad = int((~np.isfinite(values)).sum())
            out_of_bounds = 0
            for i, g in enumerate(gs):
                costs = bnd.graph_costs(g, ops[i])
                for c, t in enumerate(p.targets):
                    spec = p._spec(t.device) if t.metric == "latency_ms" else None
                    if spec is not None:
                        lo, hi, _ = bnd.latency_bounds_ms(costs, spec, t.phase)
                    else:
                        lo, hi = -math.inf, math.inf
                    v = shown[i, c]
                    out_of_bounds += int(not (lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)))
                    ratio = values[i, c] / hi if spec is not None and np.isfinite(values[i, c]) else 0.0
                    worst.append((ratio, p.name, items[i // len(BATCHES)][0], BATCHES[i % len(BATCHES)], float(values[i, c])))
            ood = float(np.mean([not v[0] for v in verdicts]) * 100)
            rows.append({"predictor": p.name, "trained_on": trained_on, "source": source, "models": len(items),
                         "predictions": int(values.size), "raw_non_finite": raw_bad,
                         "shown_non_finite": int((~np.isfinite(shown)).sum()), "shown_out_of_bounds": out_of_bounds,
                         "clipped": int(clipped), "out_of_domain_pct": ood,
                         "raw_max": float(np.nanmax(np.where(np.isfinite(values), values, np.nan))) if values.size else None})
    worst.sort(reverse=True)
    return {"batches": BATCHES, "per_source": args.per_source, "rows": rows,
            "largest_raw_to_ceiling": [dict(zip(("ratio", "predictor", "model", "batch", "raw"), w)) for w in worst[:10]]}


def main() -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("measured", "sweep"))
    ap.add_argument("--max-rows", type=int, default=3000, help="measured: rows per device at most (random sample)")
    ap.add_argument("--per-source", type=int, default=12, help="sweep: models per source (nb201, fbnet, timm, space)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--predictors", nargs="*", default=None, help="sweep: only these bundled predictors")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    tb.set_threads(1)
    res = measured(args) if args.mode == "measured" else sweep(args)
    res["environment"] = tb.environment()
    tb.write_json(args.json, res)
    c = Console()
    if args.mode == "measured":
        t = Table(title="measured latency against the sanity bounds", title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("dataset", "device", "phase", "spec", "rows", "< floor", "> ceiling", "min y/floor",
                    "median y/floor", "max y/ceiling", "floor set by"):
            t.add_column(col)
        for r in res["rows"]:
            if r["spec"] is None:
                t.add_row(r["dataset"], r["device"], r["phase"], "-", str(r["rows"]), *["-"] * 6)
                continue
            t.add_row(r["dataset"], r["device"], r["phase"], r["spec"], str(r["rows"]), str(r["below_floor"]),
                      str(r["above_ceiling"]), f"{r['min_ratio_to_floor']:.2f}", f"{r['median_ratio_to_floor']:.1f}",
                      f"{r['max_share_of_ceiling']:.2g}", ", ".join(f"{k} {v}" for k, v in r["floor_set_by"].items()))
    else:
        t = Table(title=f"bundled predictors at batch 1-1024, {args.per_source} models per source", title_justify="left",
                  box=box.SIMPLE_HEAD)
        for col in ("predictor", "source", "predictions", "raw non-finite", "shown non-finite", "shown out of bounds",
                    "clipped", "out of domain %", "raw max"):
            t.add_column(col)
        for r in res["rows"]:
            t.add_row(r["predictor"], r["source"], str(r["predictions"]), str(r["raw_non_finite"]),
                      str(r["shown_non_finite"]), str(r["shown_out_of_bounds"]), str(r["clipped"]),
                      f"{r['out_of_domain_pct']:.1f}", f"{r['raw_max']:.3g}" if r["raw_max"] is not None else "-")
    c.print(t)


if __name__ == "__main__":
    tb.run_main(main)
