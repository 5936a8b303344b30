"""Speed of ``perfseer memory``: the first call in a fresh process (imports and model build
included), and ``--max-batch``.

Each command runs in its own Python process, ``--repeat`` times; the table gives the wall time
and the CPU time (user + system of the child process), and the 1-minute load average before each
run.  On a shared machine the wall time includes waiting for a core; the CPU time is what the
command costs (it too grows on a loaded machine: two cores' caches and memory bandwidth are
shared).

    python -m benchmarks.lib.memory_speed [--repeat 3]
    python -m benchmarks.lib.memory_speed --breakdown     # CPU seconds of each stage, in one process

Prints a table and writes benchmarks/results/memory_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "resnet50 b64 train sgd": ["memory", "timm:resnet50", "--batch", "64", "--phase", "train", "--optimizer", "sgd"],
    "resnet50 train sgd --max-batch a100-40gb": ["memory", "timm:resnet50", "--batch", "64", "--phase", "train",
                                                 "--optimizer", "sgd", "--device", "a100-40gb", "--max-batch"],
    "resnet50 b64 infer (ONNX example)": ["memory", "example:resnet50", "--batch", "64", "--phase", "infer"],
}
TARGETS = {"resnet50 b64 train sgd": 3.0, "resnet50 train sgd --max-batch a100-40gb": 20.0}


def timed(argv: list[str]) -> tuple[float, float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "perfseer.cli.main", *argv], env=env, capture_output=True, text=True,
                         check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout


BREAKDOWN = """
import time
T = time.process_time
t = [(T(), "start")]
import torch
t.append((T(), "import torch"))
import perfseer.cli.main, perfseer.cli.memory
from perfseer.memory.api import memory, resolve_model
t.append((T(), "import perfseer (CLI, memory)"))
src = resolve_model("timm:resnet50")
t.append((T(), "import timm, build the model on meta"))
memory("timm:resnet50", batch=64, phase="train", optimizer="sgd", _src=src)
t.append((T(), "simulate + allocator + breakdown (first)"))
import torch.fx.experimental.symbolic_shapes
memory("timm:resnet50", batch=64, phase="train", optimizer="sgd", _src=src)
t.append((T(), "the same again in this process"))
for a, b in zip(t, t[1:]):
    print(f"{b[1]:44s} {b[0] - a[0]:.2f}")
"""


def breakdown() -> None:
    """Where the first call's CPU time goes (time.process_time in one fresh process)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    print(subprocess.run([sys.executable, "-c", BREAKDOWN], env=env, capture_output=True, text=True,
                         check=True).stdout, end="")
    code = "import time, torch; t = time.process_time(); import torch.fx.experimental.symbolic_shapes; " \
           "print(f'{\"import sympy (symbolic_shapes), after torch\":44s} {time.process_time() - t:.2f}')"
    print(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout, end="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--breakdown", action="store_true", help="only print where the first call's CPU time goes")
    args = ap.parse_args()
    if args.breakdown:
        breakdown()
        return
    rows = []
    for name, argv in COMMANDS.items():
        runs, loads = [], []
        for _ in range(args.repeat):
            loads.append(round(os.getloadavg()[0], 2))  # 1-minute load average just before the run
            runs.append(timed(argv))
        walls = sorted(r[0] for r in runs)
        cpus = sorted(r[1] for r in runs)
        last_line = runs[-1][2].strip().splitlines()[-1]
        rows.append({"command": "perfseer " + " ".join(argv), "name": name, "wall_s": walls, "cpu_s": cpus,
                     "wall_median_s": walls[len(walls) // 2], "cpu_median_s": cpus[len(cpus) // 2],
                     "target_s": TARGETS.get(name), "output_last_line": last_line,
                     "runs": [{"wall_s": round(r[0], 3), "cpu_s": round(r[1], 3), "loadavg_1min_before": lo}
                              for r, lo in zip(runs, loads)]})
    print("| command | wall s (median of %d) | CPU s (median) | wall s of each run (load average before it) | "
          "target s | last line |" % args.repeat)
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        each = ", ".join(f"{x['wall_s']:.2f} ({x['loadavg_1min_before']:.1f})" for x in r["runs"])
        print(f"| {r['name']} | {r['wall_median_s']:.2f} | {r['cpu_median_s']:.2f} | {each} | {r['target_s'] or ''} | "
              f"{r['output_last_line']} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "memory_speed.json"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"rows": rows, "loadavg": os.getloadavg(), "cpus": os.cpu_count()}, indent=1) + "\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    main()
