"""SeerNet-Multi with and without PCGrad against one single-metric SeerNet per metric.

On a dataset that measures several metrics of the same runs (the committed CPU set: latency, peak
memory, CPU utilisation), for each phase and each seed, trains on one selection and split:

* ``seernet-multi (PCGrad)``: one network, one head per metric, PCGrad on the shared part;
* ``seernet-multi (no PCGrad)``: the same, summed losses;
* ``seernet (single)``: one network per metric;

each to early stopping under the same recipe (``--epochs``, ``--patience``, ``--time-limit``), and
prints the test MAPE per metric, mean and spread over the seeds.  With ``--floor JSON`` (written
by ``benchmarks/cpu_repeatability.py --json``) it adds the repeatability floor of each metric:
the median difference between two measurements of the same configuration.

    taskset -c 1 python benchmarks/multi_metric.py --data cpu --phases infer --seeds 0,1,2 --hidden 64 \\
        --epochs 300 --floor benchmarks/results/cpu_repeatability.json --json benchmarks/results/multi_metric_infer.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
from compare_methods import fit_and_score  # noqa: E402

DEFAULT_METRICS = ("latency_ms", "memory_mb", "util_pct")


def run(args, console) -> dict:
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.fit.data import select

    ds = load_dataset(resolve_dataset(args.data))
    out: dict = {"benchmark": "multi_metric", "environment": tb.environment(), "data": str(args.data),
                 "metrics": list(args.metrics), "runs": []}
    for phase in args.phases:
        multi = select(ds, list(args.metrics), None, phase)
        singles = {m: select(ds, m, None, phase) for m in args.metrics} if args.single else {}
        tb.log(console, f"[bold]{phase}[/bold]: {multi.describe()}")
        for seed in args.seeds:
            args.seed = seed
            for pcgrad in (True, False):
                label = f"seernet-multi ({'PCGrad' if pcgrad else 'no PCGrad'})"
                r = fit_and_score("seernet-multi", multi, args, console, label=label, pcgrad=pcgrad)
                out["runs"].append({"phase": phase, "seed": seed, "method": label, "row": r,
                                    "mape": {m: _mape(r, m) for m in args.metrics}})
            for m, sel in singles.items():
                r = fit_and_score("seernet", sel, args, console, label=f"seernet ({m})")
                out["runs"].append({"phase": phase, "seed": seed, "method": "seernet (single)", "metric": m,
                                    "row": r, "mape": {m: _mape(r, m)}})
            tb.write_json(args.json, out)
    return out


def _mape(row: dict, metric: str) -> float | None:
    """Test MAPE of ``metric`` in a fit_and_score row (targets are named ``metric`` or ``metric@...``)."""
    if "error" in row:
        return None
    hits = [v["mape"] for k, v in row["test"].items() if k.split("@", 1)[0] == metric]
    return hits[0] if hits else None


def summary(out: dict, floor: dict | None) -> list:
    from rich.table import Table

    tables = []
    phases = list(dict.fromkeys(r["phase"] for r in out["runs"]))
    for phase in phases:
        runs = [r for r in out["runs"] if r["phase"] == phase]
        seeds = sorted({r["seed"] for r in runs})
        t = Table(title=f"{out['data']}, {phase}: test MAPE %, mean ± sd over seeds {', '.join(map(str, seeds))}")
        t.add_column("method")
        for m in out["metrics"]:
            t.add_column(m, justify="right")
        t.add_column("fit s per seed", justify="right")
        t.add_column("conflicting pairs % (mean cos)", justify="right")
        for method in ("seernet-multi (PCGrad)", "seernet-multi (no PCGrad)", "seernet (single)"):
            mine = [r for r in runs if r["method"] == method]
            if not mine:
                continue
            cells = [_mean_sd([r["mape"][m] for r in mine if r["mape"].get(m) is not None]) for m in out["metrics"]]
            # CPU seconds for all metrics of one seed (single-metric: one network per metric)
            fit = sum(r["row"].get("fit_time_s") or 0.0 for r in mine) / max(1, len(seeds))
            conf = [r["row"] for r in mine if "conflict_share" in r["row"]]
            conf_cell = (f"{100 * statistics.fmean(c['conflict_share'] for c in conf):.0f} "
                         f"({statistics.fmean(c['mean_cos'] for c in conf):+.3f})" if conf else "-")
            t.add_row(method, *cells, f"{fit:.0f}", conf_cell)
        if floor:
            t.add_row("repeatability floor", *[
                f"{floor[f'{m}/{phase}']['median_pct']:.2f}" if f"{m}/{phase}" in floor else "-"
                for m in out["metrics"]], "", "")
        tables.append(t)
    return tables


def _mean_sd(vals: list[float]) -> str:
    if not vals:
        return "-"
    if len(vals) == 1:
        return f"{vals[0]:.2f}"
    return f"{statistics.mean(vals):.2f} ± {statistics.stdev(vals):.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="cpu", help="dataset folder or committed name (default cpu)")
    ap.add_argument("--phases", type=tb.parse_list, default=["infer", "train"])
    ap.add_argument("--metrics", type=tb.parse_list, default=list(DEFAULT_METRICS))
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in tb.parse_list(s)], default=[0, 1, 2])
    ap.add_argument("--no-single", dest="single", action="store_false",
                    help="skip the single-metric networks (multi-task runs only)")
    ap.add_argument("--floor", help="repeatability JSON of benchmarks/cpu_repeatability.py --json")
    tb.add_set_arg(ap)
    tb.add_common_args(ap)
    args = ap.parse_args(argv)
    tb.check_set_fields(ap, ["seernet", "seernet-multi"], args.set)

    from rich.console import Console

    tb.set_threads(args.threads)
    console, err = Console(width=160), Console(stderr=True, width=160)
    t0 = time.perf_counter()
    out = run(args, err)
    out["wall_time_s"] = round(time.perf_counter() - t0, 1)
    floor = json.loads(Path(args.floor).read_text()) if args.floor else None
    for t in summary(out, floor):
        t.caption = f"epochs <= {args.epochs}, patience {args.patience}; {out['wall_time_s']:.0f} s wall"
        console.print(t)
    tb.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    tb.run_main(main)
