"""Simulator vs tracked CPU execution: peak allocated tensor bytes of the same step.

For each model x batch size x mode (``infer``; ``train`` with SGD(momentum 0.9); ``train`` with
AdamW), fp32:

* **simulated**: :func:`perfseer.memory.step.trace_step` as shipped (``backend="auto"``: meta
  tensors where the meta backend applies, else fake tensors; the model built on the meta device,
  no weight allocated), ``target="cpu"`` (the CPU kernels' memory: CPU dropout, no autocast
  emulation) and ``foreach=False`` (what ``torch.optim`` picks for CPU parameters);
* **measured**: the same step on real CPU tensors (random weights), with every storage
  allocation and free recorded as it happens (the dispatch-level recorder of
  :mod:`perfseer.memory.trace`, on real tensors: real kernels, real autograd, real optimizer).

Both are the peak of live tensor bytes, unrounded: the device-independent part of the
accounting (allocator rounding, context and workspaces come after, see docs/memory.md).  A
configuration *agrees* when the two differ by at most 2 %.  For each disagreement the first
allocation where the two traces part (operator and size) is recorded as its cause.

Models, in roughly increasing cost (a run cut short has covered the cheapest): 14 small
torchvision classification models; timm's up to 2.5 GMACs in increasing order of the GMACs
timm's RTX 3090 benchmark lists (shared/datasets/timm-benchmark; a deprecated alias of an
architecture already listed is skipped); 28 larger torchvision models; timm's from 2.5 GMACs up to
``--max-gmacs``; the 5 largest torchvision models (333 models with ``--max-gmacs 4.5``).
Batch sizes 2, 3, 4 (small: the measured run executes on this machine's shared CPU).  Each of a
model's 9 configurations gets a deep copy of one freshly built module (one meta, one real).

    OMP_NUM_THREADS=1 nice -n 15 python benchmarks/memory_cpu_truth.py run --max-gmacs 4.5  # resumable
    python benchmarks/memory_cpu_truth.py report                          # prints the table, writes JSON
    python benchmarks/memory_cpu_truth.py recheck --limit 40 [--offset M]   # the simulator now vs the recorded rows

``run`` appends one line per configuration to benchmarks/data/memory_cpu_truth.jsonl (tracked;
done configurations are skipped on restart, a line cut by an interrupted run is redone); a
configuration that runs past ``--timeout`` seconds of CPU time is recorded as a timeout and the
model's remaining configurations as not run (both are tried again on resume); a model that
cannot be built or run is recorded with its error.  Each line records the simulator's backend,
its git revision, the time of both runs and the process's peak RSS.  ``report`` writes
benchmarks/data/memory_cpu_truth.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).parent / "data"
JSONL = DATA / "memory_cpu_truth.jsonl"
SUMMARY = DATA / "memory_cpu_truth.json"
BATCHES = (2, 3, 4)
MODES = (("infer", None), ("train", "sgd-momentum"), ("train", "adamw"))
TORCHVISION = ("squeezenet1_1", "shufflenet_v2_x0_5", "mnasnet0_5", "mobilenet_v3_small", "squeezenet1_0",
               "shufflenet_v2_x1_0", "mnasnet0_75", "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0",
               "mnasnet1_3", "regnet_x_400mf", "regnet_y_400mf", "efficientnet_b0", "alexnet", "resnet18",
               "regnet_x_800mf", "regnet_y_800mf", "googlenet", "efficientnet_b1", "densenet121", "resnet34",
               "shufflenet_v2_x1_5", "shufflenet_v2_x2_0", "resnet50", "inception_v3")
#: more torchvision classification models, after timm's (increasing size, roughly)
TORCHVISION_MORE = ("regnet_x_1_6gf", "regnet_y_1_6gf", "efficientnet_b2", "densenet169", "efficientnet_b3",
                    "vit_b_32", "resnext50_32x4d", "densenet201", "regnet_x_3_2gf", "regnet_y_3_2gf", "convnext_tiny",
                    "swin_t", "efficientnet_v2_s", "swin_v2_t", "maxvit_t", "resnet101", "wide_resnet50_2",
                    "densenet161", "resnet152", "vgg11", "vgg11_bn")
TOL = 0.02


def model_list(max_gmacs: float) -> list[str]:
    from perfseer.sources.zoo import import_zoo

    timm = import_zoo("timm")

    csv_dir = Path(os.environ.get("TIMM_BENCHMARK_DIR", "/work/shared/datasets/timm-benchmark"))
    gmacs = {}
    for f in sorted(csv_dir.glob("benchmark-infer-amp-nchw-pt*-rtx3090.csv")):
        with open(f) as fh:
            for row in csv.DictReader(fh):
                try:
                    gmacs[row["model"]] = float(row["infer_gmacs"])
                except (KeyError, ValueError):
                    continue
    timm_names = sorted((g, n) for n, g in gmacs.items() if g <= max_gmacs and timm.is_model(n)
                        and not n.startswith("test_"))
    # a deprecated alias (gluon_resnet50_v1c -> resnet50c.gluon_in1k) is the same architecture as
    # its current name: keep the first name of each architecture
    from timm.models import get_arch_name, get_deprecated_models

    deprecated, seen, unique = get_deprecated_models(), set(), []
    for g, n in timm_names:
        arch = get_arch_name(deprecated.get(n) or n)
        if arch not in seen:
            seen.add(arch)
            unique.append((g, n))
    timm_names = unique
    # roughly increasing cost, so that a run cut short has covered the cheapest models: small
    # torchvision models, timm's up to 2.5 GMACs, the larger torchvision models, timm's above
    # 2.5 GMACs, the largest torchvision models
    small, large = TORCHVISION[:14], TORCHVISION[14:] + TORCHVISION_MORE[:-5]
    return ([f"torchvision:{n}" for n in small] + [f"timm:{n}" for g, n in timm_names if g <= 2.5]
            + [f"torchvision:{n}" for n in large] + [f"timm:{n}" for g, n in timm_names if g > 2.5]
            + [f"torchvision:{n}" for n in TORCHVISION_MORE[-5:]])


class Timeout(BaseException):
    """A configuration ran past ``--timeout`` (a BaseException: no ``except Exception`` swallows it)."""


def _alarm(signum, frame):
    raise Timeout("configuration timed out")


def first_difference(sim, real) -> str | None:
    """The first allocation (in order) where the simulated and measured traces differ."""
    a = [(x.op, x.nbytes) for x in sim.allocations]
    b = [(x.op, x.nbytes) for x in real.allocations]
    for i, (u, v) in enumerate(zip(a, b)):
        if u[1] != v[1]:  # sizes: operator names may differ (the meta backend's attention is an alias)
            return f"allocation {i}: simulated {u[0]} {u[1]} B, measured {v[0]} {v[1]} B"
    if len(a) != len(b):
        return f"simulated {len(a)} allocations, measured {len(b)}"
    return None


_BUILT: dict = {}


def _build(zoo: str, name: str, meta: bool):
    """A fresh copy of the model (built once per model and kind: the 9 configurations of a model
    each get a deep copy of the same freshly initialised module)."""
    import copy

    from perfseer.sources.zoo import build_zoo_model

    key = (zoo, name, meta)
    if key not in _BUILT:
        for k in [k for k in _BUILT if k[:2] != (zoo, name)]:  # keep one model's modules alive
            del _BUILT[k]
        module, shape, _ = build_zoo_model(zoo, name, meta=meta)
        _BUILT[key] = (module, shape)
    module, shape = _BUILT[key]
    try:
        return copy.deepcopy(module), shape
    except Exception:  # noqa: BLE001 - a module that cannot be copied: build it again
        return build_zoo_model(zoo, name, meta=meta)[:2]


def run_config(model: str, batch: int, phase: str, optimizer: str | None) -> dict:
    import torch

    from perfseer.memory.step import StepConfig, trace_step

    zoo, name = model.split(":", 1)
    cfg = StepConfig(phase=phase, optimizer=optimizer or "sgd", precision="fp32", target="cpu", foreach=False)
    rec = {"model": model, "batch": batch, "phase": phase, "optimizer": optimizer}
    t0 = time.perf_counter()
    module, shape = _build(zoo, name, True)
    rec["input_shape"] = "x".join(map(str, shape))
    try:
        sim = trace_step(module, shape, batch, cfg, fake=True)
        rec["sim_peak"] = sim.peak()[0]
        rec["sim_backend"] = sim.backend
    except Exception as e:  # noqa: BLE001 - recorded as the result
        sim = None
        rec["sim_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    rec["sim_s"] = round(time.perf_counter() - t0, 3)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    module, shape = _build(zoo, name, False)
    try:
        real = trace_step(module, shape, batch, cfg, fake=False)
        rec["real_peak"] = real.peak()[0]
    except Exception as e:  # noqa: BLE001
        real = None
        rec["real_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    rec["real_s"] = round(time.perf_counter() - t0, 3)
    if sim is not None and real is not None:
        rec["rel_err"] = (rec["sim_peak"] - rec["real_peak"]) / rec["real_peak"]
        if abs(rec["rel_err"]) > TOL:
            rec["first_difference"] = first_difference(sim, real)
    return rec


def cmd_run(args) -> None:
    import torch

    torch.set_num_threads(1)
    DATA.mkdir(parents=True, exist_ok=True)
    done = set()
    if JSONL.exists():
        for line in JSONL.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interrupted run: redone
            if str(r.get("error", "")).startswith(("timeout", "not run")):
                continue  # a time limit hit (on a loaded machine, say) is tried again on resume
            done.add((r["model"], r["batch"], r["phase"], r["optimizer"]))
    try:  # the simulator's revision, recorded on every row (rows of several revisions can share the file)
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent).stdout.strip() or None
    except OSError:
        rev = None
    models = model_list(args.max_gmacs)[: args.limit]
    index, count = (int(x) for x in args.shard.split("/"))
    models = models[index::count]
    # the limit is CPU time (SIGPROF counts this process's user + system time), so that it does
    # not depend on how many other processes share the machine
    signal.signal(signal.SIGPROF, _alarm)
    with open(JSONL, "a") as out:
        for model in models:
            timed_out = None
            for batch in BATCHES:
                for phase, opt in MODES:
                    if (model, batch, phase, opt) in done:
                        continue
                    key = {"model": model, "batch": batch, "phase": phase, "optimizer": opt}
                    if timed_out:  # a larger batch of a model that timed out: not tried, recorded as such
                        rec = {**key, "error": f"not run: {timed_out} timed out"}
                    else:
                        signal.setitimer(signal.ITIMER_PROF, args.timeout)
                        t0 = time.perf_counter()
                        try:
                            rec = run_config(model, batch, phase, opt)
                        except Timeout:
                            rec = {**key, "error": f"timeout: over {args.timeout} s of CPU time"}
                            timed_out = f"b{batch} {phase} {opt or ''}".strip()
                        except Exception as e:  # noqa: BLE001 - a model that cannot be built
                            rec = {**key, "error": f"{type(e).__name__}: {str(e)[:300]}"}
                        finally:
                            signal.setitimer(signal.ITIMER_PROF, 0)
                        rec["wall_s"] = round(time.perf_counter() - t0, 3)
                        rec["rev"] = rev
                        rec["maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    err = rec.get("rel_err")
                    print(f"{model} b{batch} {phase} {opt or ''}: "
                          f"{'err=%.4f' % err if err is not None else rec.get('error') or rec.get('sim_error') or rec.get('real_error')}",
                          flush=True)


def cmd_report(args) -> None:
    rows = {}
    for line in JSONL.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows[(r["model"], r["batch"], r["phase"], r["optimizer"])] = r  # a later row (a retry) wins
    rows = list(rows.values())
    compared = [r for r in rows if "rel_err" in r]
    timeouts = [r for r in rows if str(r.get("error", "")).startswith("timeout")]
    not_run = [r for r in rows if str(r.get("error", "")).startswith("not run")]
    errors = [r for r in rows if "error" in r and r not in timeouts and r not in not_run]
    real_fail = [r for r in rows if "real_error" in r]
    sim_only_fail = [r for r in rows if "sim_error" in r and "real_error" not in r]
    within = [r for r in compared if abs(r["rel_err"]) <= TOL]
    over10 = [r for r in compared if abs(r["rel_err"]) > 0.10]
    models_run = sorted({r["model"] for r in rows})
    models = sorted({r["model"] for r in compared})
    complete = sorted(m for m in models if sum(r["model"] == m for r in compared) == len(BATCHES) * len(MODES))
    abs_err = sorted(abs(r["rel_err"]) for r in compared)
    backends = {}
    for r in compared:
        backends[r.get("sim_backend", "fake")] = backends.get(r.get("sim_backend", "fake"), 0) + 1
    summary = {
        "configurations_run": len(rows),
        "configurations_compared": len(compared),
        "models_run": len(models_run),
        "models_compared": len(models),
        "models_all_9_configurations_compared": len(complete),
        "timm_models_compared": sum(m.startswith("timm:") for m in models),
        "torchvision_models_compared": sum(m.startswith("torchvision:") for m in models),
        "within_2pct": len(within),
        "within_2pct_share": len(within) / len(compared) if compared else None,
        "over_10pct": len(over10),
        "median_abs_rel_err": abs_err[len(abs_err) // 2] if abs_err else None,
        "max_abs_rel_err": abs_err[-1] if abs_err else None,
        "simulation_backend_of_compared": backends,
        "timeouts": len(timeouts),
        "not_run_after_a_timeout": len(not_run),
        "build_or_run_errors": len(errors),
        "real_run_failed": len(real_fail),
        "simulation_failed_only": len(sim_only_fail),
        "worst": [{k: r.get(k) for k in ("model", "batch", "phase", "optimizer", "sim_peak", "real_peak", "rel_err",
                                         "first_difference")}
                  for r in sorted(compared, key=lambda r: -abs(r["rel_err"]))[:10] if r["rel_err"] != 0],
        "outliers": [{k: r.get(k) for k in ("model", "batch", "phase", "optimizer", "sim_peak", "real_peak",
                                            "rel_err", "first_difference")}
                     for r in compared if abs(r["rel_err"]) > TOL],
        "simulation_failures": [{k: r.get(k) for k in ("model", "batch", "phase", "optimizer", "sim_error")}
                                for r in sim_only_fail],
        "failures": [{k: r.get(k) for k in ("model", "batch", "phase", "optimizer", "real_error", "error")}
                     for r in real_fail + errors + timeouts],
    }
    print(f"models run: {len(models_run)}; compared: {len(models)} ({summary['timm_models_compared']} timm, "
          f"{summary['torchvision_models_compared']} torchvision), all 9 configurations: {len(complete)}; "
          f"configurations compared: {len(compared)} (run: {len(rows)})")
    if compared:
        print(f"within 2 %: {len(within)} ({100 * summary['within_2pct_share']:.1f} %); over 10 %: {len(over10)}; "
              f"median |error| {100 * summary['median_abs_rel_err']:.3f} %, max {100 * summary['max_abs_rel_err']:.3f} %; "
              f"exactly equal: {sum(r['rel_err'] == 0 for r in compared)}")
        print("simulated on: " + ", ".join(f"{k} backend {v}" for k, v in sorted(backends.items())))
    by_mode = {}
    for r in compared:
        key = f"{r['phase']} {r['optimizer'] or ''}".strip()
        n, w = by_mode.get(key, (0, 0))
        by_mode[key] = (n + 1, w + (abs(r["rel_err"]) <= TOL))
    print("| mode | configurations | within 2 % |")
    print("| --- | --- | --- |")
    for k, (n, w) in sorted(by_mode.items()):
        print(f"| {k} | {n} | {w} ({100 * w / n:.1f} %) |")
    print(f"timeouts: {len(timeouts)} (+ {len(not_run)} configurations not run after them); build/run errors: "
          f"{len(errors)}; measured run failed (no ground truth): {len(real_fail)}; simulation failed where the "
          f"real run worked: {len(sim_only_fail)}")
    for o in summary["worst"]:
        print(f"largest difference {o['model']} b{o['batch']} {o['phase']} {o['optimizer'] or ''}: "
              f"{100 * o['rel_err']:+.4f} % ({o['sim_peak'] - o['real_peak']:+d} B)")
    for o in summary["outliers"]:
        print(f"outlier {o['model']} b{o['batch']} {o['phase']} {o['optimizer'] or ''}: "
              f"{100 * o['rel_err']:+.2f} % ({o['first_difference']})")
    for o in summary["simulation_failures"]:
        print(f"simulation failed {o['model']} b{o['batch']} {o['phase']}: {o['sim_error']}")
    for o in summary["failures"]:
        mode = f"{o['phase']} {o['optimizer'] or ''}".strip()
        print(f"failed {o['model']} b{o['batch']} {mode}: {o.get('real_error') or o.get('error')}")
    tmp = SUMMARY.with_name(SUMMARY.name + ".tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, SUMMARY)


def cmd_recheck(args) -> None:
    """Simulate again, with the code as it is now, every recorded configuration of ``--limit``
    models (after the first ``--offset``) that has a simulated peak, and count how many give the recorded bytes
    (a change to the simulator keeps the ground truth only if they all do).  Writes nothing."""
    import torch

    from perfseer.memory.step import StepConfig, trace_step

    torch.set_num_threads(1)
    rows = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]
    models = list(dict.fromkeys(r["model"] for r in rows if "sim_peak" in r))[args.offset:][: args.limit]
    same, differ = 0, []
    for r in (r for r in rows if r["model"] in models and "sim_peak" in r):
        zoo, name = r["model"].split(":", 1)
        module, shape = _build(zoo, name, True)
        cfg = StepConfig(phase=r["phase"], optimizer=r["optimizer"] or "sgd", precision="fp32", target="cpu",
                         foreach=False)
        peak = trace_step(module, shape, r["batch"], cfg, fake=True).peak()[0]
        if peak == r["sim_peak"]:
            same += 1
        else:
            differ.append(f"{r['model']} b{r['batch']} {r['phase']} {r['optimizer'] or ''}: recorded "
                          f"{r['sim_peak']} B (rev {r.get('rev')}), now {peak} B")
    print(f"{len(models)} models, {same + len(differ)} configurations simulated again: {same} give the recorded "
          f"simulated peak to the byte, {len(differ)} do not")
    for line in differ:
        print("  " + line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--limit", type=int, default=None, help="first N models of the list")
    r.add_argument("--max-gmacs", type=float, default=2.5, help="skip timm models above this (RTX 3090 benchmark GMACs)")
    r.add_argument("--timeout", type=int, default=120,
                   help="CPU seconds per configuration (a model that runs past it is recorded as a timeout, its "
                        "larger configurations as not run; both are tried again when the run is resumed)")
    r.add_argument("--shard", default="0/1", metavar="I/N", help="run models I, I+N, I+2N... (parallel runs append "
                                                                 "to the same file)")
    sub.add_parser("report")
    c = sub.add_parser("recheck")
    c.add_argument("--limit", type=int, default=None, help="N models of the recorded rows")
    c.add_argument("--offset", type=int, default=0, help="skip the first M recorded models")
    args = ap.parse_args()
    {"run": cmd_run, "report": cmd_report, "recheck": cmd_recheck}[args.cmd](args)


if __name__ == "__main__":
    main()
