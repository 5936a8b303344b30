"""Which models of a graph dataset compute on their weights at every forward?

Since the extractor keeps such computation as device operators (weight standardisation, a
relative-position-bias gather: :mod:`perfseer.graph.extract`), a dataset built before that change
holds stale graphs for exactly these models.  Re-exporting a whole dataset takes CPU-hours; this
screen runs one forward of each model on fake tensors (seconds) and lists the models where an
operator other than a view reads only weight-derived tensors.  The list feeds
``scripts/refresh_graphs.py``.  Over-inclusive by design (a refreshed graph that did not change
costs only its export).

    python scripts/screen_weight_compute.py datasets/timm --out screen.json [--devices D1,D2] [--limit N]

Resumable: models already in ``--out`` are skipped; the file is rewritten atomically every model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def weight_compute(module, shape) -> dict:
    """``{op name: count}`` of the non-view aten operators of one eval forward of ``module`` (on
    the meta device) whose tensor inputs all derive from its parameters and buffers."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    derived = {id(t) for t in (*module.parameters(), *module.buffers())}
    keep = []  # derived tensors stay alive, so their ids stay theirs
    found: dict[str, int] = {}
    ignore = {"aten.detach", "aten.alias", "aten.lift_fresh", "aten._to_copy", "aten.clone"}

    class _Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
            if tensors and any(id(t) in derived for t in tensors) and all(
                    id(t) in derived or t.numel() <= 1 for t in tensors):
                name = func.overloadpacket._qualified_op_name.replace("::", ".")
                for o in tree_flatten(out)[0]:
                    if isinstance(o, torch.Tensor):
                        derived.add(id(o))
                        keep.append(o)
                if (not func.is_view and name not in ignore and not name.startswith("prim.")
                        and any(id(t) in derived and t.is_floating_point() for t in tensors)):
                    found[name] = found.get(name, 0) + 1
            return out

    with torch.no_grad(), FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty((1, *shape), device="meta")
        with _Track():
            module(x)
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset")
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--devices", default="", help="only pairs measured on these devices (comma-separated)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from perfseer.data.dataset import load_dataset, parse_shape
    from perfseer.sources.load import split_reference
    from perfseer.graph.torch_export import meta_twin
    from perfseer.sources.zoo import build_zoo_model

    ds = load_dataset(args.dataset)
    keys = sorted({(m["model"], m["input_shape"]) for m in ds.graphs.meta})
    if args.devices:
        rows = ds.labels[ds.labels.device.isin(args.devices.split(","))]
        keys = sorted(set(keys) & set(zip(rows.model, rows.input_shape)))
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.exists() else {}
    todo = [k for k in keys if f"{k[0]}|{k[1]}" not in done][: args.limit or None]
    print(f"{len(keys)} (model, input shape) pairs, {len(todo)} to screen", file=sys.stderr)
    for i, (model, shape) in enumerate(todo):
        t = time.perf_counter()
        try:
            zoo, name = split_reference(model)
            module, _, on_meta = build_zoo_model(zoo, name)
            module = module if on_meta else meta_twin(module)
            found = weight_compute(module, parse_shape(shape))
            entry = {"ops": found}
        except Exception as e:  # noqa: BLE001 - a model that cannot run is listed, for a refresh
            entry = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
        entry["s"] = round(time.perf_counter() - t, 2)
        done[f"{model}|{shape}"] = entry
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(done, indent=0, sort_keys=True))
        os.replace(tmp, out)
        if entry.get("ops") or "error" in entry:
            print(f"[{i + 1}/{len(todo)}] {model} {shape}: {entry}", file=sys.stderr, flush=True)
    flagged = sum(1 for e in done.values() if e.get("ops") or "error" in e)
    print(f"{flagged} of {len(done)} pairs compute on their weights (or failed)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
