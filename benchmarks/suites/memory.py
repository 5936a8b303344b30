"""The memory simulator against ground truth: tracked CPU execution and a real NVIDIA H200.

**CPU** (``benchmarks/data/memory_cpu_truth.jsonl.gz``, one line per model x batch x mode): the
simulator (:func:`perfseer.memory.step.trace_step` on meta/fake tensors, ``target="cpu"``,
``foreach=False``) against the same step run on real CPU tensors with every storage allocation
recorded (:mod:`perfseer.memory.trace`), peak live tensor bytes, fp32, batch 2/3/4, inference and
a training step with SGD(momentum) and AdamW.  The table is computed from the committed rows
(measuring all 333 models again takes a day here); the ``remeasure`` steps run a sample of them
again now, simulated and measured, and count how many give the recorded bytes.

**GPU** (``datasets/h200/h200-torch-cuda.csv``, collected with ``perfseer collect --backend
torch-cuda``): :func:`perfseer.memory` against the kit's peak allocated, peak reserved and NVML
used memory per step, the 20 calibration-set models' inference rows left out (the CUDA context
constant of the ``h200`` device entry was fitted on them).
"""

from __future__ import annotations

import copy
import gzip
import json

import numpy as np
import torch

import perfseer
from perfseer.cli.collect import read_model_file
from perfseer.data.table import read_table
from perfseer.sources.zoo import build_zoo_model
from perfseer.memory.step import StepConfig, trace_step

from benchmarks.runner import DATA, ROOT, BenchError, Context, Step, Suite, f, load_config, md_table, timing_note

JSONL = DATA / "memory_cpu_truth.jsonl.gz"
CFG = load_config("memory")  # benchmarks/configs/memory.json
H200 = ROOT / CFG["gpu"]["store"]
CAL_SET = ROOT / CFG["gpu"]["exclude_infer"]
TOL = CFG["tolerance"]
BATCHES = (2, 3, 4)
MODES = (("infer", None), ("train", "sgd-momentum"), ("train", "adamw"))
#: the kit's precision names -> perfseer.memory's
KIT_PRECISION = {"fp32": "fp32", "amp_fp16": "amp-fp16", "amp_bf16": "amp-bf16"}


# ---------------------------------------------------------------- CPU ground truth

def cpu_rows() -> list[dict]:
    if not JSONL.exists():
        raise BenchError(f"missing {JSONL}")
    rows = {}
    with gzip.open(JSONL, "rt") as fh:
        lines = fh.read().splitlines()
    for line in lines:
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows[(r["model"], r["batch"], r["phase"], r["optimizer"])] = r  # a later row (a retry) wins
    return list(rows.values())


