"""Does a shift that grows with the blend members' disagreement beat the constant shift?

Under a log-normal error of spread ``s`` the MAPE-optimal point lies below the median by an
amount that grows with ``s``; the blend's constant log shift (``fit_log_shift``) assumes one
``s`` for every row.  This check fits, per leave-families-out fold and on its validation rows
only, ``log p = blend + b0 + b1 * x`` with ``x = s^2`` (or ``s``), ``s`` the standard deviation of
the individual networks' log predictions, and scores the test rows, next to the constant shift.

Reads a merged ``leave_families_out.py --merge`` report (every run's validation and test
predictions); the blend's weights are refitted exactly as ``--stack`` fits them.

Example::

    python benchmarks/lfo_uncertainty_shift.py benchmarks/results/r6/merged_i9.json --setting timm-i9 \\
        --blend 'seernet[readout=sum]+seernet+pmgns@200ep-seedmean+pmgns-phys@200ep-seedmean' \\
        --spread 'seernet[readout=sum],seernet,pmgns@200ep,pmgns@200ep-s1,pmgns@200ep-s2,pmgns-phys@200ep,pmgns-phys@200ep-s1,pmgns-phys@200ep-s2'
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

def _shift_grid() -> np.ndarray:
    """The blend's own shift grid (:func:`perfseer.models.blend.fit_log_shift`), nearest 0 first."""
    from perfseer.models.blend import SHIFT_SPAN, SHIFT_STEP

    n = round(SHIFT_SPAN / SHIFT_STEP)
    grid = np.arange(-n, n + 1) * SHIFT_STEP
    return grid[np.argsort(np.abs(grid), kind="stable")]


# the slopes tried, from 0 outwards (ties go to the smaller |b1|, 0 first)
SLOPES = {"s2": -np.arange(0.0, 20.001, 0.25), "s": -np.arange(0.0, 5.001, 0.05)}


def _mape(y, p) -> float:
    return float(np.mean(np.abs(p / y - 1)))


def fit_shift(base, x, y, slopes) -> tuple[float, float, float]:
    """``(b0, b1, validation MAPE)``: the grid point of the lowest validation MAPE (ties: the first
    found, i.e. the smallest ``|b1|``, then the smallest ``|b0|``)."""
    shifts = _shift_grid()
    best = (0.0, 0.0, np.inf)
    for b1 in slopes:
        errs = [_mape(y, np.exp(base + b + b1 * x)) for b in shifts]
        i = int(np.argmin(errs))
        if errs[i] < best[2] - 1e-12:
            best = (float(shifts[i]), float(b1), errs[i])
    return best


def run(report: dict, setting: str, blend: list[str], spread: list[str], form: str) -> dict:
    from perfseer.models.blend import fit_weights

    S = report["settings"][setting]
    folds, err_c, err_a = [], [], []
    for f in S["folds"]:
        by = {r["method"]: r for r in f["results"]}
        missing = [m for m in blend + spread if m not in by]
        if missing:
            raise SystemExit(f"error: fold {f['fold'] + 1} of {setting} has no run {missing[0]!r}: merge it first")
        yv, yt = np.asarray(f["val_y"], float), np.asarray(f["test_rows"]["y"], float)
        lv = np.log([by[m]["pred_val"] for m in blend])
        lt = np.log([by[m]["pred_test"] for m in blend])
        w = fit_weights(lv, yv)
        sv = np.std(np.log([by[m]["pred_val"] for m in spread]), axis=0)
        st = np.std(np.log([by[m]["pred_test"] for m in spread]), axis=0)
        xv, xt = (sv ** 2, st ** 2) if form == "s2" else (sv, st)
        c0, _, cval = fit_shift(w @ lv, xv, yv, [0.0])
        a0, a1, aval = fit_shift(w @ lv, xv, yv, SLOPES[form])
        pc, pa = np.exp(w @ lt + c0), np.exp(w @ lt + a0 + a1 * xt)
        err_c += list(np.abs(pc / yt - 1))
        err_a += list(np.abs(pa / yt - 1))
        folds.append({"fold": f["fold"], "weights": w.tolist(), "constant": {"b": c0, "val": cval * 100, "test": _mape(yt, pc) * 100},
                      "adaptive": {"b0": a0, "b1": a1, "val": aval * 100, "test": _mape(yt, pa) * 100},
                      "median_spread_test": float(np.median(st))})
    return {"setting": setting, "form": form, "folds": folds,
            "pooled": {"constant": float(np.mean(err_c) * 100), "adaptive": float(np.mean(err_a) * 100)}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", help="a merged leave_families_out.py report")
    p.add_argument("--setting", required=True)
    p.add_argument("--blend", required=True, help="the blend's members, '+'-separated (seed means allowed)")
    p.add_argument("--spread", required=True, help="the networks whose disagreement is s, comma-separated")
    p.add_argument("--form", default="s2,s", help="x = s^2 (s2) and/or s (s), comma-separated")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from perfseer.models.blend import split_members

    report = json.loads(Path(args.report).read_text())
    out = [run(report, args.setting, split_members(args.blend), args.spread.split(","), form)
           for form in args.form.split(",")]
    for o in out:
        for f in o["folds"]:
            c, a = f["constant"], f["adaptive"]
            print(f"{o['setting']} x={o['form']} fold {f['fold'] + 1}: constant b={c['b']:+.3f} val {c['val']:.2f} "
                  f"test {c['test']:.2f} | b0={a['b0']:+.3f} b1={a['b1']:+.2f} val {a['val']:.2f} test {a['test']:.2f}")
        print(f"{o['setting']} x={o['form']}: pooled test MAPE, constant {o['pooled']['constant']:.2f} %, "
              f"adaptive {o['pooled']['adaptive']:.2f} %")
    if args.json:
        Path(args.json).write_text(json.dumps({"benchmark": "lfo_uncertainty_shift", "args": vars(args), "runs": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
