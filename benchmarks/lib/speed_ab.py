"""Paired speed comparison of two source trees (e.g. ``main`` and a branch) on a shared machine.

    python -m benchmarks.lib.speed_ab --old /work/main/src --new src [--rounds 6] [--cases extract,rebind,memory,compare]

On a machine whose load moves by the minute, an absolute timing of one tree says little; the two
trees are timed here in alternating fresh processes, round after round, so that both see the same
load, and each round gives a ratio new/old.  Cases:

* ``extract``: ``perfseer.extract`` of the ResNet-50 dynamo ONNX file (``extract_speed``'s), the
  median CPU milliseconds of 20 calls in this process and the shape-inference helper, and the wall
  median;
* ``rebind``: ``PerfGraph.with_batch(32)`` of that graph, the median CPU milliseconds of 150 calls;
* ``memory``: ``perfseer memory timm:resnet50 --batch 64 --phase train --optimizer sgd`` in a fresh
  process (``memory_speed``'s first command), wall and CPU seconds.
* ``compare``: ``perfseer.compare`` of ResNet-50's training step at batch 64 on every registered
  GPU (memory not simulated): the CPU seconds of the first call on the graph and the median of
  three more.

Prints per case the medians over the rounds of each tree and the median of the paired ratios, with
the 1-minute load average at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_EXTRACT = """
import json, statistics, time
import perfseer
from benchmarks.lib import extract_speed
p = str(extract_speed.resnet50_files()["dynamo"])
cpu = extract_speed.cpu_ms(p, 20)
ts = []
for _ in range(20):
    t0 = time.perf_counter(); perfseer.extract(p); ts.append(time.perf_counter() - t0)
print(json.dumps({"cpu_ms": cpu, "wall_ms": statistics.median(ts) * 1e3}))
"""
_REBIND = """
import json, statistics, time
import perfseer
from benchmarks.lib import extract_speed
pg = perfseer.extract(str(extract_speed.resnet50_files()["dynamo"]))
for _ in range(5): pg.with_batch(32)
ts = []
for _ in range(150):
    t0 = time.process_time(); pg.with_batch(32); ts.append(time.process_time() - t0)
print(json.dumps({"cpu_ms": statistics.median(ts) * 1e3}))
"""
_COMPARE = """
import json, statistics, time
import perfseer
pg = perfseer.extract("timm:resnet50", batch=64)
t0 = time.process_time(); perfseer.compare(pg, batch=64, phase="train", memory=False); first = time.process_time() - t0
ts = []
for _ in range(3):
    t0 = time.process_time(); perfseer.compare(pg, batch=64, phase="train", memory=False); ts.append(time.process_time() - t0)
print(json.dumps({"first_s": first, "again_s": statistics.median(ts)}))
"""
MEMORY = ["memory", "timm:resnet50", "--batch", "64", "--phase", "train", "--optimizer", "sgd"]


def _snippet(code: str, src: str) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{src}{os.pathsep}{ROOT}")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _memory(src: str) -> dict:
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "perfseer.cli.main", *MEMORY], env=env, capture_output=True, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall, "cpu_s": after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime}


CASES = {"extract": lambda src: _snippet(_EXTRACT, src), "rebind": lambda src: _snippet(_REBIND, src),
         "memory": _memory, "compare": lambda src: _snippet(_COMPARE, src)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the source folder of the reference tree (holding perfseer/)")
    ap.add_argument("--new", default=str(ROOT / "src"), help="the source folder of the tree to compare (default: this one)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    args = ap.parse_args(argv)
    srcs = {"old": str(Path(args.old).resolve()), "new": str(Path(args.new).resolve())}
    for case in args.cases.split(","):
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for _ in range(args.rounds):
            for tree, src in srcs.items():
                runs[tree].append(CASES[case](src))
        for key in runs["old"][0]:
            old = [r[key] for r in runs["old"]]
            new = [r[key] for r in runs["new"]]
            ratio = statistics.median(b / a for a, b in zip(old, new))
            print(f"{case:8s} {key:7s} old {statistics.median(old):8.2f}  new {statistics.median(new):8.2f}  "
                  f"new/old (median of {args.rounds} paired rounds) {ratio:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
