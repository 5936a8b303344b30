"""``perfseer data``: work with measurement tables.

``perfseer data import SOURCE DIR --out TABLE``: a public benchmark's folder -> a measurement table.
``perfseer data build TABLE --out DIR``: a measurement table -> a graph dataset
(:mod:`perfseer.data.dataset`).
"""

from __future__ import annotations

import argparse
import time

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from perfseer.cli.bounds import check_out_dir, check_out_file

SOURCES = ("timm-benchmark", "help-nas")  # perfseer.data.importers.IMPORTERS, without importing pandas


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="measurement tables: import public benchmarks, build graph datasets",
                       description="Work with measurement tables (CSV or Parquet; the columns: docs/guide/calibrate.md).")
    actions = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    imp = actions.add_parser(
        "import", help="import a public benchmark's folder into a measurement table",
        description="Read every file of a public benchmark in DIR and write one measurement table. "
                    "timm-benchmark: timm's benchmark-*.csv result files; help-nas: HELP's "
                    "NAS-Bench-201, FBNet and Once-for-All latency CSVs. Invalid values are dropped "
                    "and counted.")
    imp.add_argument("source", choices=SOURCES, help="which benchmark the folder holds")
    imp.add_argument("dir", metavar="DIR", help="the folder of the benchmark's files")
    imp.add_argument("--out", required=True, metavar="TABLE",
                     help="the table to write: .csv, or .parquet (needs perfseer[parquet])")
    imp.set_defaults(func=run)
    build = actions.add_parser(
        "build", help="build the graph dataset of a measurement table",
        description="Turn every distinct (model, input_shape) of TABLE into a PerfGraph once, re-bind it "
                    "to each batch size, and write DIR/graphs.safetensors, DIR/labels.parquet (or .csv "
                    "without pyarrow) with train/val/test splits by model and by family, DIR/failures.csv "
                    "and DIR/manifest.json. Exported models are cached, so an interrupted build resumes "
                    "where it stopped.")
    build.add_argument("table", metavar="TABLE", help="the measurement table (.csv or .parquet)")
    build.add_argument("--out", required=True, metavar="DIR", help="the dataset folder to write")
    build.add_argument("--workers", type=_count, default=None, metavar="N",
                       help="worker processes for exports (default: CPU count, at most 4; 0: in this process)")
    build.add_argument("--cache", metavar="DIR", default=None,
                       help="skeleton cache folder (default: $PERFSEER_CACHE/skeletons or "
                            "~/.cache/perfseer/skeletons)")
    build.add_argument("--split-seed", type=int, default=0, metavar="S",
                       help="seed of the train/val/test assignment (default 0)")
    build.add_argument("--retry-failed", action="store_true",
                       help="export again models recorded as failed by an earlier build")
    build.add_argument("--compact", action="store_true",
                       help="write DIR/graphs.npz in the compact format (one entry per model and input "
                            "shape, distinct rows stored once; same graphs, small enough to commit)")
    build.set_defaults(func=run_build)
    comp = actions.add_parser(
        "compact", help="copy a built dataset with its graphs in the compact format",
        description="Write DST with the graphs of the dataset SRC as graphs.npz (batch sizes re-derived "
                    "exactly, distinct feature rows stored once, compressed), and its labels, failures "
                    "and manifest.")
    comp.add_argument("src", metavar="SRC", help="a dataset folder written by perfseer data build")
    comp.add_argument("--out", required=True, metavar="DST", help="the folder to write")
    comp.set_defaults(func=run_compact)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of processes >= 0, got {text!r}")
    return value


def import_to_table(source: str, directory: str, out: str):
    """Import ``directory`` with the importer ``source`` and write the table to ``out``.

    The plain function behind the subcommand, for use from Python.  Returns
    ``(table, report)``.
    """
    from perfseer.data.importers import import_benchmark  # deferred: loads pandas, pyarrow
    from perfseer.data.table import table_format, write_table  # deferred: loads pandas, pyarrow

    table_format(out)  # a bad suffix or a missing pyarrow fails before the import, not after
    table, report = import_benchmark(source, directory)
    return write_table(table, out), report


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    check_out_file(args.out, suffixes=(".csv", ".parquet"))
    table, report = import_to_table(args.source, args.dir, args.out)
    render(table, report, args.out, time.perf_counter() - start)
    return 0


def _batches(values) -> str:
    values = sorted(set(int(v) for v in values))
    if len(values) <= 4:
        return ", ".join(map(str, values))
    return f"{values[0]}-{values[-1]} ({len(values)})"


