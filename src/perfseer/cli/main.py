"""The ``perfseer`` command: one module per subcommand, each a parser function plus a plain function.

Only the module of the subcommand being run is imported and asked for its full parser; the others
are listed by name and one-line help from :data:`COMMANDS`.  The subcommand modules import torch,
onnx and the rest inside their functions, so ``perfseer --help`` and commands that need no torch
start fast (see ``benchmarks/lib/cli_startup.py``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from perfseer import __version__
from perfseer.errors import PerfseerError

# subcommand -> (module whose add_parser(sub) defines it, one-line help shown by `perfseer --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "graph": ("perfseer.cli.graph", "extract a model's PerfGraph and summarise it"),
    "ops": ("perfseer.cli.ops", "list the operators perfseer has cost functions for"),
    "data": ("perfseer.cli.data", "measurement tables: import public benchmarks, build graph datasets"),
    "collect": ("perfseer.cli.collect", "measure models (latency, memory, utilisation, energy) into a resumable store"),
    "train": ("perfseer.cli.train", "train a predictor on a graph dataset"),
    "evaluate": ("perfseer.cli.train", "score a predictor on measurements"),
    "predict": ("perfseer.cli.predict", "predict a model's latency (and other metrics) with a trained predictor"),
    "predictors": ("perfseer.cli.predict", "list the bundled predictors with their coverage and test scores"),
    "devices": ("perfseer.cli.devices", "list the known GPUs and CPUs with their specs, or add one"),
    "compare": ("perfseer.cli.compare", "rank GPUs by a model's step time and throughput, saying where it does not fit"),
    "memory": ("perfseer.cli.memory", "GPU memory of a training or inference step: breakdown, largest batch, MIG slice"),
    "calibrate": ("perfseer.cli.calibrate", "a predictor for a new device from a few measurements of it"),
    "serve": ("perfseer.cli.serve", "serve predictions over HTTP: a REST API and a web page"),
    "llm": ("perfseer.cli.llm", "LLM inference: time to first token, per output token, KV cache, serving throughput"),
}


def _command_word(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word
        if word == "--":
            return None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser of ``command`` (all of them when None) beside one-line entries for the rest."""
    parser = argparse.ArgumentParser(
        prog="perfseer",
        description="Predict deep-learning model performance from the computational graph.",
    )
    parser.add_argument("--version", action="version", version=f"perfseer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = {COMMANDS[command][0]} if command in COMMANDS else {m for m, _ in COMMANDS.values()}
    if command is not None and command not in COMMANDS:
        wanted = set()  # an unknown word: argparse lists the choices
    full: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if module in wanted:
            if module not in full:
                importlib.import_module(module).add_parser(sub)
                full.add(module)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    word = _command_word(argv)
    parser = build_parser(word if word is not None else "")
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PerfseerError as e:
        print(f"perfseer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `perfseer ... | head`: the reader left; nothing to report

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
