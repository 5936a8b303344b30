"""Simulator labels for the learned memory predictor: ``datasets/memory_sim/labels.csv``.

For each model -- timm models that have a PerfGraph in ``datasets/timm`` (unfused forms only),
``space:`` networks of ``datasets/cpu`` (3x32x32) and torchvision classification models -- the
GPU-memory simulator (:func:`perfseer.memory`, fp32, no device: default CUDA context and cuBLAS
workspace) runs inference and a training step with SGD-momentum and with AdamW at a few batch
sizes, and one row per configuration records peak allocated / reserved bytes, the breakdown at the
peak and the model's exact parameter and buffer bytes.  Models are taken family by family in
rounds (one model of every family, then a second, ...), so a run stopped early still covers every
family.  Batch sizes are drawn per model from a hash of its name (inference: 1 and one of 16, 64,
128; training, with both optimizers: one of 4, 8, 16, 32, 64, 128), so the table spans batch
sizes without simulating every one (the first 10 models of the table, from an earlier version of
this script, have two training batch sizes).

Resumable and atomic: the table and ``failures.csv`` are rewritten (atomically) after every model;
a run skips the models already in either.  A configuration that raises (the simulator's
``SimulationError``) or runs past ``--timeout`` seconds is a failure row with its reason.

    OMP_NUM_THREADS=1 nice -n 15 python scripts/memory_labels.py --out datasets/memory_sim [--max-models N]
"""

from __future__ import annotations

import argparse
import hashlib
import signal
import sys
import time
from pathlib import Path

BATCHES_INFER = (16, 64, 128)
BATCHES_TRAIN = (4, 8, 16, 32, 64, 128)
OPTIMIZERS = ("sgd-momentum", "adamw")
DEVICE = "cuda-sim/fp32"
TORCHVISION = ("alexnet", "convnext_tiny", "densenet121", "densenet169", "efficientnet_b0", "efficientnet_v2_s",
               "googlenet", "inception_v3", "maxvit_t", "mnasnet1_0", "mobilenet_v2", "mobilenet_v3_large",
               "regnet_x_400mf", "regnet_y_800mf", "resnet18", "resnet50", "resnext50_32x4d", "shufflenet_v2_x1_0",
               "squeezenet1_0", "swin_t", "swin_v2_t", "vgg11_bn", "vgg16", "vit_b_16", "wide_resnet50_2",
               "mobilenet_v3_small", "shufflenet_v2_x0_5", "regnet_y_400mf", "densenet201", "convnext_small")


def _pick(key: str, choices, salt: str):
    h = int.from_bytes(hashlib.sha256(f"memory-labels:{salt}:{key}".encode()).digest()[:8], "big")
    return choices[h % len(choices)]


def configs(model: str) -> list[tuple[str, str | None, int]]:
    """``(phase, optimizer, batch)`` of one model."""
    b = _pick(model, BATCHES_TRAIN, "t")
    infer = [("infer", None, 1), ("infer", None, _pick(model, BATCHES_INFER, "i"))]
    return infer + [("train", o, b) for o in OPTIMIZERS]


def candidates(datasets: Path) -> list[dict]:
    """Models in rounds over families: ``{"model", "input_shape", "family", "graphs"}``."""
    from perfseer.data.dataset import load_dataset

    pools: dict[str, list[dict]] = {}
    timm = load_dataset(datasets / "timm").labels
    timm = timm[~timm.model.str.contains("@reparam")].drop_duplicates(["model", "input_shape"])
    for r in timm.sort_values("model").itertuples():
        pools.setdefault(f"timm/{r.family}", []).append(
            {"model": r.model, "input_shape": r.input_shape, "family": r.family, "graphs": "timm"})
    space = load_dataset(datasets / "cpu").labels.drop_duplicates(["model", "input_shape"])
    for r in space.itertuples():
        fam = space_family(r.model)
        pools.setdefault(f"space/{fam}", []).append(
            {"model": r.model, "input_shape": r.input_shape, "family": fam, "graphs": "cpu"})
    from perfseer.data.splits import family_of

    for name in TORCHVISION:
        fam = family_of(name)
        pools.setdefault(f"tv/{fam}", []).append(
            {"model": f"torchvision:{name}", "input_shape": "3x299x299" if name == "inception_v3" else "3x224x224",
             "family": fam, "graphs": "export"})
    for v in pools.values():  # a deterministic but mixed order within each family
        v.sort(key=lambda c: hashlib.sha256(c["model"].encode()).hexdigest())
    order, depth = [], max(len(v) for v in pools.values())
    keys = sorted(pools, key=lambda k: hashlib.sha256(k.encode()).hexdigest())
    for i in range(depth):
        order += [pools[k][i] for k in keys if i < len(pools[k])]
    return order