def cpu_summary(rows: list[dict]) -> dict:
    compared = [r for r in rows if "rel_err" in r]
    models = sorted({r["model"] for r in compared})
    abs_err = sorted(abs(r["rel_err"]) for r in compared)
    by_mode: dict[str, list[int]] = {}
    for r in compared:
        key = f"{r['phase']} {r['optimizer'] or ''}".strip()
        n = by_mode.setdefault(key, [0, 0, 0])
        n[0] += 1
        n[1] += abs(r["rel_err"]) <= TOL
        n[2] += r["rel_err"] == 0
    return {"configurations_run": len(rows), "configurations_compared": len(compared), "models": len(models),
            "timm_models": sum(m.startswith("timm:") for m in models),
            "torchvision_models": sum(m.startswith("torchvision:") for m in models),
            "within_2pct": sum(abs(r["rel_err"]) <= TOL for r in compared),
            "exact": sum(r["rel_err"] == 0 for r in compared),
            "median_abs_rel_err": abs_err[len(abs_err) // 2] if abs_err else None,
            "max_abs_rel_err": abs_err[-1] if abs_err else None,
            "failed": sum(1 for r in rows if "rel_err" not in r), "by_mode": by_mode}


_BUILT: dict = {}


def _build(model: str, meta: bool):
    """A fresh copy of the model (built once per model and kind)."""
    zoo, name = model.split(":", 1)
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
    """One configuration simulated and measured (real CPU tensors, allocations recorded)."""
    cfg = StepConfig(phase=phase, optimizer=optimizer or "sgd", precision="fp32", target="cpu", foreach=False)
    rec = {"model": model, "batch": batch, "phase": phase, "optimizer": optimizer}
    module, shape = _build(model, True)
    rec["sim_peak"] = trace_step(module, shape, batch, cfg, fake=True).peak()[0]
    torch.manual_seed(0)
    module, shape = _build(model, False)
    rec["real_peak"] = trace_step(module, shape, batch, cfg, fake=False).peak()[0]
    rec["rel_err"] = (rec["sim_peak"] - rec["real_peak"]) / rec["real_peak"]
    return rec


def remeasure(models: list[str], recorded: list[dict], batches=BATCHES, modes=MODES) -> dict:
    """Simulate and measure again the recorded configurations of ``models``; compare with the rows."""
    torch.set_num_threads(1)
    rec = {(r["model"], r["batch"], r["phase"], r["optimizer"]): r for r in recorded}
    out = []
    for m in models:
        for b in batches:
            for phase, opt in modes:
                old = rec.get((m, b, phase, opt))
                if old is None or "rel_err" not in old:
                    continue
                new = run_config(m, b, phase, opt)
                out.append({**new, "recorded_sim_peak": old["sim_peak"], "recorded_real_peak": old["real_peak"]})
    return {"models": models, "rows": out,
            "same_sim": sum(r["sim_peak"] == r["recorded_sim_peak"] for r in out),
            "same_real": sum(r["real_peak"] == r["recorded_real_peak"] for r in out),
            "within_2pct": sum(abs(r["rel_err"]) <= TOL for r in out)}


# ---------------------------------------------------------------- GPU ground truth (H200)

def store_rows(path):
    """The CUDA rows of a collection export (``.csv``/``.parquet`` with its memory columns)."""
    if not path.is_file():
        raise BenchError(f"no file at {path}")
    df = read_table(str(path))
    if "memory_method" not in df:
        raise BenchError(f"{path} has no memory_method column (export it from a torch-cuda store)")
    return df[df["memory_method"] == "torch-max-allocated"].reset_index(drop=True)


def compare_store(path, device_name: str | None, limit: int | None = None, exclude: tuple[str, ...] = ()) -> list[dict]:
    """Per CUDA measurement: measured and simulated peak allocated / reserved / device memory (MiB)."""
    out = []
    rows = store_rows(path)
    if exclude:
        rows = rows[~(rows["model"].isin(exclude) & (rows["phase"] == "infer"))]
    for r in (rows.head(limit) if limit else rows).itertuples():
        rec = {"model": r.model, "input_shape": r.input_shape, "batch": int(r.batch_size), "phase": r.phase,
               "precision": r.precision, "optimizer": r.optimizer,
               "allocated_mib": r.memory_mb + (r.memory_base_mb or 0.0), "reserved_mib": r.memory_reserved_mb,
               "nvml_used_mib": r.nvml_used_mb}
        try:
            est = perfseer.memory(r.model, batch=int(r.batch_size), phase=r.phase,
                                  optimizer=(r.optimizer or "sgd-momentum") if r.phase == "train" else None,
                                  precision=KIT_PRECISION.get(r.precision, r.precision), device=device_name,
                                  input_shape=tuple(int(d) for d in r.input_shape.split("x")))
            rec.update(sim_allocated_mib=est.peak_allocated / 2**20, sim_reserved_mib=est.peak_reserved / 2**20,
                       sim_total_mib=est.total / 2**20)
        except perfseer.PerfseerError as e:
            rec["sim_error"] = str(e)
        out.append(rec)
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """MAPE and mean signed error (%) of each simulated quantity, per phase and precision."""
    pairs = (("allocated", "sim_allocated_mib", "allocated_mib"), ("reserved", "sim_reserved_mib", "reserved_mib"),
             ("device (NVML)", "sim_total_mib", "nvml_used_mib"))
    out = []
    for key in sorted({(r["phase"], r["precision"]) for r in rows}):
        sel = [r for r in rows if (r["phase"], r["precision"]) == key]
        for name, sim, real in pairs:
            e = np.array([r[sim] / r[real] - 1 for r in sel if r.get(sim) and r.get(real)])
            if len(e):
                out.append({"phase": key[0], "precision": key[1], "quantity": name, "n": int(len(e)),
                            "mape": float(100 * np.abs(e).mean()), "bias": float(100 * e.mean())})
    return out


def _gpu(ctx: Context) -> dict:
    exclude = tuple(read_model_file(str(CAL_SET)))
    rows = compare_store(H200, CFG["gpu"]["device"], CFG["gpu"]["quick_rows"] if ctx.quick else None, exclude)
    return {"store": str(H200.relative_to(ROOT)), "excluded_infer_models": len(exclude), "summary": summarise(rows),
            "failed": [r for r in rows if "sim_error" in r], "rows": len(rows)}


# ---------------------------------------------------------------- the suite

#: models measured again in full mode (each in its own resumable step) and in --quick
REMEASURE_FULL = tuple(CFG["remeasure"])
REMEASURE_QUICK = tuple(CFG["remeasure_quick"])


def steps(ctx: Context) -> list[Step]:
    out = [Step("cpu-table", lambda: cpu_summary(cpu_rows()))]
    if ctx.quick:
        out.append(Step("remeasure-quick", lambda: remeasure(list(REMEASURE_QUICK), cpu_rows(), (2,), MODES[:1])))
    else:
        for m in REMEASURE_FULL:
            out.append(Step(f"remeasure-{m}", lambda m=m: remeasure([m], cpu_rows())))
    out.append(Step("gpu-h200", lambda: _gpu(ctx)))
    return out


def render(ctx: Context, res: dict[str, dict]) -> str:
    s = res["cpu-table"]
    n = s["configurations_compared"]
    modes = md_table(["mode", "configurations", "within 2 %", "to the byte"],
                     [[k, v[0], v[1], v[2]] for k, v in sorted(s["by_mode"].items())])
    re_rows = [r for k, v in res.items() if k.startswith("remeasure") for r in v["rows"]]
    same_sim = sum(r["sim_peak"] == r["recorded_sim_peak"] for r in re_rows)
    same_real = sum(r["real_peak"] == r["recorded_real_peak"] for r in re_rows)
    within = sum(abs(r["rel_err"]) <= TOL for r in re_rows)
    models = sorted({r["model"] for r in re_rows})
    g = res["gpu-h200"]
    gpu = md_table(["phase", "precision", "quantity", "steps", "MAPE %", "mean error %"],
                   [[x["phase"], x["precision"], x["quantity"], x["n"], f(x["mape"], 1), f"{x['bias']:+.1f}"]
                    for x in g["summary"]])
    return ("## Memory simulation\n\n"
            f"**CPU, tracked execution**: {n:,} configurations of {s['models']} models ({s['timm_models']} timm, "
            f"{s['torchvision_models']} torchvision; batch 2/3/4, fp32, inference and a training step with "
            f"SGD-momentum or AdamW), peak live tensor bytes simulated against measured: {s['within_2pct']:,} "
            f"within 2 %, {s['exact']:,} to the byte, largest error {100 * s['max_abs_rel_err']:.2f} % "
            f"({s['failed']} failed), from `benchmarks/data/memory_cpu_truth.jsonl.gz`.\n\n{modes}\n\n"
            f"Run again now ({len(models)} models, {len(re_rows)} configurations): the simulator gives the recorded "
            f"bytes in {same_sim}, the measurement in {same_real}, {within} within 2 %.\n\n"
            f"**NVIDIA H200** (`{g['store']}`, {g['rows']} steps; the calibration set's inference rows, on which "
            f"the device's CUDA context was fitted, left out): `perfseer.memory` against PyTorch's peak "
            f"allocated and reserved memory and NVML's device total.\n\n{gpu}\n\n"
            f"{timing_note({k: v for k, v in res.items() if k.startswith('remeasure')})}")


SUITE = Suite(
    name="memory",
    description="memory simulator vs tracked CPU execution (2,997 configurations) and a real H200",
    reads="benchmarks/data/memory_cpu_truth.jsonl.gz, datasets/h200/h200-torch-cuda.csv, timm/torchvision (model code)",
    time_full="~15 min (10 models measured again, 130 H200 steps simulated)",
    time_quick="~1 min (one configuration measured again, 10 H200 steps)",
    steps=steps, render=render)
