"""Throughput and noise of a collection, by phase and batch size, read from its store.

For each (phase, batch size) of the successful measurements in ``--db``:

* ``measured``: how many; ``s/meas``: median wall seconds of one measurement as the worker timed
  it (model build, warm-up, timed repetitions, peak-memory probe);
* ``wall s/meas``: mean gap between consecutive results finishing in the same run (gaps over
  ``--max-gap`` seconds are pauses between runs and are skipped): the rate collection really
  went at, fork and store overhead included (a mean, as the store's timestamps have whole seconds);
* ``configs/h``: (architecture, batch) configurations per hour for this row's phase alone,
  ``3600 / wall s/meas``; the total line gives configurations per hour with both phases measured;
* noise: the median within-run coefficient of variation of the timed repetitions, the median
  relative half-width of the median's 95 % confidence interval, the share that converged (CI
  within the protocol's target before the time cap), and the median CPU utilisation.

    python benchmarks/cpu_collection.py --db .cache/collect/cpu.sqlite [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from datetime import datetime
from pathlib import Path

import numpy as np


def load(db: str) -> list[dict]:
    if not Path(db).is_file():
        raise SystemExit(f"error: no collection store at {db}; pass the --db that `perfseer collect run` used")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = con.execute(
        "SELECT j.model, j.batch_size, j.phase, r.status, r.seconds, r.latency_cv, r.latency_ci_rel,"
        " r.converged, r.util_pct, r.finished FROM results r JOIN jobs j ON j.id = r.job_id"
        " ORDER BY r.finished").fetchall()
    con.close()
    return [dict(r) for r in rows]


def wall_gaps(rows: list[dict], max_gap: float) -> list[float | None]:
    """Seconds between each result and the one before it (None across a pause)."""
    out, prev = [], None
    for r in rows:
        t = datetime.fromisoformat(r["finished"])
        gap = (t - prev).total_seconds() if prev is not None else None
        out.append(gap if gap is not None and 0 < gap <= max_gap else None)
        prev = t
    return out


def _mean(values) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.mean(v)) if v else None


def _median(values) -> float | None:
    v = [x for x in values if x is not None]
    return float(np.median(v)) if v else None


def summarise(rows: list[dict], max_gap: float) -> dict:
    for r, gap in zip(rows, wall_gaps(rows, max_gap)):
        r["gap"] = gap
    ok = [r for r in rows if r["status"] == "ok"]
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in ok:
        groups.setdefault((r["phase"], int(r["batch_size"])), []).append(r)
    table = []
    for (phase, batch), rs in sorted(groups.items()):
        wall = _mean(r["gap"] for r in rs)
        table.append({
            "phase": phase, "batch_size": batch, "measured": len(rs),
            "seconds_median": _median(r["seconds"] for r in rs), "wall_seconds_median": wall,
            "configs_per_hour": 3600 / wall if wall else None,
            "cv_median": _median(r["latency_cv"] for r in rs),
            "ci_rel_median": _median(r["latency_ci_rel"] for r in rs),
            "converged_share": float(np.mean([bool(r["converged"]) for r in rs])),
            "util_median": _median(r["util_pct"] for r in rs),
        })
    by_batch = {}
    for row in table:
        by_batch.setdefault(row["batch_size"], {})[row["phase"]] = row
    both = {b: 3600 / sum(p["wall_seconds_median"] for p in ph.values())
            for b, ph in by_batch.items() if len(ph) == 2 and all(p["wall_seconds_median"] for p in ph.values())}
    configs = {(r["model"], int(r["batch_size"])) for r in ok}
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    wall_all = _mean(r["gap"] for r in rows)
    return {"rows": table, "configs_per_hour_both_phases": both, "configurations": len(configs),
            "architectures": len({m for m, _ in configs}), "statuses": statuses,
            "overall_wall_seconds_mean": wall_all,
            "overall_configs_per_hour": 3600 / (2 * wall_all) if wall_all else None}


def _f(v, fmt: str) -> str:
    return "–" if v is None else format(v, fmt)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", required=True, help="the collection store (`perfseer collect run --db`)")
    ap.add_argument("--max-gap", type=float, default=60.0,
                    help="longer gaps between results count as pauses (default 60 s)")
    ap.add_argument("--json", help="also write the summary as JSON here")
    args = ap.parse_args(argv)

    from rich import box
    from rich.console import Console
    from rich.table import Table

    s = summarise(load(args.db), args.max_gap)
    t = Table(box=box.SIMPLE_HEAD, title=f"collection {args.db}: throughput and noise by batch size")
    for col in ("phase", "batch", "measured", "s/meas", "wall s/meas", "configs/h", "CV", "CI ±", "converged",
                "util %"):
        t.add_column(col, justify="left" if col == "phase" else "right")
    for r in s["rows"]:
        t.add_row(r["phase"], str(r["batch_size"]), str(r["measured"]), _f(r["seconds_median"], ".2f"),
                  _f(r["wall_seconds_median"], ".2f"), _f(r["configs_per_hour"], ",.0f"),
                  _f(100 * r["cv_median"] if r["cv_median"] is not None else None, ".1f") + " %",
                  _f(100 * r["ci_rel_median"] if r["ci_rel_median"] is not None else None, ".1f") + " %",
                  f"{100 * r['converged_share']:.0f} %", _f(r["util_median"], ".1f"))
    t.caption = ("configs/h with both phases: " + ", ".join(
        f"b{b} {v:,.0f}" for b, v in sorted(s["configs_per_hour_both_phases"].items()))
        + f"; {s['configurations']} configurations of {s['architectures']} architectures; statuses "
        + ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items())))
    Console(width=160).print(t)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(s, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