def space_family(model: str) -> str:
    """A family for a ``space:`` network: its stage styles in order (``space:resnet-vgg-mbconv``)."""
    import json

    cfg = json.loads(model.partition(":")[2])
    styles = []
    for s in cfg.get("stages", []):
        st = s.get("style", "?") + ("-" + s["block"] if "block" in s else "")
        if not styles or styles[-1] != st:
            styles.append(st)
    return "space:" + "+".join(sorted(set(styles)))


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout()


def run_model(c: dict, timeout: float) -> tuple[list[dict], list[dict]]:
    from perfseer.errors import PerfseerError
    from perfseer.memory.api import memory, resolve_model
    from perfseer.memory.learned import module_bytes

    shape = tuple(int(d) for d in c["input_shape"].split("x"))
    rows, fails = [], []
    base = {"model": c["model"], "input_shape": c["input_shape"], "family": c["family"], "graphs": c["graphs"]}
    try:
        src = resolve_model(c["model"], shape)
        exact = module_bytes(src.build())
    except Exception as e:  # noqa: BLE001 - recorded with its reason
        return [], [dict(base, phase="", optimizer="", batch_size=0, stage="build", error=type(e).__name__,
                         reason=str(e).splitlines()[0][:300] if str(e) else "")]
    for phase, opt, b in configs(c["model"]):
        t0 = time.perf_counter()
        signal.alarm(int(timeout))
        try:
            est = memory(c["model"], batch=b, phase=phase, optimizer=opt or "adamw", _src=src)
        except (Timeout, PerfseerError, Exception) as e:  # noqa: BLE001
            reason = f"over {timeout:g} s" if isinstance(e, Timeout) or "Timeout" in str(e) else str(e)[:300]
            fails.append(dict(base, phase=phase, optimizer=opt or "", batch_size=b, stage="simulate",
                              error=type(e).__name__, reason=reason.splitlines()[0] if reason else ""))
            continue
        finally:
            signal.alarm(0)
        row = dict(base, batch_size=b, phase=phase, optimizer=opt or "", device=DEVICE, precision="fp32",
                   method=est.method, peak_tensor_bytes=est.peak_tensor_bytes, peak_allocated=est.peak_allocated,
                   peak_reserved=est.peak_reserved, context=est.context, **exact,
                   sim_s=round(time.perf_counter() - t0, 3))
        row.update({f"b_{k}": v for k, v in est.breakdown.items() if k != "context"})
        rows.append(row)
    return rows, fails


FAILURE_COLUMNS = ("model", "input_shape", "family", "graphs", "phase", "optimizer", "batch_size", "stage", "error",
                   "reason")


def _read(path: Path) -> list[dict]:
    import pandas as pd

    if not path.exists() or path.stat().st_size == 0:
        return []
    return pd.read_csv(path).to_dict("records")


def main(argv=None) -> int:
    import pandas as pd

    from perfseer.atomic import atomic_write_text

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="datasets/memory_sim")
    ap.add_argument("--datasets", default="datasets", help="where datasets/timm and datasets/cpu are")
    ap.add_argument("--max-models", type=int, default=None, help="stop after this many models in total")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per configuration (default 120)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table, fail_path = out / "sim_runs.csv", out / "sim_failures.csv"
    rows, fails = _read(table), _read(fail_path)
    done = {r["model"] for r in rows} | {f["model"] for f in fails}
    signal.signal(signal.SIGALRM, _alarm)
    todo = [c for c in candidates(Path(args.datasets)) if c["model"] not in done]
    if args.max_models is not None:
        todo = todo[: max(0, args.max_models - len(done))]
    print(f"{len(done)} models done, {len(todo)} to go", flush=True)
    for i, c in enumerate(todo):
        t0 = time.perf_counter()
        r, f = run_model(c, args.timeout)
        if not r and not f:
            f = [dict(model=c["model"], input_shape=c["input_shape"], family=c["family"], graphs=c["graphs"],
                      phase="", optimizer="", batch_size=0, stage="simulate", error="none", reason="no configuration")]
        rows += r
        fails += f
        atomic_write_text(table, pd.DataFrame(rows).to_csv(index=False))
        atomic_write_text(fail_path, pd.DataFrame(fails, columns=FAILURE_COLUMNS).to_csv(index=False))
        print(f"[{i + 1}/{len(todo)}] {c['model'][:70]} {len(r)} rows, {len(f)} failed, "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
