"""Why a calibrated interval is too narrow on one device: shift, batch mix, or the variant choice.

For each device of a ``calibration_sweep.py cache`` file, K and random draw (the sweep's draws),
fits every ``loglinear`` variant of :data:`perfseer.fit.calibrate.AUTO_VARIANTS` and ``auto``
(the one of lowest nested leave-one-model-out RMS ``s``), and prints per variant the mean ``s``,
the held-out test rows' RMS and mean signed log residual, and the share of test rows inside
``c(K) s`` (the ``scaled`` rule, random table).  ``auto``'s ``s`` below every single variant's,
with no better test RMS, is the optimism of choosing on the same residuals; ``auto-nested`` is the
same fit with ``s`` from the variant choice nested in the leave-one-model-out loop
(:func:`perfseer.fit.calibrate.auto_residuals`, what ``auto`` now reads).

Example::

    python benchmarks/calibration_variant_optimism.py --cache cache_timm4090.npz --k 10,20,50
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _training_bench as tb  # noqa: E402
import calibration_sweep as cs  # noqa: E402


def main(argv=None) -> int:
    from perfseer.fit import calibrate as C

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--k", type=lambda t: [int(v) for v in t.split(",")], default=[10, 20, 50])
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    z = cs.load_cache(args.cache)
    src = [str(d) for d in z["source_devices"]]
    ridge = C.CalibrationConfig().ridge
    out = []
    print("| device | role | K | variant | nested s | test RMS | test mean r | coverage of c(K) s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for target in dict.fromkeys(z["target"].tolist()):
        v = cs.target_view(z, target, src)
        t = v.test
        for k in args.k:
            c = C.scale_factor(k, 0.9, "random")
            acc: dict[str, list] = {}
            for d in range(args.draws):
                rng = np.random.default_rng(1000 * k + d)  # the sweep's random draws
                pick = cs.select("random", k, rng, v.glob[v.ci], v.logp[v.ci], v.emb[v.ci])
                rows = np.flatnonzero(~t & np.isin(v.model, list(set(v.cand[pick]))))
                g = C._groups(v.model[rows])
                ly = np.log(v.y[rows])
                one, nested, inner = {}, {}, {}
                for var in C.AUTO_VARIANTS:
                    e = v.emb[rows] if "embedding" in C.VARIANTS[var] else None
                    nr, inner[var] = C.nested_residuals(v.logp[rows], v.glob[rows], ly, g, var, ridge, emb=e, inner=True)
                    nested[var] = nr
                    fit = C.fit_correction(v.logp[rows], v.glob[rows], ly, g, ridge, var, emb=e)
                    r = np.log(v.y[t]) - fit.predict_log(v.logp[t], v.glob[t], v.emb[t] if e is not None else None)
                    s = float(np.sqrt(np.mean(nr ** 2)))
                    one[var] = (s, float(np.sqrt(np.mean(r ** 2))), float(np.mean(r)), float(np.mean(np.abs(r) <= c * s)), r)
                one["auto"] = one[min(C.AUTO_VARIANTS, key=lambda q: one[q][0])]
                # the same fit, s from the residuals of the choice nested in the leave-one-model-out
                # loop (calibrate.auto_residuals: what the library's auto now gives the interval)
                s_n = float(np.sqrt(np.mean(C.auto_residuals(nested, inner)[0] ** 2)))
                a = one["auto"]
                cov_n = float(np.mean(np.abs(a[4]) <= c * s_n))
                one["auto-nested"] = (s_n, a[1], a[2], cov_n, a[4])
                for key, val in one.items():
                    acc.setdefault(key, []).append(val[:4])
            for key, vals in acc.items():
                m = np.mean(vals, axis=0)
                rec = {"target": target, "role": v.role, "k": k, "variant": key, "s": m[0], "test_rms": m[1],
                       "test_mean_r": m[2], "coverage": m[3], "draws": len(vals)}
                out.append(rec)
                print(f"| {target} | {v.role} | {k} | {key} | {m[0]:.3f} | {m[1]:.3f} | {m[2]:+.3f} | {m[3]:.3f} |")
    tb.write_json(args.json, {"benchmark": "calibration-variant-optimism", "args": vars(args), "results": out})
    return 0


if __name__ == "__main__":
    tb.run_main(main)
