"""Every value of a fixed set of predictions, to check that a change for speed leaves them alone.

    python -m benchmarks.lib.same_values save before.json     # on the old code
    python -m benchmarks.lib.same_values save after.json      # on the new code
    python -m benchmarks.lib.same_values compare before.json after.json

The calls: every shipped card (``force``) on ResNet-50, MobileNet-V3-small and a NAS-Bench-201
cell; the spec model (inference, training step, fp16), the spec transfer and the default route
on six GPUs for four bundled example models; 300 NAS-Bench-201 cells batched through
``nb201-gpus.infer`` and 20 alone; each at batch 1, 8 and 64, each a first call (the per-graph
caches emptied); and ``perfseer.compare`` on every registered GPU (ResNet-50 training at batch 64,
ViT-B/16 AMP inference at 32, MobileNet-V3-small inference at 8; memory not simulated).  ``compare`` prints every field that differs (a number: beyond ``--rtol``,
default 1e-9 relative) and exits 1 if any does.  The values depend on the machine's BLAS at the
last bits: compare files written on one machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

MODELS = ("resnet50", "resnet18", "mobilenet_v3_small", "vit_b_16")
DEVICES = ("a100-40gb", "h100-sxm", "l4", "t4", "rtx3090", "v100")
# perfseer.compare on every GPU: (model, phase, batch, precision)
COMPARED = (("resnet50", "train", 64, None), ("vit_b_16", "infer", 32, "amp-fp16"),
            ("mobilenet_v3_small", "infer", 8, None))


def _plain(v):
    """JSON of a row with floats as their repr (every bit kept)."""
    import numpy as np

    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (int, str, bool, type(None))) else repr(v)


def collect() -> dict:
    import numpy as np

    import perfseer
    from benchmarks.lib.speed_targets import forget, nb201_archs
    from perfseer.runtime.predictor import BUNDLED, list_predictors, load_predictor

    warnings.simplefilter("ignore")
    out: dict = {}
    graphs = {m: perfseer.extract(f"example:{m}", batch=1) for m in MODELS}
    graphs["nb201"] = perfseer.extract("nb201:" + nb201_archs(1)[0], batch=1)

    def run(key, pg, **kw):
        forget()
        try:
            out[key] = [_plain(r) for r in perfseer.predict(pg, batch=[1, 8, 64], **kw)]
        except Exception as e:  # noqa: BLE001  a refusal is a value too: it must stay the same
            out[key] = f"{type(e).__name__}: {e}"

    for c in list_predictors(BUNDLED):
        for m in ("resnet50", "mobilenet_v3_small", "nb201"):
            run(f"{c['name']}|{m}", graphs[m], predictor=c["name"], force=True)
    for dev in DEVICES:
        for m in MODELS:
            for phase in ("infer", "train"):
                run(f"spec|{dev}|{m}|{phase}", graphs[m], device=dev, basis="spec", phase=phase)
            run(f"spec-fp16|{dev}|{m}", graphs[m], device=dev, basis="spec", precision="fp16")
            run(f"transfer|{dev}|{m}", graphs[m], device=dev, basis="transfer")
        run(f"route|{dev}|resnet50", graphs["resnet50"], device=dev)
    for m, phase, b, prec in COMPARED:
        forget()
        try:
            out[f"compare|{m}|{phase}|{b}|{prec}"] = [_plain(r) for r in perfseer.compare(
                graphs[m], batch=b, phase=phase, precision=prec, memory=False)]
        except Exception as e:  # noqa: BLE001  as run(): a refusal must stay the same
            out[f"compare|{m}|{phase}|{b}|{prec}"] = f"{type(e).__name__}: {e}"
    cells = [perfseer.extract(f"nb201:{a}", batch=256).to_pyg() for a in nb201_archs(300, seed=1)]
    p = load_predictor("nb201-gpus.infer")
    out["nas-batched"] = _plain(np.asarray(p.predict_graphs(cells)).ravel().tolist())
    out["nas-alone"] = _plain(np.concatenate([p.predict_graphs([g]) for g in cells[:20]]).ravel().tolist())
    return out


def differences(a, b, rtol: float = 1e-9, path: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (numbers written as text: by more than ``rtol`` relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], rtol, f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, rtol, f"{path}[{i}]")]
    if a == b:
        return []
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return [f"{path}: {str(a)[:120]} | {str(b)[:120]}"]
    if abs(x - y) <= rtol * max(abs(x), abs(y)):
        return []
    return [f"{path}: {a} | {b}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save", help="write every value of the calls to a JSON file")
    s.add_argument("out")
    c = sub.add_parser("compare", help="print where two saved files differ (exit 1 if they do)")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--rtol", type=float, default=1e-9)
    args = ap.parse_args(argv)
    if args.cmd == "save":
        vals = collect()
        with open(args.out, "w") as f:
            json.dump(vals, f, indent=0, sort_keys=True)
        print(f"{len(vals)} calls written to {args.out}")
        return 0
    with open(args.a) as f, open(args.b) as g:
        a, b = json.load(f), json.load(g)
    diffs = differences(a, b, args.rtol)
    print("\n".join(diffs[:50]))
    print(f"{len(a)} calls, {len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
