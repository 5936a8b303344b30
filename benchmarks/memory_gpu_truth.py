"""Simulator vs a real CUDA GPU: peak allocated, peak reserved and NVML used memory.

NOT YET RUN: no GPU was lent to the session that wrote it.  Run it where ``torch.cuda`` works:

    python benchmarks/memory_gpu_truth.py run --device-name h100-sxm [--models timm:resnet50,...]
    python benchmarks/memory_gpu_truth.py report

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

    from perfseer.graph.zoo import build_zoo_model

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
    args = ap.parse_args()
    cmd_run(args) if args.cmd == "run" else cmd_report(args)


if __name__ == "__main__":
    main()
