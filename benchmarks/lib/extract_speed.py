"""Speed and memory of PerfGraph extraction on this machine.

    python -m benchmarks.lib.extract_speed [--repeats 20]

Measures, each as the median of repeated runs in one process (after one warm-up run):

* ONNX file -> PerfGraph for torchvision ResNet-50 (a 98 MB file with its weights, written by
  ``torch.onnx.export``, both exporters), including reading, shape inference and features;
* batch re-binding of that PerfGraph (1 -> 8, 32, 256);
* a NAS-Bench-201 and an FBNet architecture emitted, extracted and re-bound to three batch sizes;
* ``nn.Module`` -> PerfGraph for ResNet-50 (torch.onnx dynamo export included);
* peak memory (max RSS of a fresh process) of extracting ViT-L/16 (304 M parameters, 1.2 GB of
  fp32 weights) from an ONNX file with external data, and from ``timm:vit_large_patch16_224``.

Targets (issue #2): file <= 50 ms, re-binding <= 5 ms, module <= 3 s, ViT-L without its weights.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "bench"


def timed(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def cpu_ms(path: str, repeats: int) -> float:
    """Median CPU milliseconds of ``perfseer.extract(path)``: this process plus the shape-inference
    helper process (read from /proc; 0 where there is none)."""
    import os

    import perfseer

    ticks = os.sysconf("SC_CLK_TCK")

    def helper() -> float:
        try:
            from perfseer.graph import safe_infer
        except ImportError:  # a perfseer without the helper
            return 0.0
        proc = safe_infer._helper.proc
        if proc is None:
            return 0.0
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    perfseer.extract(path)
    out = []
    for _ in range(repeats):
        h0, c0 = helper(), time.process_time()
        perfseer.extract(path)
        out.append(time.process_time() - c0 + helper() - h0)
    return statistics.median(out) * 1e3


def resnet50_files() -> dict[str, Path]:
    import torch

    from perfseer.sources.zoo import import_zoo
    from perfseer.graph.torch_export import _quiet

    tvm = import_zoo("torchvision")
    CACHE.mkdir(parents=True, exist_ok=True)
    files = {"dynamo": CACHE / "resnet50_dynamo.onnx", "torchscript": CACHE / "resnet50_ts.onnx"}
    model = None
    for kind, path in files.items():
        if path.exists():
            continue
        model = model or tvm.resnet50().eval()
        x = torch.randn(1, 3, 224, 224)
        with _quiet():
            if kind == "dynamo":
                torch.onnx.export(model, (x,), str(path), dynamo=True, optimize=False,
                                  dynamic_shapes=({0: torch.export.Dim("batch")},), external_data=False)
            else:
                torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"],
                                  dynamic_axes={"x": {0: "batch"}})
    return files


def vitl_external() -> Path:
    """ViT-L/16 as an ONNX file whose 1.2 GB of weights sit in an external data file."""
    import onnx
    import torch

    from perfseer.graph.torch_export import _quiet
    from perfseer.sources.zoo import import_zoo

    path = CACHE / "vit_large_ext" / "vit_l16.onnx"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    timm = import_zoo("timm")
    model = timm.create_model("vit_large_patch16_224").eval()
    with _quiet():
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), dynamo=False, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    m = onnx.load(str(path))
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="vit_l16.data", size_threshold=1024)
    return path


# Peak resident memory from the kernel's high-water mark of this process (VmHWM); getrusage's
# ru_maxrss would also include the parent's peak, inherited across fork.
_HWM = "int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) / 1024"
_PEAK = f"""
import sys, json, time
import perfseer, perfseer.sources.zoo as z
z.import_zoo('timm'); import torch.onnx
t = time.perf_counter()
pg = perfseer.extract(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({{"peak_rss_mb": {_HWM}, "params": pg.params, "macs": pg.macs, "seconds": dt}}))
"""
_BASE = f"import json, perfseer, perfseer.sources.zoo as z; z.import_zoo('timm'); import torch.onnx; " \
        f"print(json.dumps({{'peak_rss_mb': {_HWM}}}))"


def peak(model: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PEAK, model], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def nb201_row(n: int = 300) -> tuple[str, str, str, str]:
    """NAS-Bench-201: emit, extract at batch 1 and re-bind to 32/64/256, for random architectures."""
    import random

    import perfseer
    from perfseer.sources.nas.nb201 import OPS

    rng = random.Random(0)
    archs = ["+".join("|" + "|".join(f"{rng.choice(OPS)}~{j}" for j in range(i)) + "|" for i in (1, 2, 3))
             for _ in range(n)]
    t0 = time.perf_counter()
    for arch in archs:
        pg = perfseer.extract(f"nb201:{arch}", batch=1)
        for b in (32, 64, 256):
            pg.with_batch(b)
    per = (time.perf_counter() - t0) / n
    return (f"nb201: architecture -> PerfGraph + 3 re-bindings ({n} random)", f"{per * 1e3:.1f} ms", "",
            f"all 12,500: {per * 12500 / 60:.1f} min on one core")


def fbnet_row(n: int = 200) -> tuple[str, str, str, str]:
    """FBNet: emit, extract at batch 1 and re-bind to 32/64/256, for random architectures."""
    import random

    import perfseer
    from perfseer.sources.nas.fbnet import NUM_BLOCKS, SEARCH_SPACE

    rng = random.Random(0)
    archs = [" ".join(rng.choice(SEARCH_SPACE) for _ in range(NUM_BLOCKS)) for _ in range(n)]
    perfseer.extract(f"fbnet:{archs[0]}", batch=1)  # imports
    t0 = time.perf_counter()
    for arch in archs:
        pg = perfseer.extract(f"fbnet:{arch}", batch=1)
        for b in (32, 64, 256):
            pg.with_batch(b)
    per = (time.perf_counter() - t0) / n
    return (f"fbnet: architecture -> PerfGraph + 3 re-bindings ({n} random)", f"{per * 1e3:.1f} ms", "",
            f"HELP's 4,000: {per * 4000 / 60:.1f} min on one core")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--resnet50-only", action="store_true",
                    help="only the ResNet-50 ONNX file rows (docs/hardening.md: shape inference in a helper "
                         "process, and PERFSEER_SHAPE_INFERENCE=inprocess)")
    args = ap.parse_args()
    import perfseer
    from perfseer.sources.zoo import import_zoo
    from rich.console import Console
    from rich.table import Table

    rows = []
    files = resnet50_files()
    for kind, path in files.items():
        pg = perfseer.extract(str(path))
        t = timed(lambda: perfseer.extract(str(path)), args.repeats)
        rows.append((f"ResNet-50 ONNX file ({kind} export, {path.stat().st_size / 2**20:.0f} MiB) -> PerfGraph",
                     f"{t * 1e3:.1f} ms", "<= 50 ms", f"{pg.params / 1e6:.2f} M params, {pg.macs / 1e9:.2f} GMACs"))
    if args.resnet50_only:
        for r in rows:
            print(" | ".join(r))
        for kind, path in files.items():  # CPU time: comparable on a busy machine, where wall time is not
            print(f"ResNet-50 {kind} file: median CPU {cpu_ms(str(path), args.repeats):.1f} ms per extraction "
                  "(this process + the shape-inference helper)")
        return
    pg = perfseer.extract(str(files["dynamo"]))
    for b in (8, 32, 256):
        t = timed(lambda: pg.with_batch(b), args.repeats)
        rows.append((f"batch re-binding 1 -> {b}", f"{t * 1e3:.2f} ms", "<= 5 ms", f"{pg.with_batch(b).macs / 1e9:.1f} GMACs"))
    rows.append(nb201_row())
    rows.append(fbnet_row())
    tvm = import_zoo("torchvision")
    module = tvm.resnet50().eval()
    t = timed(lambda: perfseer.extract(module, input_shape=(3, 224, 224)), max(3, args.repeats // 5))
    rows.append(("ResNet-50 nn.Module -> PerfGraph", f"{t:.2f} s", "<= 3 s", "dynamo export on meta tensors"))

    base = json.loads(subprocess.run([sys.executable, "-c", _BASE], capture_output=True, text=True,
                                     check=True).stdout.strip().splitlines()[-1])["peak_rss_mb"]
    vit = vitl_external()
    weights_mb = sum(p.stat().st_size for p in vit.parent.iterdir() if p.suffix == ".data") / 2**20
    for label, ref in (("ViT-L/16 ONNX + external data", str(vit)), ("timm:vit_large_patch16_224", "timm:vit_large_patch16_224")):
        r = peak(ref)
        rows.append((f"{label}: peak RSS", f"{r['peak_rss_mb']:.0f} MB",
                     f"< weights ({weights_mb:.0f} MB)",
                     f"{r['params'] / 1e6:.1f} M params, {r['macs'] / 1e9:.1f} GMACs, {r['seconds']:.2f} s; "
                     f"imports alone: {base:.0f} MB"))

    table = Table(title="perfseer extraction speed and memory (this machine)")
    for c in ("measurement", "value", "target", "detail"):
        table.add_column(c)
    for r in rows:
        table.add_row(*r)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
