"""The repeatability floor of a collection: measure N of its configurations again and compare.

Picks ``--n`` measured (status ok) jobs of the collection store ``--db`` by a hash of their key
(the same jobs for the same store and ``--seed``), measures each again with the same backend
settings into a separate store ``--out`` (resumable like any collection), and reports, per metric,
the median and 90th percentile of ``|second - first| / first``.  No predictor can be expected to
beat the median difference on data measured this way.

    taskset -c 1 python benchmarks/cpu_repeatability.py --db .cache/collect/cpu.sqlite \\
        --out .cache/collect/repeat.sqlite --n 50 --threads 1 --time-cap 2
"""

from __future__ import annotations

import argparse
import hashlib
import json

import numpy as np

METRICS = ("latency_ms", "memory_mb", "util_pct")


def main() -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from perfseer.profiling.collect import run_local
    from perfseer.profiling.jobs import Job
    from perfseer.profiling.store import Store
    from perfseer.profiling.worker import Worker

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="the collection store to sample")
    ap.add_argument("--out", required=True, help="store for the repeated measurements (created; resumable)")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="torch-cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--time-cap", type=float, default=2.0, help="as the collection used (perfseer collect --time-cap)")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    first = Store(args.db, create=False).rows(["ok"])
    first["key"] = [hashlib.sha256(f"{args.seed}:{m}:{s}:{b}:{p}:{q}:{d}".encode()).hexdigest()
                    for m, s, b, p, q, d in first[["model", "input_shape", "batch_size", "phase", "precision",
                                                   "device"]].itertuples(index=False)]
    picked = first.sort_values("key").head(args.n)
    jobs = [Job.from_dict(r) for r in picked.to_dict("records")]
    store = Store(args.out)
    store.add_jobs(jobs)
    pending = store.pending(jobs)
    if pending:
        worker = Worker(args.backend, {"protocol": {"time_cap_s": args.time_cap}, "threads": args.threads})
        try:
            worker.start()
            run_local(store, pending, worker, args.timeout)
        finally:
            worker.close()
    again = store.rows(["ok"])
    cols = ["model", "input_shape", "batch_size", "phase", "precision", "device"]
    both = picked.merge(again, on=cols, suffixes=("_1", "_2"))
    table = Table(title=f"repeatability: {len(both)} configurations of {args.db} measured again", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("metric", "phase", "n", "median |Δ|/first %", "p90 %"):
        table.add_column(c, justify="left" if c in ("metric", "phase") else "right")
    out = {}
    for metric in METRICS:
        for phase in ("all", "infer", "train"):
            sel = both if phase == "all" else both[both["phase"] == phase]
            a, b = sel[f"{metric}_1"].to_numpy(float), sel[f"{metric}_2"].to_numpy(float)
            ok = np.isfinite(a) & np.isfinite(b) & (a > 0)
            if not ok.any():
                continue
            d = np.abs(b[ok] - a[ok]) / a[ok] * 100
            out[f"{metric}/{phase}"] = {"n": int(ok.sum()), "median_pct": float(np.median(d)),
                                        "p90_pct": float(np.percentile(d, 90))}
            table.add_row(metric, phase, str(int(ok.sum())), f"{np.median(d):.2f}", f"{np.percentile(d, 90):.2f}")
    Console().print(table)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
