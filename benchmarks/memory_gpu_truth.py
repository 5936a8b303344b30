"""Simulator vs a real CUDA GPU: peak allocated, peak reserved and NVML used memory.

``run`` needs ``torch.cuda``; ``from-store`` was run on the H200 table ``datasets/h200/`` (see
docs/memory.md, "Measured on a GPU").  Where ``torch.cuda`` works:

    python benchmarks/memory_gpu_truth.py run --device-name h100-sxm [--models timm:resnet50,...]
    python benchmarks/memory_gpu_truth.py report

or compare the simulator with what the collection kit stored (``perfseer collect run --backend
torch-cuda``, e.g. ``benchmarks/gpu/collect_gpu.sh``), here, without a GPU:

    python benchmarks/memory_gpu_truth.py from-store OUT/gpu.sqlite --device-name h200 --json mem.json

(the kit's ``memory_mb`` is ``max_memory_allocated`` less what was allocated before the model was
built, its ``extra`` holds ``memory_reserved_mb``, ``memory_base_mb`` and NVML's peak
``nvml_used_mb``; the simulator runs the same step: model, batch, phase, precision, optimizer).

For each model x batch x {infer, train AdamW}, fp32, a fresh process-level measurement:
``torch.cuda.reset_peak_memory_stats()``, the model built on the GPU, two steps as
:mod:`perfseer.memory.step` runs them (``zero_grad(set_to_none=True)``, foreach AdamW), then
``max_memory_allocated``, ``max_memory_reserved`` and NVML's used memory of the device (minus
what it was before CUDA was initialised), next to ``perfseer.memory(...)`` of the same step
(its ``peak_allocated``, ``peak_reserved`` and ``total``).  The weights are allocated before
the peak statistics are reset, so they count, as in the simulation.  Rows are appended to
benchmarks/results/memory_gpu_truth.jsonl; ``report`` prints the MAPE of each quantity.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
JSONL = RESULTS / "memory_gpu_truth.jsonl"
MODELS = ("timm:resnet18", "timm:resnet50", "timm:efficientnet_b0", "timm:mobilenetv3_large_100",
          "timm:convnext_tiny", "timm:vit_small_patch16_224", "timm:vit_base_patch16_224",
          "timm:swin_tiny_patch4_window7_224", "timm:regnety_016", "timm:densenet121")
BATCHES = (8, 32, 128)


def nvml_used_mib() -> float | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, check=True).stdout
        return float(out.strip().splitlines()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def measure(model: str, batch: int, phase: str) -> dict:
    """Run in a child process (``_child``) so each measurement starts from a fresh CUDA context."""
    out = subprocess.run([sys.executable, __file__, "_child", model, str(batch), phase], capture_output=True,
                         text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child(model: str, batch: int, phase: str) -> None:
    import torch
    import torch.nn.functional as F

    from perfseer.sources.zoo import build_zoo_model

    before = nvml_used_mib()
    zoo, name = model.split(":", 1)
    module, shape, _ = build_zoo_model(zoo, name, meta=False)
    module = module.cuda()
    x = torch.randn(batch, *shape, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    if phase == "infer":
        module.eval()
        with torch.inference_mode():
            for _ in range(2):
                out = module(x)
                del out
    else:
        module.train()
        opt = torch.optim.AdamW(module.parameters(), lr=1e-3, foreach=True)
        for _ in range(2):
            out = module(x)
            loss = F.cross_entropy(out, torch.randint(0, out.shape[1], (batch,), device="cuda"))
            del out
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    after = nvml_used_mib()
    print(json.dumps({"max_allocated": torch.cuda.max_memory_allocated(),
                      "max_reserved": torch.cuda.max_memory_reserved(),
                      "nvml_used_mib": None if after is None or before is None else after - before}))


def cmd_run(args) -> None:
    import perfseer

    RESULTS.mkdir(exist_ok=True)
    models = args.models.split(",") if args.models else MODELS
    with open(JSONL, "a") as fh:
        for model in models:
            for batch in BATCHES:
                for phase in ("infer", "train"):
                    rec = {"model": model, "batch": batch, "phase": phase, "device": args.device_name}
                    rec.update(measure(model, batch, phase))
                    try:
                        est = perfseer.memory(model, batch=batch, phase=phase, optimizer="adamw",
                                              device=args.device_name)
                        rec.update(sim_allocated=est.peak_allocated, sim_reserved=est.peak_reserved,
                                   sim_total=est.total)
                    except perfseer.PerfseerError as e:
                        rec["sim_error"] = str(e)
                    fh.write(json.dumps(rec) + "\n")
                    fh.flush()
                    print(rec, flush=True)


def cmd_report(args) -> None:
    rows = [json.loads(line) for line in JSONL.read_text().splitlines() if line.strip()]
    for sim, real in (("sim_allocated", "max_allocated"), ("sim_reserved", "max_reserved")):
        errs = [abs(r[sim] - r[real]) / r[real] for r in rows if r.get(sim) and r.get(real)]
        if errs:
            print(f"{sim} vs {real}: MAPE {100 * sum(errs) / len(errs):.2f} % over {len(errs)} configurations")
    errs = [abs(r["sim_total"] / 2**20 - r["nvml_used_mib"]) / r["nvml_used_mib"] for r in rows
            if r.get("sim_total") and r.get("nvml_used_mib")]
    if errs:
        print(f"sim_total vs NVML used: MAPE {100 * sum(errs) / len(errs):.2f} % over {len(errs)} configurations")


# the collection kit's precision names -> perfseer.memory's
KIT_PRECISION = {"fp32": "fp32", "amp_fp16": "amp-fp16", "amp_bf16": "amp-bf16"}


def store_rows(path: str):
    """The ``ok`` CUDA results of a collection store (``.sqlite``) or of the table ``perfseer collect
    export`` wrote from one (``.csv`` / ``.parquet``, with its memory columns), as a DataFrame."""
    from perfseer.profiling.store import Store, expand_extras

    if not Path(path).is_file():
        raise SystemExit(f"no file at {path}: pass the gpu.sqlite that perfseer collect wrote, or its export")
    if Path(path).suffix in (".csv", ".parquet"):
        from perfseer.data.table import read_table

        df = read_table(path)
        if "memory_method" not in df:
            raise SystemExit(f"{path} has no memory_method column: export it from a torch-cuda store with "
                             "perfseer collect export (which writes the CUDA memory columns)")
    else:
        store = Store(path, create=False)
        try:
            df = expand_extras(store.rows(["ok"]))
        finally:
            store.db.close()
        if "memory_method" not in df:
            return df.iloc[:0]
    return df[df["memory_method"] == "torch-max-allocated"].reset_index(drop=True)


def compare_store(db: str, device_name: str | None, limit: int | None = None,
                  context_mib: float | None = None, exclude: tuple[str, ...] = ()) -> list[dict]:
    """Per CUDA measurement of the store: measured and simulated peak allocated / reserved / device
    memory (MiB), or the simulator's error (``exclude``: leave these models' inference rows out,
    e.g. the rows a constant was fitted on)."""
    import perfseer

    out = []
    rows = store_rows(db)
    if exclude:
        rows = rows[~(rows["model"].isin(exclude) & (rows["phase"] == "infer"))]
    for r in (rows.head(limit) if limit else rows).itertuples():
        rec = {"model": r.model, "input_shape": r.input_shape, "batch": int(r.batch_size), "phase": r.phase,
               "precision": r.precision, "optimizer": r.optimizer, "device": r.device,
               "allocated_mib": r.memory_mb + (r.memory_base_mb or 0.0), "reserved_mib": r.memory_reserved_mb,
               "nvml_used_mib": r.nvml_used_mb}
        try:
            est = perfseer.memory(r.model, batch=int(r.batch_size), phase=r.phase,
                                  optimizer=(r.optimizer or "sgd-momentum") if r.phase == "train" else None,
                                  precision=KIT_PRECISION.get(r.precision, r.precision), device=device_name,
                                  input_shape=tuple(int(d) for d in r.input_shape.split("x")),
                                  context_mib=context_mib)
            rec.update(sim_allocated_mib=est.peak_allocated / 2**20, sim_reserved_mib=est.peak_reserved / 2**20,
                       sim_total_mib=est.total / 2**20, sim_method=est.method)
        except perfseer.PerfseerError as e:
            rec["sim_error"] = str(e)
        out.append(rec)
    return out


def summarise(rows: list[dict]) -> list[dict]:
    """MAPE and mean signed error (%) of each simulated quantity, per phase and precision."""
    import numpy as np

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


def context_measured(rows: list[dict]) -> dict:
    """Per phase and precision: NVML's used memory less the allocator's peak reservation (MiB), the
    CUDA context and whatever else the process holds outside the caching allocator."""
    import numpy as np

    out = {}
    for key in sorted({(r["phase"], r["precision"]) for r in rows}):
        v = np.array([r["nvml_used_mib"] - r["reserved_mib"] for r in rows if (r["phase"], r["precision"]) == key
                      and r.get("nvml_used_mib") is not None and r.get("reserved_mib") is not None])
        if len(v):
            out[f"{key[0]} {key[1]}"] = {"n": int(len(v)), "median": float(np.median(v)), "min": float(v.min()),
                                         "max": float(v.max())}
    return out


def cmd_from_store(args) -> None:
    from rich.console import Console
    from rich.table import Table

    from perfseer.cli.collect import read_model_file

    exclude = tuple(read_model_file(args.exclude)) if args.exclude else ()
    rows = compare_store(args.store, args.device_name, args.limit, args.context_mib, exclude)
    summary = summarise(rows)
    ctx = context_measured(rows)
    t = Table(title=f"simulator vs measured peak memory ({args.store})")
    for c in ("phase", "precision", "quantity", "n", "MAPE %", "mean error %"):
        t.add_column(c)
    for s in summary:
        t.add_row(s["phase"], s["precision"], s["quantity"], str(s["n"]), f"{s['mape']:.2f}", f"{s['bias']:+.2f}")
    Console().print(t)
    if ctx:
        print("measured CUDA context (NVML used - peak reserved), MiB: "
              + "; ".join(f"{k}: median {v['median']:.0f} ({v['min']:.0f}-{v['max']:.0f}, n {v['n']})"
                          for k, v in ctx.items()))
    failed = [r for r in rows if "sim_error" in r]
    if failed:
        print(f"{len(failed)} of {len(rows)} measurements could not be simulated, e.g. {failed[0]['model']}: "
              f"{failed[0]['sim_error'][:200]}")
    if args.json:
        from perfseer.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"benchmark": "memory-gpu-truth", "store": str(args.store),
                                                 "device_name": args.device_name, "context_mib": args.context_mib,
                                                 "exclude": args.exclude,
                                                 "summary": summary, "context_measured": ctx, "rows": rows},
                                                indent=1))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--device-name", required=True, help="the GPU's registry name (perfseer devices)")
    r.add_argument("--models", default=None, help="comma-separated references (default: ten timm models)")
    sub.add_parser("report")
    f = sub.add_parser("from-store", help="the simulator against a collection store's CUDA measurements")
    f.add_argument("store", help="the SQLite store perfseer collect wrote (--backend torch-cuda), or its export")
    f.add_argument("--device-name", default=None, help="the GPU's registry name (its cuBLAS workspace; default none)")
    f.add_argument("--limit", type=int, default=None, help="only the first N measurements")
    f.add_argument("--context-mib", type=float, default=None,
                   help="the CUDA context the simulator adds for NVML's figure (default: perfseer's)")
    f.add_argument("--exclude", default=None, metavar="FILE",
                   help="leave out the inference rows of the models in this list (e.g. those a constant was fitted on)")
    f.add_argument("--json", default=None, help="write every row and the summary here")
    args = ap.parse_args()
    {"run": cmd_run, "report": cmd_report, "from-store": cmd_from_store}[args.cmd](args)


if __name__ == "__main__":
    main()
