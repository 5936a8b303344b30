"""``perfseer predict`` and ``perfseer predictors``: a model's predicted metrics; the predictors
available, with what they cover and how well they scored."""

from __future__ import annotations

import argparse
import warnings


def add_parser(sub) -> None:
    from perfseer.cli.train import _ints

    p = sub.add_parser(
        "predict", help="predict a model's latency (and other metrics) with a trained predictor",
        description="Extract MODEL's PerfGraph once, re-bind it to each batch size and predict every target of "
                    "the predictor (or those of --device/--phase).")
    p.add_argument("model", metavar="MODEL", help="an .onnx file or a reference (timm:NAME, nb201:..., example:NAME...)")
    p.add_argument("--predictor", required=True, metavar="NAME|PATH", help="see perfseer predictors")
    p.add_argument("--batch", type=_ints, default=[1], metavar="B[,B...]", help="batch sizes (default 1)")
    p.add_argument("--input-shape", default=None, metavar="CxHxW", help="one sample's shape")
    p.add_argument("--dim", action="append", default=None, metavar="NAME=V",
                   help="value of a symbolic input dimension (repeatable)")
    p.add_argument("--device", default=None, help="only this device's targets")
    p.add_argument("--phase", default=None, choices=("infer", "train"), help="only this phase's targets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run_predict)

    ls = sub.add_parser("predictors", help="list the bundled predictors with their coverage and test scores",
                        description="List predictors (bundled, or the cards in --dir).")
    ls.add_argument("--dir", default=None, help="a folder of predictor cards (default: the bundled ones)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_predictors)


def run_predict(args: argparse.Namespace) -> int:
    from perfseer.predictor import UnseenOperatorWarning, load_predictor

    from perfseer.cli.graph import parse_dims, parse_shape

    predictor = load_predictor(args.predictor)
    dims = parse_dims(args.dim) or None
    shape = parse_shape(args.input_shape) if args.input_shape else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnseenOperatorWarning)
        rows = predictor.predict(args.model, batch=args.batch, input_shape=shape, dims=dims,
                                 device=args.device, phase=args.phase)
    if args.json:
        from perfseer.cli.bounds import dumps

        print(dumps({"predictor": predictor.name, "predictions": rows}, indent=1))
    else:
        from rich import box
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{args.model} with predictor {predictor.name}", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
        for c in ("batch", "device", "phase", "metric", "predicted"):
            t.add_column(c, justify="right" if c in ("batch", "predicted") else "left")
        for r in rows:
            t.add_row(str(r["batch_size"]), r["device"], r["phase"], r["metric"], f"{r['value']:.4g} {r['unit']}")
        Console().print(t)
    for w in caught:
        print(f"warning: {w.message}", file=__import__("sys").stderr)
    return 0


def run_predictors(args: argparse.Namespace) -> int:
    from perfseer.predictor import list_predictors

    items = list_predictors(args.dir)
    if args.json:
        from perfseer.cli.bounds import dumps

        print(dumps(items, indent=1))
        return 0
    from rich import box
    from rich.console import Console
    from rich.table import Table

    t = Table(title="predictors (one row per target; scores on the held-out test split)", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("name", "model", "device", "phase", "metric", "train", "test MAPE %", "Spearman"):
        t.add_column(c, justify="right" if c in ("train", "test MAPE %", "Spearman") else "left")
    for it in items:
        test = it["scores"].get("test", {})
        rows = (it["training"].get("rows") or {}).get("train", "-")
        for i, key in enumerate(it["targets"]):
            metric, _, rest = key.partition("@")
            device, _, phase = rest.rpartition(":")
            m = test.get(key)
            t.add_row(it["name"] if i == 0 else "", it["model"] if i == 0 else "", device, phase, metric,
                      f"{rows:,}" if i == 0 and isinstance(rows, int) else "",
                      f"{m['mape']:.2f}" if m else "-", f"{m['spearman']:.3f}" if m else "-")
    Console().print(t if items else "no predictors found")
    return 0
