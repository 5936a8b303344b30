"""The ``perfseer`` command: one module per subcommand, each a parser function plus a plain function."""

from __future__ import annotations

import argparse
import sys

from perfseer import __version__
from perfseer.cli import collect as collect_cmd
from perfseer.cli import data as data_cmd
from perfseer.cli import devices as devices_cmd
from perfseer.cli import graph as graph_cmd
from perfseer.cli import ops as ops_cmd
from perfseer.cli import predict as predict_cmd
from perfseer.cli import train as train_cmd
from perfseer.errors import PerfseerError

SUBCOMMANDS = {"graph": graph_cmd, "ops": ops_cmd, "data": data_cmd, "collect": collect_cmd, "train": train_cmd,
               "predict": predict_cmd, "devices": devices_cmd}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfseer",
        description="Predict deep-learning model performance from the computational graph.",
    )
    parser.add_argument("--version", action="version", version=f"perfseer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PerfseerError as e:
        print(f"perfseer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
