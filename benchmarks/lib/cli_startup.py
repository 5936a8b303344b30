"""Start-up time of the command line: ``perfseer --help`` and commands that need no torch, beside
the interpreter's own start (``python -c pass``), medians of ``--repeats`` fresh processes.

    python -m benchmarks.lib.cli_startup --repeats 10

Target (issue 15): ``perfseer --help`` <= 0.5 s here.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "perfseer --help": [sys.executable, "-m", "perfseer.cli.main", "--help"],
    "perfseer predict --help": [sys.executable, "-m", "perfseer.cli.main", "predict", "--help"],
    "perfseer devices": [sys.executable, "-m", "perfseer.cli.main", "devices"],
    "perfseer predictors": [sys.executable, "-m", "perfseer.cli.main", "predictors"],
    "perfseer graph --help": [sys.executable, "-m", "perfseer.cli.main", "graph", "--help"],
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"CLI start-up, median of {args.repeats} processes", title_justify="left")
    for c in ("command", "median s", "min s", "max s"):
        t.add_column(c, justify="left" if c == "command" else "right")
    for name, cmd in COMMANDS.items():
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            times.append(time.perf_counter() - t0)
            if r.returncode != 0:
                raise SystemExit(f"{name} failed: {r.stderr.decode()[-1000:]}")
        t.add_row(name, f"{statistics.median(times):.3f}", f"{min(times):.3f}", f"{max(times):.3f}")
    Console().print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
