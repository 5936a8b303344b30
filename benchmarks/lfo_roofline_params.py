"""The roofline parameters fitted on each leave-families-out fold's training graphs.

    python benchmarks/lfo_roofline_params.py --json benchmarks/data/lfo_roofline_params.json

For each setting and fold (the folds of ``leave_families_out.py``), :func:`perfseer.models.roofline.fit_params`
on the training rows with ``fit=overheads`` (the device spec's peak and bandwidth, per-node
overheads fitted) and ``fit=all`` (all five parameters, from generic rates).  Printed as
``P`` TFLOP/s, ``W`` GB/s, ``a``, ``c1`` and ``c2`` µs (docs/generalisation.md, "Physics baseline").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
import numpy as np  # noqa: E402
from leave_families_out import fold_splits  # noqa: E402

SPECS = {"timm-3090-infer": ("rtx3090", "fp16"), "timm-i9": ("i9-10940x", "fp32")}


def main(argv=None) -> int:
    from perfseer.data.splits import model_family
    from perfseer.models import roofline as rl
    from perfseer.fit.data import select

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folds", type=int, default=4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    out = {"benchmark": "lfo_roofline_params", "environment": tb.environment(), "settings": {}}
    for name, (dev, prec) in SPECS.items():
        s = tb.SETTINGS[name]
        view, _ = tb.setting_view(s, None, None, None)
        labels = view.labels.copy()
        labels["family"] = [model_family(m) for m in labels["model"].astype(str)]
        labels = labels[labels["family"].notna()].reset_index(drop=True)
        rows = out["settings"][name] = []
        for k in range(args.folds):
            lab = labels.copy()
            lab["family_split"] = fold_splits(lab["family"], args.folds, k, 0)
            sel = select(tb.View(view.graphs, lab), s.metric, list(s.devices), s.phase, "family_split")
            y = np.array([float(g.y[0, 0]) for g in sel.train])
            for fit in ("overheads", "all"):
                init = rl.spec_params(dev, prec) if fit == "overheads" else rl.RooflineParams(*rl.GENERIC)
                p = rl.fit_params(sel.train, y, init, rl.FITS[fit])
                rows.append({"fold": k, "fit": fit, "P_tflops": p.P / 1e9, "W_gbs": p.W / 1e6, "a": p.a,
                             "c1_us": p.c1 * 1e3, "c2_us": p.c2 * 1e3})
                print(f"{name} fold {k + 1} {fit}: P {p.P / 1e9:.3g} TFLOP/s, W {p.W / 1e6:.4g} GB/s, a {p.a:.3g}, "
                      f"c1 {p.c1 * 1e3:.3g} us, c2 {p.c2 * 1e3:.3g} us", flush=True)
    tb.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    tb.run_main(main)
