"""``perfseer data import SOURCE DIR --out TABLE``: a public benchmark's folder -> a measurement table."""

from __future__ import annotations

import argparse
import time

SOURCES = ("timm-benchmark", "help-nas")  # perfseer.data.importers.IMPORTERS, without importing pandas


def add_parser(sub) -> None:
    p = sub.add_parser("data", help="measurement tables: import public benchmarks",
                       description="Work with measurement tables (CSV or Parquet; see the README).")
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


def import_to_table(source: str, directory: str, out: str):
    """Import ``directory`` with the importer ``source`` and write the table to ``out``.

    The plain function behind the subcommand, for use from Python.  Returns
    ``(table, report)``.
    """
    from perfseer.data.importers import import_benchmark
    from perfseer.data.table import table_format, write_table

    table_format(out)  # a bad suffix or a missing pyarrow fails before the import, not after
    table, report = import_benchmark(source, directory)
    return write_table(table, out), report


def run(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    table, report = import_to_table(args.source, args.dir, args.out)
    render(table, report, args.out, time.perf_counter() - start)
    return 0


def _batches(values) -> str:
    values = sorted(set(int(v) for v in values))
    if len(values) <= 4:
        return ", ".join(map(str, values))
    return f"{values[0]}-{values[-1]} ({len(values)})"


def render(table, report, out: str, seconds: float) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

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
