"""Speed on this machine: extraction, prediction, the CLI's start-up, ``perfseer memory``.

Timings are medians of repeated runs (after one warm-up), with the 1-minute load average recorded
beside each step: on a shared 2-core VM they move with the load, so the table states a tolerance
(± 30 % at load average under 2; more above it) and each figure's target from the issues that set
it.  Compare speeds across commits as ratios measured in the same run (e.g. against
``python -c pass``), not as absolute numbers.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import perfseer
from perfseer.sources.zoo import import_zoo

from benchmarks.lib import cli_startup, extract_speed, memory_speed, predict_speed, speed_targets
from benchmarks.runner import Context, Step, Suite, f, md_table, run_main, timing_note

TOLERANCE = "± 30 % at a 1-minute load average under 2 on this 2-core VM (more when loaded)"


def _extract(quick: bool) -> dict:
    reps = 5 if quick else 20
    rows = []
    files = extract_speed.resnet50_files()
    for kind, path in files.items():
        t = extract_speed.timed(lambda: perfseer.extract(str(path)), reps)
        rows.append({"what": f"ResNet-50 ONNX file ({kind} export, {path.stat().st_size / 2**20:.0f} MiB) -> PerfGraph",
                     "value": t * 1e3, "unit": "ms", "target": "<= 50 ms"})
    pg = perfseer.extract(str(files["dynamo"]))
    for b in (8, 32, 256):
        t = extract_speed.timed(lambda: pg.with_batch(b), reps)
        rows.append({"what": f"batch re-binding 1 -> {b}", "value": t * 1e3, "unit": "ms", "target": "<= 5 ms"})
    for fn, n in ((extract_speed.nb201_row, 30 if quick else 300), (extract_speed.fbnet_row, 20 if quick else 200)):
        what, value, _, detail = fn(n)
        rows.append({"what": what, "value": float(value.split()[0]), "unit": "ms", "target": "", "detail": detail})
    if not quick:
        module = import_zoo("torchvision").resnet50().eval()
        t = extract_speed.timed(lambda: perfseer.extract(module, input_shape=(3, 224, 224)), 4)
        rows.append({"what": "ResNet-50 nn.Module -> PerfGraph (dynamo export on meta tensors)", "value": t,
                     "unit": "s", "target": "<= 3 s"})
        vit = extract_speed.vitl_external()
        weights = sum(p.stat().st_size for p in vit.parent.iterdir() if p.suffix == ".data") / 2**20
        for label, ref in (("ViT-L/16 ONNX + external data", str(vit)), ("timm:vit_large_patch16_224", "timm:vit_large_patch16_224")):
            r = extract_speed.peak(ref)
            rows.append({"what": f"{label}: peak RSS of a fresh process", "value": r["peak_rss_mb"], "unit": "MB",
                         "target": f"< weights ({weights:.0f} MB)"})
    return {"rows": rows}


def _predict(ctx: Context) -> dict:
    argv = ["--repeats", "5" if ctx.quick else "20", "--graphs", "200" if ctx.quick else "2000",
            "--throughput-repeats", "1" if ctx.quick else "3"]
    return run_main(predict_speed.main, argv, ctx.work / "predict.json")


def _cli(quick: bool) -> dict:
    out = {}
    for name, cmd in cli_startup.COMMANDS.items():
        times = []
        for _ in range(3 if quick else 10):
            t0 = time.perf_counter()
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            times.append(time.perf_counter() - t0)
            if r.returncode != 0:
                raise SystemExit(f"{name} failed: {r.stderr.decode()[-1000:]}")
        out[name] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times)}
    return {"commands": out}


def _memory_cli(quick: bool) -> dict:
    rows = []
    for name, argv in memory_speed.COMMANDS.items():
        if quick and "max-batch" in name:
            continue
        runs = [memory_speed.timed(argv) for _ in range(1 if quick else 3)]
        rows.append({"name": name, "wall_median_s": statistics.median(r[0] for r in runs),
                     "cpu_median_s": statistics.median(r[1] for r in runs), "target_s": memory_speed.TARGETS.get(name)})
    return {"rows": rows}


def _compare(quick: bool) -> dict:
    """``perfseer.compare`` of ResNet-50's training step at batch 64 on every registered GPU, CPU
    seconds of a first call on the graph (a fresh graph, the spec model's caches emptied) after one
    warm-up call that loads the cards and every GPU's networks; no memory simulation."""
    from perfseer.comparison import compare

    compare(perfseer.extract("example:resnet50", batch=1), batch=64, phase="train", memory=False)
    times, n = [], 0
    for _ in range(2 if quick else 5):
        speed_targets.forget()
        g = perfseer.extract("example:resnet50", batch=1)  # no re-bound graphs kept yet
        t0 = time.process_time()
        n = len(compare(g, batch=64, phase="train", memory=False))
        times.append(time.process_time() - t0)
    return {"rows": [{"what": f"perfseer.compare: ResNet-50 training step, batch 64, {n} GPUs (first call on the graph)",
                      "value": statistics.median(times), "unit": "s CPU"}]}


def _targets(ctx: Context) -> dict:
    return run_main(speed_targets.main, ["--quick"] if ctx.quick else [], ctx.work / "targets.json")


def steps(ctx: Context) -> list[Step]:
    return [Step("targets", lambda: _targets(ctx)),
            Step("extract", lambda: _extract(ctx.quick)), Step("predict", lambda: _predict(ctx)),
            Step("cli", lambda: _cli(ctx.quick)), Step("memory-cli", lambda: _memory_cli(ctx.quick)),
            Step("compare", lambda: _compare(ctx.quick))]


def _load(r: dict) -> str:
    return f"{r['_meta']['loadavg'][0]:.1f}" if r.get("_meta", {}).get("loadavg") else "?"


def render(ctx: Context, res: dict[str, dict]) -> str:
    targets = ""
    if "targets" in res:
        tr = res["targets"]
        targets = ("### The targets of issue 39\n\n"
                   "`python -m benchmarks.lib.speed_targets` (its doc says what each figure is). The targets of "
                   "warm predictions are for an idle machine, which this one was not: the load column is the "
                   f"1-minute load average just before each figure ({tr.get('cores')} CPUs), and the CPU time "
                   "beside each warm prediction is what the call costs with a core to itself.\n\n"
                   + md_table(["part", "measurement", "median", "target", "met", "load avg"], speed_targets.rows(tr))
                   + "\n\n### Everything else\n\n")
    rows = []
    ex = res["extract"]
    for r in ex["rows"]:
        rows.append(["extract", r["what"], f"{f(r['value'], 2 if r['unit'] == 'ms' and r['value'] < 10 else 1)} {r['unit']}",
                     r["target"], _load(ex)])
    pr = res["predict"]
    for name, m in pr.get("models", {}).items():
        rows.append(["predict", f"{name}.onnx -> every prediction, batch 1 (load {pr['predictor']['name']} once)",
                     f"{m['end_to_end_ms']:.1f} ms", f"<= {predict_speed.TARGET_ONE_MS:g} ms", _load(pr)])
        rows.append(["predict", "   of which the network on the PyG graph", f"{m['graph_and_network_ms']:.2f} ms", "",
                     _load(pr)])
    for t in pr.get("throughput", []):
        rows.append(["predict", f"batched prediction, {t['graphs']} FBNet graphs", f"{t['graphs_per_s']:,.0f} graphs/s",
                     f">= {predict_speed.TARGET_GRAPHS_S:g} graphs/s", _load(pr)])
    cl = res["cli"]
    base = cl["commands"]["python -c pass"]["median_s"]
    for name, c in cl["commands"].items():
        rows.append(["start-up", name, f"{c['median_s']:.2f} s ({c['median_s'] / base:.1f}x `python -c pass`)",
                     "<= 0.5 s" if name == "perfseer --help" else "", _load(cl)])
    mc = res["memory-cli"]
    for r in mc["rows"]:
        rows.append(["memory", f"perfseer memory: {r['name']} (fresh process)",
                     f"{r['wall_median_s']:.2f} s wall, {r['cpu_median_s']:.2f} s CPU",
                     f"<= {r['target_s']:g} s" if r["target_s"] else "", _load(mc)])
    for r in (res.get("compare") or {}).get("rows", []):
        rows.append(["compare", r["what"], f"{r['value']:.2f} {r['unit']}", "", _load(res["compare"])])
    return ("## Speed\n\n"
            f"Medians of repeated runs in one process after a warm-up (start-up: fresh processes). Tolerance: "
            f"{TOLERANCE}; the load average is beside each figure. {timing_note(res)}\n\n" + targets
            + md_table(["part", "measurement", "median", "target", "load avg"], rows))


SUITE = Suite(
    name="speed", kind="timing",
    description="extraction, prediction, CLI start-up and perfseer memory timings (stated tolerance, load average)",
    reads="bundled example graphs and cards, torchvision/timm model code, datasets/fbnet",
    time_full="~10 min", time_quick="~1 min",
    steps=steps, render=render)
