"""Train the bundled spec model's kernel MLPs on NeuSight's kernel measurements of all five
NVIDIA training GPUs and write ``src/perfseer/predictors/spec-kernels.{json,safetensors}``.

    python scripts/train_spec_model.py --data ../shared/datasets/neusight \
        [--calibration benchmarks/results/spec_timm_calibration.json]

``--calibration``: a JSON written by ``benchmarks/lib/spec_timm_logo.py --fit-all`` holding the
whole-model calibration (per precision) learned on timm runs of measured GPUs; it is copied into
the card.  ``--trust FILE`` (repeatable): interval calibrations written by
``benchmarks/lib/spec_neusight.py --trust`` (``fp32``) and ``benchmarks/lib/spec_timm_logo.py --trust``
(``amp-calibrated``, ``amp-zero-shot``), copied into the card's ``intervals``.  Every card gets
its ``domain`` (:func:`perfseer.specmodel.trust.build_domain`, from the training GPUs).
``--attach-only`` adds calibration, intervals and domain to the existing card without training.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent.parent / "shared" / "datasets" / "neusight"))
    ap.add_argument("--out", default=str(ROOT / "src" / "perfseer" / "predictors"))
    ap.add_argument("--name", default="spec-kernels")
    ap.add_argument("--max-rows", type=int, default=8000, help="kernel rows per family and GPU (0: all)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--time-limit", type=float, default=20.0, help="CPU seconds per family")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--device-features", default="0", choices=("0", "power", "tdp", "all"))
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--trust", action="append", default=[],
                    help="interval calibration JSON (benchmarks/lib/spec_neusight.py / spec_timm_logo.py --trust); repeatable")
    ap.add_argument("--feature-set", default="full", choices=("full", "relative", "relative-gemm"),
                    help="kernel features (perfseer.specmodel.kernels.features)")
    ap.add_argument("--ood-weight", type=float, default=0.5,
                    help="beyond the training GPUs' range, each kernel's log ratio to its roofline bound times this "
                         "(perfseer.specmodel.net.KernelModelConfig.ood_weight; 1: off; default 0.5, the geometric "
                         "mean of the MLP and the roofline bound: docs/concepts/spec-model.md measures it)")
    ap.add_argument("--attach-only", action="store_true",
                    help="do not train: copy --calibration into the existing card OUT/NAME.json")
    args = ap.parse_args(argv)
    if args.attach_only:
        return attach(Path(args.out) / f"{args.name}.json", args.calibration, args.trust, argv)

    import torch

    torch.set_num_threads(1)
    from perfseer.devices import get_device

    import functools

    _spec = functools.lru_cache(maxsize=None)(get_device)  # one registry look-up per device name
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel import neusight as ns
    from perfseer.specmodel.net import KernelModel, KernelModelConfig

    k = ns.load_kernels(args.data)
    if args.max_rows:
        k = k.sample(frac=1.0, random_state=0).groupby(["family", "device"]).head(args.max_rows).reset_index(drop=True)
    dev = kt.device_frame([_spec(d) for d in k["device"]], ["fp32"] * len(k), k["family"])
    cfg = KernelModelConfig(epochs=args.epochs, time_limit_s=args.time_limit, hidden=args.hidden, layers=args.layers,
                            device_features={"0": False, "power": "power", "tdp": "tdp", "all": "all"}[args.device_features],
                            feature_set=args.feature_set, ood_weight=args.ood_weight)
    t0 = time.time()
    model = KernelModel(cfg).fit(k, dev, k["latency_us"], verbose=True)
    extra = {
        "about": "Kernel-latency MLPs of the perfseer spec model (perfseer.specmodel): log10(latency / roofline "
                 "bound) per kernel family from roofline, wave and device features.",
        "training": {"data": "NeuSight kernel measurements (shared/datasets/neusight/kernels, MIT; "
                             "github.com/sitar-lab/NeuSight @6945927), FP32, TF32 off",
                     "devices": sorted(k["device"].unique()), "rows": {f: int((k["family"] == f).sum())
                                                                     for f in kt.FAMILIES},
                     "max_rows_per_family_and_gpu": args.max_rows, "wall_s": round(time.time() - t0, 1),
                     "command": "python scripts/train_spec_model.py " + " ".join(argv if argv is not None else sys.argv[1:])},
        "evaluation": "benchmarks/lib/spec_neusight.py (leave-one-GPU-out, NeuSight workloads), "
                      "benchmarks/lib/spec_timm_logo.py (leave-one-GPU-out, timm on RTX GPUs); see docs/concepts/spec-model.md",
    }
    from perfseer.specmodel.trust import build_domain

    extra["domain"] = build_domain([get_device(d) for d in sorted(k["device"].unique())])
    if args.calibration:
        cal = json.loads(Path(args.calibration).read_text())
        extra["calibration"] = cal["calibration"]
        extra["calibration_source"] = cal.get("source", args.calibration)
    if args.trust:
        extra.update(_intervals(args.trust, {}))
    card = model.save(args.out, args.name, extra=extra)
    print(f"wrote {card}")
    return 0


def _intervals(paths, card: dict) -> dict:
    """``intervals`` (by kind: q, n, median, source) and ``ood_factor`` from trust JSONs."""
    from perfseer.specmodel.trust import OOD_FACTOR

    out = dict(card.get("intervals") or {})
    for p in paths:
        t = json.loads(Path(p).read_text())
        for kind in ("fp32", "amp-calibrated", "amp-zero-shot"):
            if kind in t:
                v = t[kind]
                out[kind] = {"q": v["q"], "n": v["n"], "median_abs": v.get("median_abs"), "source": t.get("source", p)}
                if v.get("families"):  # kernel families the calibration runs contained
                    out[kind]["families"] = v["families"]
    return {"intervals": out, "ood_factor": card.get("ood_factor", OOD_FACTOR)}


def attach(card_path: Path, calibration, trust, argv) -> int:
    """Put a calibration (written by benchmarks/lib/spec_timm_logo.py --fit-all), interval calibrations
    and the domain into a card, atomically."""

    from perfseer.devices import get_device
    from perfseer.specmodel.trust import build_domain

    card = json.loads(card_path.read_text())
    cmd = "python scripts/train_spec_model.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if calibration:
        cal = json.loads(Path(calibration).read_text())
        card["calibration"] = cal["calibration"]
        card["calibration_source"] = cal.get("source", str(calibration))
        card["calibration_command"] = cmd
    if trust:
        card.update(_intervals(trust, card))
        card["intervals_command"] = cmd
    card["domain"] = build_domain([get_device(d) for d in card["training"]["devices"]])
    from perfseer.atomic import atomic_write_text

    atomic_write_text(card_path, json.dumps(card, indent=1) + "\n")
    print(f"attached to {card_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
