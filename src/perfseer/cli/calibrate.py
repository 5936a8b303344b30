"""``perfseer calibrate``: a predictor card for a new device from K measurements of it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from perfseer.cli.bounds import MAX_CALIBRATION_ROWS, check_device_name, check_measured, check_name, check_out_dir
from perfseer.errors import PerfseerError
from perfseer.features.pyg import attach_liveness
from perfseer.runtime.predictor import Target, load_predictor, slug

MEASUREMENTS_FORMAT = """\
--measurements: CSV (or Parquet), one row per measured step, with the columns
model,input_shape,batch_size,phase,device,latency_ms (optional: precision,
source; other metrics: memory_mb, util_pct, energy_j); model is a reference
(timm:, torchvision:, hf:...) or an .onnx path.  For example:

  model,input_shape,batch_size,phase,device,latency_ms
  timm:resnet50,3x224x224,32,infer,my_gpu/amp,12.3
  torchvision:mobilenet_v3_large,3x224x224,1,infer,my_gpu/amp,2.1

perfseer collect export writes this format (docs/guide/calibrate.md)."""


class _KeepLinesFormatter(argparse.HelpFormatter):
    """Reflows the one-paragraph description; keeps the lines of a text that has several (the epilog)."""

    def _fill_text(self, text, width, indent):
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def add_parser(sub) -> None:
    from perfseer.fit.calibrate import (BLEND_VARIANT, DEFAULT_INTERVAL, DEFAULT_METHOD, DEFAULT_VARIANT,
                                        INTERVAL_RULES, METHODS, VARIANTS)

    p = sub.add_parser(
        "calibrate", help="calibrate a trained predictor to a new device from a few measurements",
        description="Turn K measurements of a new device (K = 5-50 rows of a measurement table, e.g. the "
                    "calibration set measured by perfseer collect; docs/guide/calibrate.md) and a source predictor "
                    "into a predictor card for the new device, with a 90 % interval from leave-one-model-out "
                    "residuals that widens with a model's distance from the calibration models, and a domain (the "
                    "calibration rows' feature ranges; models far from every calibration model are flagged).  The card records the source "
                    "predictor (name and file digests) and the calibration rows.",
        epilog=MEASUREMENTS_FORMAT, formatter_class=_KeepLinesFormatter)
    p.add_argument("--predictor", required=True, metavar="NAME|PATH", help="the source predictor (perfseer predictors)")
    p.add_argument("--measurements", required=True, metavar="TABLE", help="CSV or Parquet measurement table")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the calibrated card")
    p.add_argument("--device", default=None, help="the table's device to calibrate to (default: its only one)")
    p.add_argument("--phase", default=None, choices=("infer", "train"), help="default: the table's only phase")
    p.add_argument("--metric", default="latency_ms", help="the measured metric (default latency_ms)")
    p.add_argument("--method", default=DEFAULT_METHOD, choices=METHODS,
                   help=f"default {DEFAULT_METHOD} (chosen on validation devices, docs/guide/calibrate.md)")
    p.add_argument("--meta-data", default=None, metavar="DATASET",
                   help="--method meta: a graph dataset of source devices to meta-learn the head's start over")
    p.add_argument("--variant", default=DEFAULT_VARIANT, choices=["auto", BLEND_VARIANT, *VARIANTS],
                   help=f"--method loglinear: the correction's inputs (default {DEFAULT_VARIANT}: chosen on the K rows; "
                        "cost -- the rows' own FLOPs and memory access -- when the source predictor is of "
                        f"another device kind; {BLEND_VARIANT} -- the geometric mean of both -- when the K rows favour it, "
                        "from a CPU predictor to a CPU; "
                        "docs/guide/calibrate.md)")
    p.add_argument("--interval", default=DEFAULT_INTERVAL, choices=INTERVAL_RULES,
                   help=f"how the interval's half-width is set (default {DEFAULT_INTERVAL}, chosen on validation "
                        "and source devices; docs/guide/calibrate.md)")
    p.add_argument("--selection", default="auto", choices=("auto", "spanning", "random"),
                   help="how the K models were chosen, for the interval's c(K): spanning (K-centre, as the shipped "
                        "calibration set), random (any other choice); auto: spanning when every model is one of "
                        "datasets/calibration's")
    p.add_argument("--live-features", default="", metavar="NAMES",
                   help="--method loglinear: comma-separated live columns of the graph (live_flops_fraction, "
                        "live_node_fraction, output_independent; perfseer.graph.liveness) the correction also reads; "
                        "default none (chosen on validation devices, docs/guide/calibrate.md)")
    p.add_argument("--coverage", type=float, default=0.9, help="interval level (default 0.9)")
    p.add_argument("--name", default=None, help="card name (default DEVICE.PHASE.calibrated)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the card's calibration section as JSON")
    p.set_defaults(func=run_calibrate)


FEW_MODELS = 5  # the smallest K; fewer models still make a card, with a warning


def read_rows(path, device: str | None, phase: str | None, metric: str, chunk_rows: int = 10_000):
    """``(rows, device, phase)``: the calibration rows of the measurement table at ``path`` (those
    with a value of ``metric``, of ``device`` and ``phase`` when given, else of the table's only
    ones), read as a stream: only rows that can be calibration rows are kept, and past
    :data:`~perfseer.cli.bounds.MAX_CALIBRATION_ROWS` of them the reading stops with the error,
    before the table is held in memory.

    Raises:
        PerfseerError: a table that cannot be read, too many rows, or no row to calibrate on.
    """
    import pandas as pd  # deferred: heavy, loaded on first use

    from perfseer.data.table import METRIC_COLUMNS, iter_table  # deferred: loads pandas, pyarrow

    limit = MAX_CALIBRATION_ROWS
    kept, n_kept, read, last, others, with_metric = [], 0, 0, None, set(), 0
    skipped: dict[tuple[str, str], int] = {}  # (device, phase) -> rows without a value of the metric
    measured: set[str] = set()
    for chunk in iter_table(path, chunk_rows):
        read += len(chunk)
        last = chunk
        if metric not in chunk.columns:
            raise PerfseerError(f"the measurements have no {metric} column", "measure it, or pass --metric")
        measured |= {c for c in METRIC_COLUMNS if chunk[c].notna().any()}
        has = chunk[metric].notna()
        with_metric += int(has.sum())
        for key, n in chunk[~has].groupby([chunk["device"].astype(str), chunk["phase"].astype(str)]).size().items():
            skipped[key] = skipped.get(key, 0) + int(n)
        sel = has
        if device is not None:
            if len(others) < 100:  # named in the error when the device has no row (a few, cut short)
                others.update(d[:130] for d in chunk.loc[has, "device"].astype(str).unique()[:100])
            sel &= chunk["device"].astype(str) == device
        part = chunk[sel]
        n_kept += len(part)
        if n_kept > limit:
            who = device if device is not None else "the table's devices"
            raise PerfseerError(f"over {limit:,} calibration rows of {who} with a {metric} value: at most {limit:,} "
                                f"(stopped reading {Path(path).name} at row {read:,})",
                                "calibrate on a sample of the models (K = 5-50 models is the intended size)"
                                + ("; or pass --device" if device is None else ""))
        kept.append(part)
    if device is not None and not n_kept and with_metric:
        raise PerfseerError(f"no {metric} measurement of device {device!r}",
                            f"the table has: {', '.join(sorted(others)) or 'none'}")
    table = pd.concat(kept, ignore_index=True) if kept else last
    return _rows(table, device, phase, metric, skipped=skipped,
                 measured=[c for c in METRIC_COLUMNS if c in measured])


def _rows(table, device, phase, metric, skipped: dict | None = None, measured: list[str] | None = None):
    """The rows of ``table`` to calibrate on (``skipped``, ``measured``: what :func:`read_rows`
    counted of the rows it did not keep; ``None``: counted here from ``table``)."""
    if metric not in table.columns:
        raise PerfseerError(f"the measurements have no {metric} column", "measure it, or pass --metric")
    rows = table[table[metric].notna()]
    if rows.empty:
        from perfseer.data.table import METRIC_COLUMNS  # deferred: loads pandas, pyarrow

        if measured is None:
            measured = [c for c in METRIC_COLUMNS if c in table.columns and table[c].notna().any()]
        raise PerfseerError(f"no row of the measurements has a value of {metric}",
                            f"pass --metric, one of {', '.join(measured)}" if measured
                            else f"measure {metric} (perfseer collect) and calibrate on that table")
    devices = sorted(rows["device"].astype(str).unique())
    for d in devices:  # a device name becomes part of the card's file name
        check_device_name(d)
    if device is None:
        if len(devices) != 1:
            raise PerfseerError(f"the measurements hold {len(devices)} devices ({', '.join(devices) or 'none'} with "
                                f"{metric})", "pass --device, one of them")
        device = devices[0]
    elif device not in devices:
        raise PerfseerError(f"no {metric} measurement of device {device!r}",
                            f"the table has: {', '.join(devices) or 'none'}")
    rows = rows[rows["device"].astype(str) == device]
    phases = sorted(rows["phase"].astype(str).unique())
    if phase is None:
        if len(phases) != 1:
            raise PerfseerError(f"{device} has rows of phases {', '.join(phases)}", "pass --phase")
        phase = phases[0]
    if skipped is None:
        skipped = int(((table["device"].astype(str) == device) & (table["phase"].astype(str) == phase)
                       & table[metric].isna()).sum())
    else:
        skipped = skipped.get((device, phase), 0)
    if skipped:
        print(f"note: {skipped} row{'s' if skipped > 1 else ''} of {device} ({phase}) without a {metric} value "
              "skipped", file=sys.stderr)
    rows = rows[rows["phase"].astype(str) == phase]
    if rows.empty:
        raise PerfseerError(f"no {phase} row of {device}", f"phases measured: {', '.join(phases)}")
    if len(rows) > MAX_CALIBRATION_ROWS:
        raise PerfseerError(f"{len(rows):,} calibration rows of {device} ({phase}): at most {MAX_CALIBRATION_ROWS:,}",
                            "calibrate on a sample of the models (K = 5-50 models is the intended size)")
    check_measured(rows[metric].to_numpy(dtype=float), metric, device)
    return rows.reset_index(drop=True), device, phase


def graphs_of(rows, base_dir=None, weight_work: bool | None = None) -> list:
    """Each row's PyG graph: every ``(model, input_shape)`` extracted once, re-bound per batch size,
    the way the source predictor's training graphs were (``weight_work``, its
    :attr:`~perfseer.runtime.predictor.Predictor.weight_work`; ``None``: the environment's).

    Raises:
        PerfseerError: a model that cannot be extracted, named with its error.
    """

    from perfseer.data.dataset import parse_shape  # deferred: loads onnx, pandas
    from perfseer.features.extract import extract  # deferred: loads onnx

    cache, live, out = {}, {}, []
    for _, r in rows.iterrows():
        key = (str(r["model"]), str(r["input_shape"]))
        if key not in cache:
            ref = key[0]
            if ref.endswith(".onnx") and base_dir is not None and not os.path.isabs(ref) and (base_dir / ref).exists():
                ref = str(base_dir / ref)
            try:
                cache[key] = extract(ref, batch=1, input_shape=parse_shape(key[1]), weight_work=weight_work)
            except Exception as e:  # noqa: BLE001 - named in the error, with its cause
                raise PerfseerError(f"calibration model {key[0]} ({key[1]}) could not be extracted "
                                    f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})",
                                    "fix the reference (perfseer graph MODEL shows the problem) or drop its rows") from e
        pg, b = cache[key], int(r["batch_size"])
        data = (pg if b == pg.batch_size else pg.with_batch(b)).to_pyg()
        if key not in live:  # liveness does not depend on the batch: once per model
            live[key] = attach_liveness([data], pg)[0].live
        data.live = live[key]
        out.append(data)
    return out


def _meta_head(source, data, device, phase, metric):
    import torch  # deferred: heavy, loaded on first use

    from perfseer.data.dataset import load_dataset, resolve_dataset  # deferred: loads onnx, pandas
    from perfseer.fit import calibrate as C  # deferred: loads torch, onnx

    ds = load_dataset(resolve_dataset(data))
    L = ds.labels
    rows = L[(L["phase"].astype(str) == phase) & L[metric].notna() & (L[metric] > 0)
             & (L["device"].astype(str) != device)]
    tasks, cache = [], {}
    for dev, part in rows.groupby(rows["device"].astype(str)):
        gi = part["graph"].to_numpy()
        need = [int(g) for g in np.unique(gi) if int(g) not in cache]
        emb = C.embed(source.net, [ds.graphs[g] for g in need]) if need else None
        cache.update({g: emb[i] for i, g in enumerate(need)})
        tasks.append((torch.stack([cache[int(g)] for g in gi]), np.log(part[metric].to_numpy(dtype=float))))
    if not tasks:
        raise PerfseerError(f"{data} has no {phase} {metric} rows of devices other than {device}",
                            "pass a dataset of source devices")
    _, heads = C._parts(source.net)
    return C.meta_init(heads[0], tasks)


def run_calibrate(args: argparse.Namespace) -> int:
    from perfseer.fit.calibrate import CalibrationConfig, calibrate, calibrated_predictor  # deferred: loads torch, onnx

    # what becomes a file is checked before any long work: the card's name and the output folder
    if args.name is not None:
        check_name(args.name)
    if args.device is not None:
        check_device_name(args.device, "--device")
    check_out_dir(args.out)
    source = load_predictor(args.predictor)
    rows, device, phase = read_rows(args.measurements, args.device, args.phase, args.metric)
    name = check_name(args.name or f"{slug(device, phase)}.calibrated", "the card name")
    src_phases = {t.phase for t in source.targets if t.metric == args.metric}
    if phase not in src_phases:
        raise PerfseerError(f"the measurements are {phase} rows but predictor {source.name} predicts "
                            f"{args.metric} in phase {', '.join(sorted(src_phases)) or 'none'}",
                            "calibrate a predictor of the same phase (perfseer predictors lists them)")
    if args.method == "meta" and not args.meta_data:
        raise PerfseerError("--method meta needs --meta-data", "pass a dataset of source devices, e.g. --meta-data timm")
    config = CalibrationConfig(method=args.method, coverage=args.coverage, seed=args.seed, variant=args.variant,
                               live_features=tuple(f for f in args.live_features.split(",") if f),
                               interval=args.interval, selection=args.selection)
    graphs = graphs_of(rows, Path(args.measurements).resolve().parent, weight_work=source.weight_work)
    meta = _meta_head(source, args.meta_data, device, phase, args.metric) if args.method == "meta" else None
    cal = calibrate(source, graphs, rows[args.metric].to_numpy(dtype=float), rows["model"].astype(str).tolist(),
                    metric=args.metric, config=config, meta_head=meta, device=device)
    keep = [c for c in ("model", "input_shape", "batch_size", "phase", "device", args.metric) if c in rows.columns]
    records = json.loads(rows[keep].to_json(orient="records"))
    target = Target(args.metric, device, phase)
    pred = calibrated_predictor(source, args.predictor, cal, target, records, config, name=name)
    path = pred.save(args.out)
    c = pred.card["calibration"]
    if args.json:
        print(json.dumps({"card": str(path), **{k: c[k] for k in ("method", "source", "interval", "domain")}}, indent=1))
    else:
        iv = c["interval"]
        loo = pred.card["scores"]["calibration_leave_one_model_out"][target.key]
        print(f"{path}: {target.key} from {source.name} by {cal.method}, {len(records)} rows of {iv['models']} models; "
              f"leave-one-model-out MAPE {loo['mape']:.2f} %; {int(iv['level'] * 100)} % interval x/÷ {iv['factor']:.3f} "
              f"({iv['basis']}, {iv.get('selection', '')} selection); variant {cal.extra.get('variant', '-')}"
              + (f" of {' and '.join(cal.extra['blend_of'])}" if cal.extra.get("blend_of") else "")
              + (f" ({cal.extra['variant_rule']})" if cal.extra.get("variant_rule") else ""))
    for w in c.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    if iv["models"] < FEW_MODELS:
        print(f"warning: only {iv['models']} calibration models: below {FEW_MODELS} the interval is the Student-t "
              f"bound of a few residuals (x/÷ {iv['factor']:.3g} here) and the correction is barely tested; measure "
              "the 20-model calibration set (datasets/calibration/calibration-set-20.txt)", file=sys.stderr)
    return 0