def render(table, report, out: str, seconds: float) -> None:
    console = Console()
    batches = table.groupby("device", sort=False)["batch_size"].unique() if len(table) else {}
    dropped = report.dropped_by_device()
    files = len(report.files)
    t = Table(title=f"{report.source}: {files} file{'' if files == 1 else 's'} from {report.directory}",
              title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("device", no_wrap=True)
    t.add_column("rows", justify="right", no_wrap=True)
    t.add_column("dropped", justify="right", no_wrap=True)
    t.add_column("batches", no_wrap=True)
    for device in sorted(set(report.rows) | set(dropped)):
        t.add_row(device, f"{report.rows[device]:,}", f"{dropped[device]:,}",
                  _batches(batches[device]) if device in batches else "")
    t.add_section()
    t.add_row("total", f"{report.total_rows:,}", f"{report.total_dropped:,}", "", style="bold")
    console.print(t)
    if report.total_dropped:
        reasons = Table(title="dropped rows by reason", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        reasons.add_column("reason")
        reasons.add_column("rows", justify="right")
        for reason, n in report.dropped_by_reason().most_common():
            reasons.add_row(reason, f"{n:,}")
        console.print(reasons)
    else:
        console.print("no rows dropped")
    if report.ignored:
        console.print(f"[yellow]ignored {len(report.ignored)} file(s) that are not {report.source} files:[/yellow] "
                      + ", ".join(report.ignored))
    console.print(f"wrote {len(table):,} row{'' if len(table) == 1 else 's'} to {out} in {seconds:.1f} s")


def run_build(args: argparse.Namespace) -> int:
    from perfseer.data.dataset import build_dataset  # deferred: loads onnx, pandas

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[counts]}"),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    bar = Progress(*columns, console=Console(stderr=True))
    job = bar.add_task("models", total=None, counts="")

    def progress(done, total, counts):
        if not bar.live.is_started:  # only once the table is read: a bad table is one error line
            bar.start()
        text = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        bar.update(job, completed=done, total=total, counts=text)

    check_out_dir(args.out)
    try:
        report = build_dataset(args.table, args.out, workers=args.workers, cache=args.cache,
                               split_seed=args.split_seed, retry_failed=args.retry_failed, progress=progress,
                               compact=args.compact)
    finally:
        if bar.live.is_started:
            bar.stop()
    render_build(report)
    return 0 if report.counts["graphs"] or not report.counts["rows"] else 1


def run_compact(args: argparse.Namespace) -> int:
    from perfseer.data.dataset import compact_dataset  # deferred: loads onnx, pandas

    check_out_dir(args.out)
    c = compact_dataset(args.src, args.out)
    print(f"wrote {c['graphs']:,} graphs of {c['models']:,} (model, input shape) to {args.out}: "
          f"{c['distinct_node_rows']:,} distinct node rows of {c['node_rows']:,}, "
          f"{c['distinct_edge_rows']:,} distinct edge rows of {c['edge_rows']:,}"
          + (f"; {c['per_batch']} stored once per batch (features not affine in the batch)" if c["per_batch"] else ""))
    return 0


def render_build(report) -> None:
    from perfseer.data.dataset import failure_summary  # deferred: loads onnx, pandas

    console = Console()
    c, m = report.counts, report.manifest
    t = Table(title=f"dataset {report.out}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    t.add_column("")
    t.add_column("count", justify="right")
    for name, value in (("table rows", c["rows"]), ("rows with a graph", c["rows_labelled"]),
                        ("models", c["models"]), ("(model, input shape) built", c["model_shapes_built"]),
                        ("  exported now", c["model_shapes_exported"]), ("  from the cache", c["model_shapes_cached"]),
                        ("  read from files", c["model_shapes_read"]),
                        ("(model, input shape) failed", c["model_shapes_failed"]), ("graphs", c["graphs"])):
        t.add_row(name, f"{value:,}")
    console.print(t)
    split = m["splits"]["split"]
    console.print(f"split by model (seed {split['seed']}): "
                  + ", ".join(f"{s} {split['models'][s]:,} models / {split['rows'][s]:,} rows"
                              for s in split["models"]))
    fam = m["splits"]["family_split"]
    if fam["families"]:
        console.print(f"split by family ({fam['families']} families): "
                      + ", ".join(f"{s} {fam['models'][s]:,} models" for s in fam["models"]))
    if len(report.failures):
        f = Table(title="failed models by reason (all in failures.csv)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
        f.add_column("reason")
        f.add_column("models", justify="right")
        f.add_column("rows", justify="right")
        f.add_column("example")
        for reason, models, rows, example in failure_summary(report.failures):
            f.add_row(escape(reason), f"{models:,}", f"{rows:,}", escape(example))  # '[' is rich markup
        console.print(f)
    else:
        console.print("no failed models")
    for warning in report.cache_warnings[:5]:
        console.print(f"[yellow]cache: {escape(warning)}[/yellow]")
    if not c["graphs"] and c["rows"]:
        console.print("[red]no model could be built: see failures.csv[/red]")
    console.print(f"wrote {c['graphs']:,} graphs and {c['rows_labelled']:,} labelled rows to {report.out} "
                  f"in {m['wall_time_s']:.1f} s")
