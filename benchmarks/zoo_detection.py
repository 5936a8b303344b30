"""Every torchvision detection and segmentation model, extracted by name: time, counts, coverage.

Each model runs in its own process (one at a time, ``nice``-friendly, one torch thread) so that
its time includes importing torch and exporting from scratch, as a user's first
``perfseer graph torchvision:NAME`` does.  Detectors are exported at batch 1 and their default
image size (``perfseer.sources.zoo.default_input_shape``), with the default number of boxes
(``perfseer.graph.detection.DEFAULT_BOXES``) unless ``--boxes`` is given.

    python benchmarks/zoo_detection.py [--models NAME ...] [--boxes N] [--timeout 600]

Prints one row per model (seconds, parameters, GMACs, GFLOPs, nodes, the NMS / RoIAlign / TopK
counts, uncovered operators, or the error), writes benchmarks/results/zoo_detection.json, and
prints a markdown table next to torchvision's own figures (the ``_ops`` GFLOPS, which are
multiply-accumulates, and ``num_params`` of each model's DEFAULT weights, read from torchvision's
metadata: no download).  ``--table FILE`` prints that table from an earlier run's JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

DETECTION = ["fasterrcnn_resnet50_fpn", "fasterrcnn_resnet50_fpn_v2", "fasterrcnn_mobilenet_v3_large_fpn",
             "fasterrcnn_mobilenet_v3_large_320_fpn", "maskrcnn_resnet50_fpn", "maskrcnn_resnet50_fpn_v2",
             "keypointrcnn_resnet50_fpn", "retinanet_resnet50_fpn", "retinanet_resnet50_fpn_v2", "fcos_resnet50_fpn",
             "ssd300_vgg16", "ssdlite320_mobilenet_v3_large"]
SEGMENTATION = ["fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50", "deeplabv3_resnet101",
                "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]

_CHILD = """
import json, sys, time
start = time.monotonic()
import perfseer
name, boxes = sys.argv[1], int(sys.argv[2])
try:
    pg = perfseer.extract("torchvision:" + name, dims={"boxes": boxes} if boxes else None)
    s = pg.summary()
    ops = s["op_counts"]
    out = {"params": s["params"], "gmacs": s["macs"] / 1e9, "gflops": s["flops"] / 1e9, "nodes": s["num_nodes"],
           "input": list(pg.graph.tensors[pg.graph.inputs[0]].shape), "precision": s["precision"],
           "nms": ops.get("NonMaxSuppression", 0), "roi_align": ops.get("RoiAlign", 0), "topk": ops.get("TopK", 0),
           "uncovered": s["uncovered_ops"]}
except Exception as e:
    out = {"error": f"{type(e).__name__}: {e}"}
out["seconds"] = round(time.monotonic() - start, 1)
print("RESULT " + json.dumps(out))
"""


def run_one(name: str, boxes: int, timeout: float) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PERFSEER_EXPORT_TIMEOUT=str(timeout))
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, name, str(boxes)], capture_output=True, text=True,
                              env=env, timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        return {"error": "the process did not finish", "seconds": round(time.monotonic() - start, 1)}
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1],
                "seconds": round(time.monotonic() - start, 1)}
    return json.loads(line[len("RESULT "):])


def markdown(rows: dict) -> str:
    from perfseer.sources.zoo import import_zoo

    tv = import_zoo("torchvision")
    out = ["| model | input | s | params | torchvision params | GMACs | torchvision GMACs | nodes | NMS / RoiAlign / TopK |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, r in rows.items():
        meta = tv.get_model_weights(name).DEFAULT.meta
        if "error" in r:
            out.append(f"| {name} | | {r['seconds']} | {r['error'][:120]} | | | | | |")
            continue
        shape = "x".join(map(str, r["input"][1:]))
        out.append(f"| {name} | {shape} | {r['seconds']:.0f} | {r['params']:,} | {meta['num_params']:,} | "
                   f"{r['gmacs']:.2f} | {meta['_ops']:.2f} | {r['nodes']} | {r['nms']} / {r['roi_align']} / {r['topk']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=DETECTION + SEGMENTATION)
    parser.add_argument("--boxes", type=int, default=0, help="stated number of boxes (0: the default)")
    parser.add_argument("--timeout", type=float, default=600.0, help="export time limit per model, seconds")
    parser.add_argument("--table", metavar="FILE", help="only print the markdown table of an earlier run's JSON")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown(json.loads(Path(args.table).read_text())))
        return 0
    rows = {}
    print(f"{'model':40} {'s':>6} {'params':>11} {'GMACs':>8} {'GFLOPs':>8} {'nodes':>6} nms roi topk  uncovered / error")
    for name in args.models:
        r = rows[name] = run_one(name, args.boxes, args.timeout)
        if "error" in r:
            print(f"{name:40} {r['seconds']:6.1f}  {r['error'][:160]}", flush=True)
        else:
            print(f"{name:40} {r['seconds']:6.1f} {r['params']:11,d} {r['gmacs']:8.2f} {r['gflops']:8.2f} "
                  f"{r['nodes']:6d} {r['nms']:3d} {r['roi_align']:3d} {r['topk']:4d}  {r['uncovered'] or ''}",
                  flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "zoo_detection.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(markdown(rows))
    return 0 if all("error" not in r for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
