"""A measured new device, end to end: calibrate a bundled predictor on its calibration-set rows and
score the card on the device's other rows.

What `benchmarks/gpu/collect_gpu.sh` measures is exactly this: the calibration set
(`datasets/calibration/calibration-set-20.txt`) and one held-out timm model per family, on a GPU
no bundled predictor was trained on.  This script splits the measurement table in two by the
calibration list, runs `perfseer calibrate` on the first part (the card lands in ``--out``), then
predicts every held-out row with the calibrated card, with the source predictor as it is and with
a FLOPs + bytes fit on the same calibration rows (the baseline), and prints MAPE, Spearman's rho,
the 90 % interval's coverage and the share of rows in domain::

    python -m benchmarks.lib.new_device --measurements OUT/gpu.csv \\
        --predictor rtx4090-amp-nchw-pt291.infer --out .cache/h200-card --json h200_calibration.json

Any device works, a CPU too (``datasets/cpu_timm224/``: this VM's CPU, measured by the same lists).

The held-out rows are other models than the calibration rows (the calibration list names whole
models), so the scores are those of models the card never saw.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION_SET = ROOT / "datasets" / "calibration" / "calibration-set-20.txt"


def split_rows(table, calibration: list[str], device: str | None, metric: str):
    """``(device, calibration rows, held-out rows)`` of one device's positive ``metric`` rows; the
    held-out rows are those of the calibration rows' phase and precision (a table may also hold,
    say, fp32 memory measurements of the same device, which an AMP card is not calibrated for)."""
    t = table[table[metric].notna() & (table[metric] > 0)]
    if device is None:  # the device with the most calibration rows
        counts = t[t["model"].isin(calibration)]["device"].value_counts()
        if counts.empty:
            raise SystemExit("no row of the table is a calibration model: measure the calibration set "
                             f"({CALIBRATION_SET.relative_to(ROOT)}) first, or pass --calibration")
        device = str(counts.index[0])
    t = t[t["device"] == device]
    cal = t[t["model"].isin(calibration)].reset_index(drop=True)
    keys = [c for c in ("phase", "precision") if c in t]
    same = t.set_index(keys).index.isin(cal.set_index(keys).index) if keys and len(cal) else np.ones(len(t), bool)
    held = t[~t["model"].isin(calibration) & same].reset_index(drop=True)
    return device, cal, held


def score(y, pred, rows=None) -> dict:
    """The project's metrics (:func:`perfseer.fit.metrics.evaluate`), the mean log ratio, and
    for predictions with intervals their coverage and the share in domain."""
    from perfseer.fit.metrics import evaluate

    y, pred = np.asarray(y, float), np.asarray(pred, float)
    m = evaluate(y, pred)
    out = {"rows": m["n"], "mape": m["mape"], "spearman": m["spearman"],
           "mean_log_ratio": float(np.mean(np.log(pred / y)))}
    if rows is not None:
        lo = np.array([r["interval"][0] if r.get("interval") else np.nan for r in rows])
        hi = np.array([r["interval"][1] if r.get("interval") else np.nan for r in rows])
        ok = ~np.isnan(lo)
        out["coverage"] = float(np.mean((lo[ok] <= y[ok]) & (y[ok] <= hi[ok]))) if ok.any() else None
        if any("in_domain" in r for r in rows):
            out["in_domain"] = float(np.mean([bool(r.get("in_domain")) for r in rows]))
    return out


def held_out_graphs(held, weight_work: bool | None = None) -> list:
    """One PerfGraph per held-out row (each (model, input shape) extracted once), extracted the
    way ``weight_work`` says (a card's :attr:`~perfseer.runtime.predictor.Predictor.weight_work`; ``None``:
    the default)."""
    from perfseer.features.extract import extract

    cache, out = {}, []
    for r in held.itertuples():
        key = (r.model, str(r.input_shape))
        if key not in cache:
            cache[key] = extract(r.model, batch=1, input_shape=tuple(int(d) for d in key[1].split("x")),
                                 weight_work=weight_work)
        out.append(cache[key])
    return out


def predict_rows(predictor, held, graphs, metric: str) -> list[dict]:
    return [next(p for p in predictor.predict(g, batch=int(b)) if p["metric"] == metric)
            for g, b in zip(graphs, held["batch_size"])]


def cost_fit(cal, cal_graphs, held, held_graphs, metric: str) -> np.ndarray:
    """The baseline a predictor must beat on the same rows: ``log y = a + b log FLOPs + c log bytes``
    (the step's FLOPs and memory access at the row's batch size, what a roofline reads), fitted by
    least squares on the calibration rows and applied to the held-out rows.  No source predictor;
    the graphs are extracted as the source card reads them."""

    def design(df, graphs):
        g = [pg.with_batch(int(b)) for pg, b in zip(graphs, df["batch_size"])]
        return np.column_stack([np.ones(len(g)), np.log([max(x.flops, 1.0) for x in g]),
                                np.log([max(x.memory_access_bytes, 1.0) for x in g])])

    coef, *_ = np.linalg.lstsq(design(cal, cal_graphs), np.log(cal[metric].to_numpy(float)), rcond=None)
    return np.exp(design(held, held_graphs) @ coef)


def by_batch(batch_sizes, y, rows_cal: list[dict], rows_src: list[dict], fit) -> dict:
    """:func:`score` of the calibrated card, the source as is and the cost fit per batch size of
    the held-out rows: ``{batch: {basis: scores}}``."""
    b = np.asarray(batch_sizes, dtype=int)
    y, fit = np.asarray(y, float), np.asarray(fit, float)
    out = {}
    for bs in sorted(set(b.tolist())):
        m = b == bs
        cal = [r for r, k in zip(rows_cal, m) if k]
        out[str(bs)] = {"calibrated": score(y[m], [r["value"] for r in cal], cal),
                        "source as is": score(y[m], [r["value"] for r, k in zip(rows_src, m) if k]),
                        "FLOPs + bytes fit": score(y[m], fit[m])}
    return out


#: the table's precision -> the one ``perfseer.runtime.route.predict_on_device`` takes
ROUTE_PRECISION = {"amp_fp16": "fp16", "amp_bf16": "bf16", "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}


def zero_shot_rows(held, graphs, registry_device: str, prefer: str) -> list[dict]:
    """What perfseer answers for the held-out rows on ``registry_device`` with no measurement of
    it: ``prefer`` ``transfer`` (the spec transfer; AMP inference only, else a PerfseerError) or
    ``spec`` (the spec model).  Named, not ``auto``: once a card of the device is bundled (as the
    H200's is), ``auto`` would answer from it."""
    from perfseer.runtime.route import predict_on_device

    out = []
    for g, b, phase, prec in zip(graphs, held["batch_size"], held["phase"], held["precision"]):
        rows = predict_on_device(g, registry_device, batch=int(b), phase=phase,
                                 precision=ROUTE_PRECISION.get(prec, prec), prefer=prefer)
        out.append(next(r for r in rows if r["metric"] == "latency_ms"))
    return out


def calibrated_transfer(cal, cal_graphs, held, held_graphs, held_transfer, registry_device: str, metric: str):
    """The spec transfer corrected by ``perfseer.fit.calibrate.calibrate`` (``loglinear``, the
    default configuration) on the calibration rows, applied to the held-out rows: what calibrating
    the transfer, instead of one source card, would give.  Benchmark only: ``perfseer calibrate``
    takes predictor cards, and the transfer is not one.  Returns the held-out predictions and the
    calibration's constant 90 % factor (``None`` if its interval has none) and the chosen variant.
    ``held_transfer``: the transfer's predictions of the held-out rows (:func:`zero_shot_rows`)."""
    from perfseer.runtime.predictor import Target
    from perfseer.fit.calibrate import CalibrationConfig, calibrate, global_design

    class _Transfer:  # the little of a Predictor that the loglinear fit reads, with its outputs given
        name, net = "spec-transfer", None
        targets = [Target(metric, registry_device, "infer")]

    def pyg(df, graphs):
        return [g.with_batch(int(b)).to_pyg() for g, b in zip(graphs, df["batch_size"])]

    src_cal = np.array([r["value"] for r in zero_shot_rows(cal, cal_graphs, registry_device, "transfer")])
    src_held = np.asarray(held_transfer, dtype=float)
    c = calibrate(_Transfer, pyg(cal, cal_graphs), cal[metric].to_numpy(float), list(cal["model"]), metric,
                  CalibrationConfig(), source_outputs=src_cal[:, None])
    ll = c.correction
    glob = global_design(pyg(held, held_graphs), tuple(ll.live_features))
    values = np.exp(ll.predict_log(np.log(np.maximum(src_held, 1e-12))[:, None], glob, None))
    factor = c.interval.get("factor")
    return values, (float(factor) if factor else None), c.extra.get("variant")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measurements", required=True, nargs="+",
                    help="the measurement table(s) (perfseer collect export); several are read as one")
    ap.add_argument("--predictor", required=True, help="the source predictor (perfseer predictors)")
    ap.add_argument("--calibration", default=str(CALIBRATION_SET), help="the calibration models, one per line")
    ap.add_argument("--held-out", default=None, metavar="FILE",
                    help="score only these models (a models file; default: every model outside the calibration "
                         "list), e.g. benchmarks/gpu/heldout-families.txt to compare calibrations of another size "
                         "on the same rows")
    ap.add_argument("--calibration-batches", type=lambda t: [int(v) for v in t.split(",")], default=None,
                    metavar="B,B", help="calibrate on these batch sizes' rows only (default: every calibration row); "
                                        "the held-out rows keep every batch size, scored per batch too")
    ap.add_argument("--device", default=None, help="the table's device (default: the one with most calibration rows)")
    ap.add_argument("--metric", default="latency_ms")
    ap.add_argument("--out", required=True, help="folder for the calibrated card")
    ap.add_argument("--json", default=None, help="write the scores and every held-out prediction here")
    ap.add_argument("--zero-shot", default=None, metavar="DEVICE",
                    help="also score what perfseer answers with no measurement of the device: the spec transfer "
                         "and the spec model for this registry name (perfseer devices), latency only")
    ap.add_argument("--calibrate-transfer", action="store_true",
                    help="with --zero-shot: also score the spec transfer calibrated on the calibration rows")
    args = ap.parse_args(argv)

    from perfseer.cli.collect import read_model_file
    from perfseer.cli.main import main as cli
    from perfseer.data.table import read_table
    from perfseer.runtime.predictor import load_predictor

    import pandas as pd

    table = pd.concat([read_table(m) for m in args.measurements], ignore_index=True)
    device, cal, held = split_rows(table, read_model_file(args.calibration), args.device, args.metric)
    if args.calibration_batches:
        cal = cal[cal["batch_size"].astype(int).isin(args.calibration_batches)].reset_index(drop=True)
    if args.held_out:
        held = held[held["model"].isin(read_model_file(args.held_out))].reset_index(drop=True)
    if held.empty:
        raise SystemExit(f"no held-out rows of {device}: measure models outside the calibration list too"
                         + (f" (and in {args.held_out})" if args.held_out else ""))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cal_csv = out / "calibration_rows.csv"
    cal.to_csv(cal_csv, index=False)
    print(f"{device}: {len(cal)} calibration rows ({cal['model'].nunique()} models), {len(held)} held-out rows "
          f"({held['model'].nunique()} models)")
    rc = cli(["calibrate", "--predictor", args.predictor, "--measurements", str(cal_csv), "--out", str(out),
              "--metric", args.metric])
    if rc:
        return rc
    card = next(p for p in out.glob("*.json") if p.name != "calibration_rows.json")
    calibrated, source = load_predictor(card), load_predictor(args.predictor)
    y = held[args.metric].to_numpy(float)
    graphs = held_out_graphs(held, source.weight_work)  # the calibrated card reads graphs as its source does
    rows_cal = predict_rows(calibrated, held, graphs, args.metric)
    rows_src = predict_rows(source, held, graphs, args.metric)
    cal_graphs = held_out_graphs(cal, source.weight_work)
    fit = cost_fit(cal, cal_graphs, held, graphs, args.metric)
    result = {"device": device, "source": args.predictor, "card": str(card),
              "calibration": {"rows": int(len(cal)), "models": int(cal["model"].nunique()),
                              "variant": calibrated.card["calibration"]["extra"].get("variant"),
                              "factor": calibrated.card["calibration"]["interval"]["factor"]},
              "held_out": {"calibrated": score(y, [r["value"] for r in rows_cal], rows_cal),
                           "source as is": score(y, [r["value"] for r in rows_src], rows_src),
                           "FLOPs + bytes fit on the calibration rows (no source)": score(y, fit)},
              "rows": [{"model": m, "batch_size": int(b), "y": float(v), "calibrated": rc_["value"],
                        "interval": rc_.get("interval"), "in_domain": rc_.get("in_domain"), "source": rs["value"],
                        "cost_fit": float(f)}
                       for m, b, v, rc_, rs, f in zip(held["model"], held["batch_size"], y, rows_cal, rows_src, fit)]}
    if args.zero_shot and args.metric == "latency_ms":
        from perfseer.errors import PerfseerError

        zero = {}
        zs_graphs = held_out_graphs(held) if source.weight_work else graphs  # the spec paths read the default
        for prefer in ("transfer", "spec"):
            try:
                zs = zero[prefer] = zero_shot_rows(held, zs_graphs, args.zero_shot, prefer)
            except PerfseerError as e:
                print(f"zero-shot {prefer}: not scored ({e})")
                continue
            basis = sorted({str(r.get("basis")) for r in zs})
            result["held_out"][f"zero-shot ({'/'.join(basis)})"] = score(y, [r["value"] for r in zs], zs)
            for row, r in zip(result["rows"], zs):
                row[f"zero_shot_{prefer}"] = r["value"]
        if args.calibrate_transfer and "transfer" in zero:
            vals, factor, variant = calibrated_transfer(cal, held_out_graphs(cal) if source.weight_work else cal_graphs,
                                                        held, zs_graphs,
                                                        [r["value"] for r in zero["transfer"]], args.zero_shot,
                                                        args.metric)
            rows_ct = [{"value": float(v), "interval": [v / factor, v * factor] if factor else None}
                       for v in vals]
            result["held_out"][f"spec transfer calibrated on the {len(cal)} rows (loglinear, {variant})"] = \
                score(y, vals, rows_ct)
            for row, v in zip(result["rows"], vals):
                row["transfer_calibrated"] = float(v)
    if held["batch_size"].nunique() > 1:  # does the card's batch scaling hold on this device?
        result["held_out_by_batch"] = by_batch(held["batch_size"], y, rows_cal, rows_src, fit)
    named = list(result["held_out"].items()) + [(f"batch {bs}, {n}", sc) for bs, d in
                                                 result.get("held_out_by_batch", {}).items() for n, sc in d.items()]
    for name, s in named:
        cov = f", 90 % interval holds {100 * s['coverage']:.1f} %" if s.get("coverage") is not None else ""
        print(f"{name}: MAPE {s['mape']:.2f} %, Spearman {s['spearman']:.3f}, mean log ratio "
              f"{s['mean_log_ratio']:+.3f}{cov}"
              + (f", in domain {100 * s['in_domain']:.0f} %" if "in_domain" in s else "") + f" ({s['rows']} rows)")
    if args.json:
        from perfseer.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
