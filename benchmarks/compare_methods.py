"""Every method on the same selection, split and seed: one accuracy table per setting.

    taskset -c 0 python benchmarks/compare_methods.py --settings timm-3090-infer,timm-3090-infer-family,timm-3090-train,timm-i9 --epochs 300 --time-limit 300 --json benchmarks/results/compare_timm.json
    taskset -c 0 python benchmarks/compare_methods.py --settings nb201-gpus --archs 1000 --batch 256 --epochs 200 --time-limit 240 --json benchmarks/results/compare_nb201.json
    taskset -c 0 python benchmarks/compare_methods.py --settings fbnet-gpus --archs 1000 --batch 64 --epochs 200 --time-limit 240 --json benchmarks/results/compare_fbnet.json
    taskset -c 0 python benchmarks/compare_methods.py --settings fbnet-gpus --archs 200 --batch 64 --epochs 2   # smoke

On one core, a network costs about its ``--time-limit`` (plus one epoch and a final evaluation)
unless early stopping ends it first: the timm line takes ~2.3 h (4 settings x 6 networks x ~5 min),
the NB201 and FBNet lines ~2.2 h each (5 GPUs x 5 graph networks x ~4.5 min, MLP-Node, baselines and
the two SeerNet-Multi runs); SeerNet trains ~14 ms per graph per epoch on one core there (PMGNS,
GAT ~2x, GIN ~2.5x, GCN ~3x), so ~35 SeerNet epochs fit in 240 s on 1,000 architectures.

Methods: the neural models ``seernet``, ``pmgns``, ``gcn``, ``gat``, ``gin``, ``mlp-node`` (each at its
registry defaults, the papers' sizes, unless ``--hidden``) and the baselines ``additive``, ``gbm``,
``flops``.  All are trained by :func:`perfseer.fit.methods.train_method` on the examples of one
:func:`perfseer.fit.data.select` call, selected on the validation split (epoch for networks,
boosting round for the GBM) and scored on the test split: MAPE, RMSE (ms), the share within
5/10/20 % of the measurement, Spearman's rho and Kendall's tau.  The best test MAPE is marked ★.

Settings (``--settings``, comma-separated):

* ``timm-3090-infer``, ``timm-3090-infer-family``, ``timm-3090-train``, ``timm-i9``: one device of the
  timm dataset; the ``-family`` setting tests on unseen model families (``family_split``).
* ``nb201-gpus``, ``fbnet-gpus``: HELP's latencies on five GPUs (1080 Ti, 2080 Ti, Titan RTX, Titan X,
  Titan Xp); every method is trained per GPU, and the table gives each GPU's MAPE / Spearman and the
  mean over GPUs.  ``--archs N`` keeps N architectures (hash-stable, see ``_training_bench.py``),
  ``--batch B`` keeps only batch-B rows (256 for NB201's batch-256 columns; FBNet has 1/32/64).
  SeerNet-Multi is trained once with the five GPUs as its targets (``select_devices``), with and
  without PCGrad, next to the single-target SeerNet per GPU (``--no-multi`` skips it).

Budgets: ``--epochs`` caps every network, ``--time-limit S`` stops each after the first epoch that
ends past S seconds (early stopping after ``--patience`` epochs still applies).  Networks train on
``--threads`` torch threads (default 1); pin the process to a core with ``taskset`` on a shared
machine.  ``--json OUT`` is rewritten after every setting, so an interrupted run keeps its finished
settings.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
from perfseer.errors import PerfseerError  # noqa: E402
from rich.markup import escape  # noqa: E402  (method names like seernet[head_globals=true] are not markup)

METRIC_KEYS = ("mape", "rmse", "acc5", "acc10", "acc20", "spearman", "kendall")


def split_variant(spec: str) -> tuple[str, dict]:
    """``NAME[FIELD=VALUE;...]`` to ``(NAME, {FIELD: VALUE})``: a method with config fields of its
    own, e.g. ``seernet[head_globals=true]`` (values as for ``--set``); a plain name gives ``{}``."""
    from perfseer.models.registry import parse_overrides

    if "[" not in spec:
        return spec, {}
    name, _, inner = spec.partition("[")
    if not inner.endswith("]"):
        raise PerfseerError(f"method {spec!r} has no closing ]", "write NAME[FIELD=VALUE;FIELD=VALUE]")
    return name, parse_overrides(name, [i for i in inner[:-1].split(";") if i.strip()])


def fit_and_score(method: str, sel, args, console, label: str | None = None, model_extra: dict | None = None,
                  **train_overrides) -> dict:
    """Train ``method`` on ``sel.train`` (val: ``sel.val``), score on ``sel.test``; a row dict.

    A method that fails (a missing optional dependency, a diverged loss) gives a row with ``error``
    instead of stopping the benchmark."""
    from perfseer.errors import PerfseerError
    from perfseer.fit.methods import evaluate_method, train_method

    label = label or method
    method, variant = split_variant(method)
    if model_extra is None:
        model_extra = (tb.overrides_for(method, getattr(args, "set", None)) or {}) | variant or None
    t0 = time.perf_counter()
    try:
        fitted = train_method(method, sel.train, sel.val, tb.model_config(method, args.hidden, model_extra),
                              train_config=tb.train_config(args, **train_overrides), targets=sel.targets)
        scores = evaluate_method(fitted, sel.test)
    except (PerfseerError, ImportError, RuntimeError) as e:
        tb.log(console, f"[red]{escape(label)} failed[/red]: {e}")
        return {"method": label, "error": f"{type(e).__name__}: {e}", "fit_time_s": time.perf_counter() - t0}
    n, plabel = tb.parameters(fitted)
    res = fitted.train_result
    row = {"method": label, "params": n, "params_label": plabel, "fit_time_s": round(fitted.fit_time_s, 2),
           "epochs": res.epochs_run if res else None, "best_epoch": res.best_epoch if res else None,
           "stopped": res.stopped if res else None,
           "epoch_s": round(statistics.median(h["seconds"] for h in res.history), 3) if res and res.history else None,
           "config": fitted.config,
           **_conflicts(res),
           "val": ({t: dict(m) for t, m in res.metrics.get("val", {}).items()} if res else None),
           "test": {t: {k: v for k, v in m.items()} for t, m in scores.items()}}
    first = next(iter(scores.values()))
    ep = f", {res.epochs_run} epochs ({res.stopped})" if res else ""
    if "conflict_share" in row:
        ep += f", {100 * row['conflict_share']:.0f} % of task pairs conflicting (mean cos {row['mean_cos']:+.3f})"
    tb.log(console, f"{escape(label)}: {row['fit_time_s']:.1f} s{ep}; test MAPE {first['mape']:.2f} %, "
                    f"rho {first['spearman']:.3f}" + (f" (first of {len(scores)} targets)" if len(scores) > 1 else ""))
    return row


def _epochs(row: dict) -> str:
    if row.get("epochs") is None:
        return "-"
    stop = {"early_stopping": "es", "time_limit": "time", "max_epochs": "max", "mixed": "mixed"}.get(
        row.get("stopped"), "")
    return f"{row['epochs']} ({stop})" if stop else str(row["epochs"])


def _best(rows: list[dict], key) -> str | None:
    ok = [r for r in rows if "error" not in r and math.isfinite(key(r))]
    return min(ok, key=key)["method"] if ok else None


# -- one device -------------------------------------------------------------------------------------

def run_single(setting, methods, args, console) -> dict:
    from perfseer.fit.data import select

    view, info = tb.setting_view(setting, args.data_root, args.archs, args.batch)
    sel = select(view, setting.metric, list(setting.devices), setting.phase, setting.split_column)
    tb.log(console, f"[bold]{setting.name}[/bold]: {sel.describe()}")
    rows = [fit_and_score(m, sel, args, console) for m in methods]
    target = sel.targets[0]
    for r in rows:
        if "error" not in r:
            r["metrics"] = r["test"][target]
    best = _best(rows, lambda r: r["metrics"]["mape"])
    return {"setting": asdict(setting), "data": info, "selection": sel.describe(),
            "sizes": {s: len(sel.split(s)) for s in ("train", "val", "test")}, "results": rows, "best": best}


def single_table(name: str, out: dict):
    from rich.table import Table

    s = out["setting"]
    t = Table(title=f"{name}: {s['metric']} on {s['devices'][0]} ({s['phase']}), split by {s['split_column']}; "
                    f"train/val/test {out['sizes']['train']}/{out['sizes']['val']}/{out['sizes']['test']}")
    _metric_columns(t)
    for r in out["results"]:
        _metric_row(t, r, r.get("metrics"), r["method"] == out["best"])
    return t


def _metric_columns(t) -> None:
    for c, just in (("method", "left"), ("params", "right"), ("fit s", "right"), ("epochs", "right"),
                    ("MAPE %", "right"), ("RMSE ms", "right"), ("acc@5 %", "right"), ("acc@10 %", "right"),
                    ("acc@20 %", "right"), ("Spearman", "right"), ("Kendall", "right")):
        t.add_column(c, justify=just)


def _metric_row(t, r: dict, m: dict | None, best: bool) -> None:
    name = escape(r["method"]) + (" ★" if best else "")
    if "error" in r or m is None:
        t.add_row(name, "-", tb.f1(r.get("fit_time_s"), 1), "-", f"[red]{r.get('error', 'failed')[:60]}[/red]",
                  *["-"] * 6)
        return
    t.add_row(name, r["params_label"], tb.f1(r["fit_time_s"], 1), _epochs(r), tb.f1(m["mape"]),
              tb.f1(m["rmse"], 3), tb.f1(m["acc5"], 1), tb.f1(m["acc10"], 1), tb.f1(m["acc20"], 1),
              tb.f1(m["spearman"], 4), tb.f1(m["kendall"], 4), style="bold" if best else None)


def _conflicts(res) -> dict:
    """PCGrad runs: the share of task pairs whose gradients conflicted and their mean cosine,
    averaged over the epochs (``{}`` without PCGrad)."""
    eps = [h for h in (res.history if res else []) if "conflict_share" in h]
    if not eps:
        return {}
    return {"conflict_share": round(statistics.fmean(h["conflict_share"] for h in eps), 4),
            "mean_cos": round(statistics.fmean(h["mean_cos"] for h in eps), 4)}


def _mean_int(values):
    v = [x for x in values if x is not None]
    return round(sum(v) / len(v)) if v else None


def _common(values):
    v = {x for x in values if x is not None}
    return v.pop() if len(v) == 1 else ("mixed" if v else None)


# -- several devices --------------------------------------------------------------------------------

def run_per_device(setting, methods, args, console) -> dict:
    from perfseer.errors import PerfseerError
    from perfseer.fit.data import select, select_devices

    view, info = tb.setting_view(setting, args.data_root, args.archs, args.batch)
    devices = list(setting.devices)
    per: dict[str, dict] = {}
    for dev in devices:
        sel = select(view, setting.metric, [dev], setting.phase, setting.split_column)
        tb.log(console, f"[bold]{setting.name} / {dev}[/bold]: {sel.describe()}")
        rows = [fit_and_score(m, sel, args, console, label=m) for m in methods]
        per[dev] = {"selection": sel.describe(), "sizes": {s: len(sel.split(s)) for s in ("train", "val", "test")},
                    "results": rows}
    # one row per method: the metrics of each device's predictor
    table_rows = []
    for i, m in enumerate(methods):
        rows = [per[d]["results"][i] for d in devices]
        errs = [r for r in rows if "error" in r]
        row = {"method": m, "kind": "single-target, one predictor per device",
               "params": rows[0].get("params"), "params_label": rows[0].get("params_label", "-"),
               "fit_time_s": round(sum(r.get("fit_time_s", 0.0) for r in rows), 2),
               "epochs": _mean_int([r.get("epochs") for r in rows]),
               "stopped": _common([r.get("stopped") for r in rows]),
               "epochs_per_device": [r.get("epochs") for r in rows],
               "stopped_per_device": [r.get("stopped") for r in rows],
               "per_device": {d: (r["test"][setting.metric] if "error" not in r else {"error": r["error"]})
                              for d, r in zip(devices, rows)}}
        if errs:
            row["error"] = errs[0]["error"]
        table_rows.append(row)

    multi = []
    if args.multi:
        try:
            msel = select_devices(view, setting.metric, devices, setting.phase, setting.split_column)
        except PerfseerError as e:
            tb.log(console, f"[red]SeerNet-Multi skipped[/red]: {e}")
            msel = None
        if msel is not None:
            tb.log(console, f"[bold]{setting.name} / all GPUs as targets[/bold]: {msel.describe()}")
            for pcgrad in (True, False):
                label = f"seernet-multi ({'PCGrad' if pcgrad else 'no PCGrad'})"
                r = fit_and_score("seernet-multi", msel, args, console, label=label, pcgrad=pcgrad)
                row = {"method": label, "kind": f"one predictor, {len(devices)} targets",
                       "params": r.get("params"), "params_label": r.get("params_label", "-"),
                       "fit_time_s": r.get("fit_time_s"), "epochs": r.get("epochs"), "stopped": r.get("stopped"),
                       **{k: r[k] for k in ("conflict_share", "mean_cos") if k in r},
                       "sizes": {s: len(msel.split(s)) for s in ("train", "val", "test")}}
                if "error" in r:
                    row["error"] = r["error"]
                else:
                    row["per_device"] = {d: r["test"][f"{setting.metric}@{d}"] for d in devices}
                multi.append(row)
    for row in table_rows + multi:
        if "error" in row:
            continue
        row["mean"] = {k: float(sum(row["per_device"][d][k] for d in devices) / len(devices)) for k in METRIC_KEYS}
    everything = table_rows + multi
    best = _best(everything, lambda r: r["mean"]["mape"])
    return {"setting": asdict(setting), "data": info, "devices": per, "summary": everything, "best": best}


def per_device_tables(name: str, out: dict) -> list:
    from rich.table import Table

    s = out["setting"]
    devices = s["devices"]
    sizes = next(iter(out["devices"].values()))["sizes"]
    head = (f"{name}: {s['metric']} ({s['phase']}), split by {s['split_column']}; per GPU train/val/test "
            f"{sizes['train']}/{sizes['val']}/{sizes['test']}")
    t1 = Table(title=head + " -- test MAPE % / Spearman per device")
    t1.add_column("method")
    t1.add_column("params", justify="right")
    t1.add_column("fit s (all)", justify="right")
    for d in devices:
        t1.add_column(d, justify="right")
    t1.add_column("mean MAPE", justify="right")
    t1.add_column("mean ρ", justify="right")
    for r in out["summary"]:
        best = r["method"] == out["best"]
        cells = []
        for d in devices:
            m = (r.get("per_device") or {}).get(d, {})
            cells.append("-" if "mape" not in m else f"{m['mape']:.2f} / {m['spearman']:.3f}")
        mean = r.get("mean")
        t1.add_row(escape(r["method"]) + (" ★" if best else ""), r["params_label"], tb.f1(r.get("fit_time_s"), 1), *cells,
                   tb.f1(mean["mape"]) if mean else f"[red]{r.get('error', '')[:40]}[/red]",
                   tb.f1(mean["spearman"], 4) if mean else "-", style="bold" if best else None)
    t2 = Table(title=head + f" -- mean over the {len(devices)} devices (fit s: all devices; epochs: mean)")
    _metric_columns(t2)
    for r in out["summary"]:
        _metric_row(t2, r, r.get("mean"), r["method"] == out["best"])
    return [t1, t2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", type=tb.parse_settings, default=tb.parse_settings("timm-3090-infer"),
                    help=f"comma-separated, from: {', '.join(tb.SETTINGS)} (default timm-3090-infer)")
    ap.add_argument("--methods", type=tb.parse_list, default=list(tb.DEFAULT_METHODS),
                    help=f"comma-separated (default {','.join(tb.DEFAULT_METHODS)})")
    tb.add_set_arg(ap)
    ap.add_argument("--no-multi", dest="multi", action="store_false",
                    help="per-device settings: skip SeerNet-Multi (with / without PCGrad)")
    tb.add_common_args(ap)
    args = ap.parse_args(argv)

    from rich.console import Console

    from perfseer.fit.methods import ALIASES, method_names

    known = method_names()
    bases = [m.partition("[")[0] for m in args.methods]
    bad = [m for m in bases if ALIASES.get(m, m) not in known]
    if bad:
        ap.error(f"unknown method(s) {', '.join(bad)}; choose from {', '.join(known)}")
    try:
        for m in args.methods:
            split_variant(ALIASES.get(m, m))
    except PerfseerError as e:
        ap.error(str(e))
    tb.check_set_fields(ap, [ALIASES.get(m, m) for m in bases] + (["seernet-multi"] if args.multi else []),
                        args.set)
    tb.set_threads(args.threads)
    console, err = Console(width=200), Console(stderr=True, width=200)
    report = {"benchmark": "compare_methods", "environment": tb.environment(),
              "args": {k: v for k, v in vars(args).items() if k != "settings"} | {
                  "settings": [s.name for s in args.settings]}, "settings": {}}
    for setting in args.settings:
        t0 = time.perf_counter()
        if setting.per_device:
            out = run_per_device(setting, args.methods, args, err)
            tables = per_device_tables(setting.name, out)
        else:
            out = run_single(setting, args.methods, args, err)
            tables = [single_table(setting.name, out)]
        out["wall_time_s"] = round(time.perf_counter() - t0, 1)
        report["settings"][setting.name] = out
        for t in tables:
            t.caption = (f"{setting.about}; {out['data']['architectures']} architectures"
                         + (f" (of {out['data']['architectures_available']})" if args.archs else "")
                         + (f", batch {args.batch}" if args.batch else "")
                         + f"; epochs <= {args.epochs}" + (f", <= {args.time_limit:g} s" if args.time_limit else "")
                         + f" per network, seed {args.seed}; ★ lowest test MAPE; {out['wall_time_s']:.0f} s wall")
            console.print(t)
        tb.write_json(args.json, report)
    if args.json:
        err.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    tb.run_main(main)
