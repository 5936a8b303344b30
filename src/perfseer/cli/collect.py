"""``perfseer collect``: measure models and keep the results in a resumable store.

``perfseer collect run --db runs.sqlite --space 1000 --seed 0 --input-shape 3x64x64 ...``
    Plan the grid (models x input shapes x precisions x phases x batch sizes) in the store and
    measure every job that has no result yet; run it again after an interruption to resume.
``perfseer collect status --db runs.sqlite``
    Jobs per device and status, the environments measured in, the latest failures.
``perfseer collect export --db runs.sqlite --out table.csv [--failures failed.csv]``
    The successful measurements as a measurement table (:mod:`perfseer.profiling.store`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import os
import re
import statistics
import time
from pathlib import Path

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from perfseer.cli.bounds import MAX_BATCH, MAX_SPACE, check_out_file
from perfseer.profiling.backends import BACKENDS, backend_class
from perfseer.profiling.collect import Grid, Summary, models_from, plan, run_local
from perfseer.profiling.jobs import OPTIMIZERS, PHASES, PRECISIONS, STATUSES, CollectError, parse_shape, shape_text
from perfseer.profiling.protocol import Protocol
from perfseer.profiling.ray_runner import RayRunner
from perfseer.profiling.store import Store
from perfseer.profiling.worker import Worker
from perfseer.sources import NAMES, scheme_word, split_reference
from perfseer.sources.space import canonical_ref

_BACKENDS = ("torch-cpu", "ort-cpu", "torch-cuda")  # perfseer.profiling.backends.BACKENDS, without importing


def add_parser(sub) -> None:
    p = sub.add_parser("collect", help="measure models (latency, memory, utilisation, energy) into a resumable store",
                       description="Measure models on this machine (or a Ray cluster) and keep the results in a "
                                   "SQLite store; export them as a measurement table.")
    actions = p.add_subparsers(dest="collect_command", required=True, metavar="ACTION")

    run = actions.add_parser(
        "run", help="plan a grid of measurements and run those not yet done",
        description="Plan every model x input shape x precision x phase x batch size in the store, then measure "
                    "each job without a result, one at a time in a worker process (or as Ray tasks). Each result "
                    "is committed as it arrives: run the same command again to resume after an interruption. "
                    "Without --space/--model/--models, resumes the store's pending jobs for this backend.")
    run.add_argument("--db", required=True, metavar="PATH", help="the collection store (SQLite; created if missing)")
    src = run.add_argument_group("models")
    src.add_argument("--space", metavar="N", help="N networks sampled from the PerfSeer model space")
    src.add_argument("--seed", default="0", metavar="S", help="seed of the sampled networks (default 0)")
    src.add_argument("--classes", default="1000", metavar="K", help="classes of the sampled networks (default 1000)")
    src.add_argument("--model", action="append", default=[], metavar="REF",
                     help="a model reference (space:CONFIG, timm:NAME, torchvision:NAME, nb201:..., fbnet:..., "
                          "or an .onnx file for ort-cpu); repeatable")
    src.add_argument("--models", metavar="FILE", help="a file of model references, one per line")
    grid = run.add_argument_group("grid")
    grid.add_argument("--input-shape", default="3x224x224", metavar="CxHxW[,CxHxW]",
                      help="sample shapes without the batch (default 3x224x224)")
    grid.add_argument("--batches", default="1,2,4,8,16,32", metavar="B,B,...", help="batch sizes (default 1,2,4,8,16,32)")
    grid.add_argument("--phases", default="infer,train", metavar="P,P", help="infer and/or train (default both)")
    grid.add_argument("--precisions", default="fp32", metavar="P,P",
                      help=f"among {', '.join(PRECISIONS)} (default fp32)")
    grid.add_argument("--optimizer", default="sgd", metavar="NAME",
                      help=f"training optimizer: {', '.join(OPTIMIZERS)} (default sgd)")
    how = run.add_argument_group("measurement")
    how.add_argument("--backend", default="torch-cpu", metavar="NAME",
                     help=f"{', '.join(_BACKENDS)} (default torch-cpu)")
    how.add_argument("--threads", metavar="N", help="intra-op threads (default 1 on CPU backends)")
    how.add_argument("--device", metavar="NAME", help="the hardware name in the device column (default: detected, "
                                                      "e.g. xeon_platinum_8370c, rtx3090)")
    how.add_argument("--time-cap", default="20", metavar="S", help="seconds of timed steps at most per measurement "
                                                                   "(default 20)")
    how.add_argument("--min-reps", default="10", metavar="N", help="timed steps before convergence is tested (default 10)")
    how.add_argument("--max-reps", default="1000", metavar="N", help="timed steps at most (default 1000)")
    how.add_argument("--rel-ci", default="0.02", metavar="F", help="target relative half-width of the median's 95%% "
                                                                  "confidence interval (default 0.02)")
    how.add_argument("--warmup", default="3", metavar="N", help="warm-up steps, at least (default 3; and 0.5 s)")
    how.add_argument("--timeout", default="600", metavar="S", help="seconds before a measurement is killed and "
                                                                  "recorded as timeout (default 600)")
    how.add_argument("--recycle", default="100", metavar="N", help="replace the worker process every N measurements "
                                                                  "(default 100)")
    how.add_argument("--retry-failed", action="store_true", help="measure again jobs recorded as oom, crash, "
                                                                 "timeout or error")
    how.add_argument("--limit", metavar="N", help="stop after N measurements")
    how.add_argument("--ray", metavar="ADDRESS", help="run measurements as Ray tasks on this cluster (auto, local, "
                                                     "ray://HOST:PORT); needs perfseer[ray]")
    how.add_argument("--worker-log", metavar="PATH", help="append the worker processes' output to PATH "
                                                          "(default: discarded)")
    how.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=run_collect)

    exp = actions.add_parser("export", help="write the successful measurements as a measurement table",
                             description="Write the store's ok results as a measurement table (CSV, or Parquet with "
                                         "perfseer[parquet]); failed measurements are left out and counted.")
    exp.add_argument("--db", required=True, metavar="PATH", help="the collection store")
    exp.add_argument("--out", required=True, metavar="TABLE", help="the table to write (.csv or .parquet)")
    exp.add_argument("--failures", metavar="CSV", help="also write the failed measurements, with their errors, here")
    exp.add_argument("--source", metavar="TEXT", help="the source column (default perfseer-collect:<store name>)")
    exp.set_defaults(func=run_export)

    st = actions.add_parser("status", help="summarise a collection store",
                            description="Jobs per device and status, environments and the latest failures.")
    st.add_argument("--db", required=True, metavar="PATH", help="the collection store")
    st.add_argument("--failures", default="10", metavar="N", help="how many recent failures to list (default 10)")
    st.set_defaults(func=run_status)


# -- argument parsing (one-line errors through CollectError) ---------------------------------------------

def _int(text, flag: str, low: int = 1, high: int | None = None) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        value = None
    if value is None or value < low:
        raise CollectError(f"{flag} {text!r} is not a whole number >= {low}", f"write {flag} N with N >= {low}")
    if high is not None and value > high:
        raise CollectError(f"{flag} {value} is above the limit of {high:,}", f"write {flag} N with N <= {high:,}")
    return value


def _float(text, flag: str, positive: bool = True) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        raise CollectError(f"{flag} {text!r} is not a positive number", f"write {flag} followed by a number > 0")
    return value


def _list(text: str, flag: str, choices: tuple[str, ...]) -> list[str]:
    items = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in choices]
    if bad or not items:
        raise CollectError(f"{flag} {text!r} has {'unknown value ' + repr(bad[0]) if bad else 'no value'}",
                           f"write a comma-separated list of {', '.join(choices)}")
    return list(dict.fromkeys(items))


def parse_batches(text: str) -> list[int]:
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise CollectError(f"--batches {text!r} names no batch size", "write batch sizes like 1,2,4,8")

    return sorted({_int(t, "--batches batch size", 1, MAX_BATCH) for t in items})


def parse_shapes(text: str) -> list[str]:
    shapes = [t for t in str(text).replace(";", ",").split(",") if t.strip()]
    if not shapes:
        raise CollectError("--input-shape is empty", "write one sample's shape, e.g. 3x64x64")
    for s in shapes:
        try:
            parse_shape(s)
        except CollectError as e:
            raise CollectError(f"--input-shape: {e.problem}", e.fix) from None
    return [shape_text(s) for s in shapes]


def read_model_file(path: str) -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise CollectError(f"--models file '{path}' does not exist", "give a text file with one model reference per line")
    return [line.strip() for line in p.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def check_backend_spec(name: str) -> None:
    """``--backend``: a registered name, or ``package.module:Class`` whose module can be found
    (located without being imported, so a typo never runs another module's code)."""

    if name in BACKENDS:
        return
    module, sep, cls = name.partition(":")
    ident = r"[A-Za-z_][A-Za-z0-9_]*"
    if not sep or not re.fullmatch(rf"{ident}(\.{ident})*", module) or not re.fullmatch(ident, cls):
        raise CollectError(f"unknown backend {name[:80]!r}",
                           f"use one of: {', '.join(BACKENDS)} (or package.module:Class)")
    top = module.split(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise CollectError(f"backend {name!r}: no module '{top}' is installed or on the path",
                           f"use one of: {', '.join(BACKENDS)}, or an importable package.module:Class")


def check_reference(ref: str) -> str:
    """A model reference as the store will key it (``space:`` in canonical spelling); raises for a
    malformed one before any worker starts."""
    if scheme_word(ref) is not None:
        split = split_reference(ref)
        if split is None or not split[1].strip():
            raise CollectError(f"model reference {ref[:80]!r} has an unknown scheme or no name",
                               f"write SCHEME:NAME with SCHEME one of {', '.join(NAMES)}, or an .onnx path")
        return canonical_ref(ref)
    if not ref.lower().endswith(".onnx"):
        raise CollectError(f"model {ref[:80]!r} is neither a model reference nor an .onnx path",
                           "write e.g. space:{...}, timm:resnet50 or path/to/model.onnx")
    if not Path(ref).is_file():
        raise CollectError(f"no ONNX file at '{ref}'", "check the path")
    return str(Path(ref).resolve())


def collect_options(args) -> dict:
    """Every argument of ``collect run`` checked and converted; raises CollectError on the first bad one."""

    check_backend_spec(args.backend)  # before anything it names is imported
    cls = backend_class(args.backend)
    o = {"backend": args.backend}
    o["batches"] = parse_batches(args.batches)
    o["phases"] = _list(args.phases, "--phases", PHASES)
    o["precisions"] = _list(args.precisions, "--precisions", PRECISIONS)
    o["optimizer"] = _list(args.optimizer, "--optimizer", OPTIMIZERS)[0]
    o["input_shapes"] = parse_shapes(args.input_shape)
    for phase in o["phases"]:
        if phase not in cls.phases:
            raise CollectError(f"backend {args.backend} cannot run the {phase} phase (it runs: {', '.join(cls.phases)})",
                               f"give --phases {','.join(cls.phases)} or another --backend")
    for precision in o["precisions"]:
        if precision not in cls.precisions:
            raise CollectError(f"backend {args.backend} does not run precision {precision} "
                               f"(it runs: {', '.join(cls.precisions)})", "choose --precisions among those")
    threads = _int(args.threads, "--threads") if args.threads is not None else None
    protocol = {"time_cap_s": _float(args.time_cap, "--time-cap"), "min_reps": _int(args.min_reps, "--min-reps"),
                "max_reps": _int(args.max_reps, "--max-reps"), "rel_ci": _float(args.rel_ci, "--rel-ci"),
                "warmup_reps": _int(args.warmup, "--warmup", 0)}
    try:
        Protocol(**protocol)
    except Exception as e:  # noqa: BLE001 - PerfseerError with the field's name
        raise CollectError(f"bad measurement settings: {getattr(e, 'problem', e)}",
                           "check --min-reps, --max-reps, --time-cap and --rel-ci") from None
    o["backend_options"] = {"protocol": protocol, **({"threads": threads} if threads is not None else {})}
    o["timeout"] = _float(args.timeout, "--timeout")
    o["recycle"] = _int(args.recycle, "--recycle")
    o["limit"] = _int(args.limit, "--limit") if args.limit is not None else None
    refs = list(args.model)
    if args.models:
        refs += read_model_file(args.models)

    o["space"] = _int(args.space, "--space", 0, MAX_SPACE) if args.space is not None else None
    o["seed"] = _int(args.seed, "--seed", 0)
    o["classes"] = _int(args.classes, "--classes")
    o["refs"] = [check_reference(r) for r in refs]
    if o["space"] or any(r.startswith("space:") for r in o["refs"]):
        for shape in o["input_shapes"]:
            dims = shape.split("x")
            if len(dims) != 3 or dims[0] != "3":
                raise CollectError(f"--input-shape {shape} does not fit the model space's networks, which take "
                                   "RGB images", "give 3xHxW, e.g. 3x64x64 or 3x224x224")
    db = Path(args.db)
    if not db.parent.exists():
        raise CollectError(f"the folder of --db '{args.db}' does not exist", "create it first or choose another path")
    o["db"] = str(db)
    return o


# -- the subcommands ------------------------------------------------------------------------------------

def run_collect(args: argparse.Namespace) -> int:
    o = collect_options(args)
    models = models_from(o["space"], o["seed"], o["refs"], o["classes"]) if (o["space"] or o["refs"]) else None
    err = Console(stderr=True, highlight=False)
    out = _console()
    store = Store(o["db"])
    runner = None
    try:
        if models is None and not store.pending(retry_failed=args.retry_failed):
            raise CollectError(f"nothing to measure: '{o['db']}' has no pending job and no models were given",
                               "give --space N, --model REF or --models FILE")
        if args.ray:
            runner = RayRunner(args.ray, o["backend"], o["backend_options"], o["recycle"],
                               gpus=1 if o["backend"] == "torch-cuda" else 0)
        else:
            runner = Worker(o["backend"], o["backend_options"], recycle_every=o["recycle"], log_path=args.worker_log)
        started = time.perf_counter()
        with err.status(f"starting the {o['backend']} worker (imports and warms up its libraries)"):
            info = runner.start()
        hardware = args.device or info["hardware"]
        grid = (Grid(models, o["input_shapes"], o["batches"], o["phases"], o["precisions"], o["optimizer"])
                if models is not None else None)
        summary = Summary()
        pending = plan(store, grid, hardware, info["setting"], args.retry_failed, summary)
        device = f"{hardware}/{info['setting']}"
        if not args.quiet:
            err.print(f"{device}: {summary.planned} jobs planned ({summary.new} new), {len(pending)} to measure; "
                      f"worker ready in {time.perf_counter() - started:.1f} s")
        _run_with_progress(runner, store, pending, o, summary, err, args.quiet or not pending, run_local)
        _print_summary(out, summary, o["db"])
    finally:
        if runner is not None:
            runner.close()
        store.close()
    return 0


def _run_with_progress(runner, store, pending, o, summary, console, quiet, run_local) -> None:
    total = len(pending) if o["limit"] is None else min(len(pending), o["limit"])
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                        TextColumn("{task.fields[counts]}"), console=console, disable=quiet, transient=False)

    def on_result(job, m):
        counts = " ".join(f"{s} {n}" for s, n in sorted(summary.statuses.items()))
        progress.update(task, advance=1, counts=counts, description=_short(job.model, job.batch_size, job.phase))

    with progress:
        task = progress.add_task("measuring", total=total, counts="")
        if hasattr(runner, "slots"):  # a RayRunner
            runner.run(store, pending, o["timeout"], on_result, summary, o["limit"])
        else:
            run_local(store, pending, runner, o["timeout"], on_result, summary, o["limit"])


def _console():
    """stdout for results: no wrapping of long paths, no markup or highlighting of user text."""

    return Console(soft_wrap=True, markup=False, highlight=False)


def _short(model: str, batch: int, phase: str) -> str:
    """A short label for progress and failure lists (a space: config is long: its hash stands in)."""
    if model.startswith("space:"):
        model = "space#" + hashlib.sha1(model.encode()).hexdigest()[:8]
    elif len(model) > 30:
        model = model[:27] + "..."
    return f"{model} b{batch} {phase}"


def _print_summary(console, summary, db: str) -> None:
    taken = (f"; {summary.taken} jobs measured or being measured by another collector on '{db}'"
             if summary.taken else "")
    if not summary.done:
        console.print(f"nothing measured; '{db}' is up to date" if not taken else f"nothing measured{taken}")
        return
    parts = ", ".join(f"{n} {s}" for s, n in sorted(summary.statuses.items()))
    line = f"measured {summary.done} jobs: {parts}{taken}"
    if summary.seconds:
        line += (f"; per measurement: median {statistics.median(summary.seconds):.2f} s, "
                 f"mean {statistics.fmean(summary.seconds):.2f} s")
    console.print(line)
    console.print(f"export: perfseer collect export --db {db} --out table.csv")


def run_export(args: argparse.Namespace) -> int:
    with Store(_existing(args.db), create=False) as store:
        check_out_file(args.out, suffixes=(".csv", ".parquet"))
        table, excluded = store.export(args.out, args.failures, args.source)
    console = _console()
    unconverged = int((table["converged"] == False).sum()) if "converged" in table else 0  # noqa: E712
    msg = f"wrote {len(table)} rows to {args.out}"
    if unconverged:
        msg += f" ({unconverged} not converged, flagged converged=False)"
    console.print(msg)
    if excluded:
        console.print("left out: " + ", ".join(f"{n} {s}" for s, n in sorted(excluded.items()))
                      + (f" (listed in {args.failures})" if args.failures else " (--failures FILE lists them)"))
    return 0


def _existing(db: str) -> str:
    if not os.path.isfile(db):
        raise CollectError(f"no collection store at '{db}'", "check the --db path (perfseer collect run creates it)")
    return db


def run_status(args: argparse.Namespace) -> int:
    n_fail = _int(args.failures, "--failures", 0)
    console = _console()
    with Store(_existing(args.db), create=False) as store:
        counts = store.counts()
        t = Table(title=f"{args.db}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        t.add_column("device", no_wrap=True)
        for s in ("pending", *STATUSES):
            t.add_column(s, justify="right")
        for device, c in sorted(counts.items()):
            t.add_row(device, *(f"{c.get(s, 0):,}" for s in ("pending", *STATUSES)))
        console.print(t)
        envs = store.db.execute("SELECT e.fingerprint, e.info, COUNT(r.job_id) FROM environments e "
                                "LEFT JOIN results r ON r.env_id = e.id GROUP BY e.id").fetchall()
        for fp, info, n in envs:
            env = json.loads(info)
            libs = env.get("libraries", {})
            what = env.get("gpu") or env.get("cpu")
            console.print(f"environment {fp}: {n} results; {what}, {env.get('backend')}, threads {env.get('threads')}, "
                          f"torch {libs.get('torch', '-')}, allocator {env.get('allocator')}, host {env.get('hostname')}")
        if n_fail:
            rows = store.db.execute(
                "SELECT j.model, j.batch_size, j.phase, j.precision, r.status, r.error FROM results r "
                "JOIN jobs j ON j.id = r.job_id WHERE r.status NOT IN ('ok') ORDER BY r.finished DESC LIMIT ?",
                (n_fail,)).fetchall()
            if rows:
                console.print(f"latest {len(rows)} failures:")
                for model, batch, phase, precision, status, error in rows:
                    console.print(f"  {status:<11} {_short(model, batch, phase)} {precision}: "
                                  f"{(error or '')[:160]}")
    return 0
