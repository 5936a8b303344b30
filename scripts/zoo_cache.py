"""Export zoo models to ONNX skeletons once and cache them on disk (a data-preparation tool: scripts/seed_skeleton_cache.py files them for perfseer data build).

timm models are built in their re-parameterised (inference) form, as timm's benchmark measured
them.  Each model is exported in a worker process (a crash or hang spoils nothing else), results are
appended to ``index.jsonl`` as they finish, and a rerun skips what is done, so an interrupted
cache build resumes.  Skeleton files hold the graph only (weights are never exported).

    python scripts/zoo_cache.py --zoo timm --workers 2          # every timm-benchmark model
    python scripts/zoo_cache.py --zoo torchvision
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = Path(os.environ.get("PERFSEER_DATASETS", ROOT.parent / "shared" / "datasets"))
CACHE = Path(os.environ.get("PERFSEER_ZOO_CACHE", ROOT / ".cache" / "zoo"))
_PT = re.compile(r"-pt(\d+)-")


def timm_reference() -> dict[str, dict]:
    """One reference row per timm model: from the newest benchmark file that has it.

    Where a file measured a model at several resolutions, the row at the model's first listed
    resolution in that file is used; `param_count` and `infer_gmacs` are timm's own figures.
    """
    files = sorted((DATASETS / "timm-benchmark").glob("benchmark-infer-*.csv"),
                   key=lambda p: (int(_PT.search(p.name).group(1)), p.name), reverse=True)
    ref: dict[str, dict] = {}
    for path in files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                name = row["model"]
                if name in ref or not row.get("infer_gmacs"):
                    continue
                ref[name] = {"model": name, "img_size": int(row["infer_img_size"]),
                             "param_count": float(row["param_count"]),
                             "infer_gmacs": float(row["infer_gmacs"]), "file": path.name}
    return ref


def torchvision_names() -> list[str]:
    from perfseer.sources.zoo import import_zoo

    tvm = import_zoo("torchvision")
    return sorted(tvm.list_models(module=tvm))


def cache_path(zoo: str, name: str, img: int) -> Path:
    return CACHE / zoo / f"{name}@{img}.onnx"


def _worker(zoo: str, jobs: list[tuple[str, int]], index: Path) -> None:
    import onnx

    from perfseer.sources.zoo import export_zoo_model

    for name, img in jobs:
        t0 = time.perf_counter()
        rec = {"zoo": zoo, "model": name, "img_size": img}
        try:
            # timm's benchmark measured (and counted) re-parameterisable models in their fused form.
            skel, module = export_zoo_model(zoo, name, (3, img, img), reparam=zoo == "timm")
            out = cache_path(zoo, name, img)
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(".tmp")
            onnx.save(skel.model, tmp)
            os.replace(tmp, out)
            rec["ok"] = True
            rec["true_params"] = sum(p.numel() for p in module.parameters())
        except Exception as e:  # recorded, reported by the benchmarks
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
        rec["seconds"] = round(time.perf_counter() - t0, 2)
        with open(index, "a") as f:
            f.write(json.dumps(rec) + "\n")
        module = skel = None  # free the model before the next one


def load_index(zoo: str) -> dict[tuple[str, int], dict]:
    index = CACHE / zoo / "index.jsonl"
    out = {}
    if index.exists():
        for line in index.read_text().splitlines():
            if line.strip():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill
                    continue
                out[(rec["model"], rec["img_size"])] = rec
    return out


def build_cache(zoo: str, jobs: list[tuple[str, int]], workers: int = 1, chunk: int = 20,
                timeout: float = 1800) -> dict[tuple[str, int], dict]:
    """Export every ``(name, img_size)`` not cached yet; returns the index."""
    index = CACHE / zoo / "index.jsonl"
    index.parent.mkdir(parents=True, exist_ok=True)
    done = load_index(zoo)
    todo = [j for j in jobs if j not in done]
    chunks = [todo[i:i + chunk] for i in range(0, len(todo), chunk)]
    running: list[tuple[subprocess.Popen, list, float]] = []
    while chunks or running:
        while chunks and len(running) < workers:
            c = chunks.pop(0)
            p = subprocess.Popen([sys.executable, __file__, "--worker", zoo, json.dumps(c)])
            running.append((p, c, time.time()))
        time.sleep(1)
        for item in list(running):
            p, c, t0 = item
            if p.poll() is None and time.time() - t0 < timeout:
                continue
            if p.poll() is None:
                p.kill()
                p.wait()
            running.remove(item)
            finished = load_index(zoo)
            left = [j for j in c if j not in finished]
            if left:  # the worker died on left[0]: record it and go on with the rest
                with open(index, "a") as f:
                    f.write(json.dumps({"zoo": zoo, "model": left[0][0], "img_size": left[0][1],
                                        "ok": False, "error": f"worker exited with {p.returncode}"}) + "\n")
                if left[1:]:
                    chunks.insert(0, left[1:])
        n = len(load_index(zoo))
        print(f"\r{zoo}: {n}/{len(jobs) + len(done) - len([j for j in jobs if j in done])} cached", end="",
              file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return load_index(zoo)


def zoo_jobs(zoo: str, limit: int | None = None) -> list[tuple[str, int]]:
    if zoo == "timm":
        jobs = [(r["model"], r["img_size"]) for r in timm_reference().values()]
    else:
        jobs = [(n, 299 if n == "inception_v3" else 224) for n in torchvision_names()]
    return jobs[:limit] if limit else jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo", choices=["timm", "torchvision"], default="timm")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        zoo, jobs = args.worker
        _worker(zoo, [tuple(j) for j in json.loads(jobs)], CACHE / zoo / "index.jsonl")
        return
    index = build_cache(args.zoo, zoo_jobs(args.zoo, args.limit), args.workers)
    ok = sum(r["ok"] for r in index.values())
    print(f"{ok}/{len(index)} exported to {CACHE / args.zoo}")


if __name__ == "__main__":
    main()
