"""The benchmark runner.

    python -m benchmarks list
    python -m benchmarks run SUITE [--quick] [--work DIR] [--no-write]

``run`` executes the suite's steps (each result kept under ``--work``, default ``.bench-work/``, so
a second run resumes and skips finished steps), prints the suite's section and writes it into
``docs/results.md`` between ``<!-- suite:NAME -->`` and ``<!-- /suite:NAME -->`` (not with
``--no-write``, and never for ``--quick``, whose figures are not the page's).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.runner import DEFAULT_WORK, RESULTS_MD, BenchError, Context, finished_steps, run_steps, write_section
from benchmarks.suites import all_suites, get_suite


def cmd_list(_args) -> int:
    for s in all_suites():
        print(f"{s.name}\n    {s.description}\n    reads: {s.reads}\n"
              f"    time here: full {s.time_full}; --quick {s.time_quick}\n")
    return 0


def cmd_run(args) -> int:
    suite = get_suite(args.suite)
    work = Path(args.work) / (suite.name + ("-quick" if args.quick else ""))
    opts = dict(kv.split("=", 1) for kv in (args.option or []))
    ctx = Context(quick=args.quick, work=work, options=opts, log=lambda m: print(m, file=sys.stderr))
    if args.partial:  # a long run still going (or stopped): its finished steps now, the rest named
        results, pending = finished_steps(suite, ctx)
        try:
            body = suite.render(ctx, results)
        except KeyError as e:
            raise BenchError(f"{suite.name}: step {e} has not finished; nothing to render yet") from None
        if pending:
            shown = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
            body += (f"\n\n*Not run yet: {len(pending)} steps ({shown}; `python -m benchmarks run {suite.name}` "
                     "resumes and completes this section).*")
    else:
        results = run_steps(suite, ctx)
        body = suite.render(ctx, results)
    print(body)
    if args.quick or args.no_write:
        print(f"\n(not written to {RESULTS_MD.name}: {'--quick' if args.quick else '--no-write'})", file=sys.stderr)
    else:
        write_section(suite.name, body, Path(args.page))
        print(f"\nwritten: section '{suite.name}' of {args.page}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="name each suite, what it reads and how long it takes").set_defaults(fn=cmd_list)
    r = sub.add_parser("run", help="run one suite and regenerate its section of docs/results.md")
    r.add_argument("suite", help="a suite name (python -m benchmarks list)")
    r.add_argument("--quick", action="store_true", help="a few minutes: a subset, printed only")
    r.add_argument("--work", default=str(DEFAULT_WORK), help="where step results are kept (default .bench-work/)")
    r.add_argument("--no-write", action="store_true", help="print the section, leave docs/results.md alone")
    r.add_argument("--partial", action="store_true",
                   help="run nothing: render the section from the steps a run has finished, naming the others")
    r.add_argument("--page", default=str(RESULTS_MD), help=argparse.SUPPRESS)
    r.add_argument("--option", "-o", action="append", metavar="KEY=VALUE", help="a suite-specific option")
    r.set_defaults(fn=cmd_run)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except BenchError as e:
        print(e.code, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
