"""``perfseer ops``: the operators with a cost function of their own, by family."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from perfseer.features.ops import REGISTRY


def add_parser(sub) -> None:
    p = sub.add_parser("ops", help="list the operators perfseer has cost functions for",
                       description="List the ONNX operator types that have their own cost function, "
                                   "grouped by family, with each family's FLOP convention.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def coverage() -> dict[str, dict]:
    """``{family: {"ops": [...], "convention": "..."}}`` from the operator registry."""

    out: dict[str, dict] = {}
    for op, fn in sorted(REGISTRY.items()):
        module = sys.modules[fn.__module__]
        family = fn.__module__.rsplit(".", 1)[-1]
        entry = out.setdefault(family, {"ops": [], "convention": " ".join((module.__doc__ or "").split())})
        entry["ops"].append(op)
    return out


def run(args: argparse.Namespace) -> int:
    cov = coverage()
    if args.json:
        from perfseer.cli.bounds import dumps  # deferred: loads onnx

        print(dumps(cov, indent=2))
        return 0

    table = Table(title=f"{sum(len(v['ops']) for v in cov.values())} operator types with their own cost function",
                  show_lines=True)
    table.add_column("family", style="bold")
    table.add_column("operators")
    table.add_column("convention")
    for family, entry in cov.items():
        table.add_row(family, ", ".join(entry["ops"]), entry["convention"])
    Console().print(table)
    return 0
