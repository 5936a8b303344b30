"""``perfseer predict`` and ``perfseer predictors``: a model's predicted metrics; the predictors
available, with what they cover and how well they scored."""

from __future__ import annotations

import argparse
import math
import warnings


def add_parser(sub) -> None:
    from perfseer.cli.train import _ints

    p = sub.add_parser(
        "predict", help="predict a model's latency (and other metrics) with a trained predictor",
        description="Extract MODEL's PerfGraph once, re-bind it to each batch size and predict every target of "
                    "the predictor (or those of --device/--phase).  With --device and no --predictor: a bundled "
                    "measured predictor of that device if there is one, else the spec model (any GPU of "
                    "perfseer devices, from its spec sheet); each row says its basis.")
    p.add_argument("model", metavar="MODEL", help="an .onnx file or a reference (timm:NAME, nb201:..., example:NAME...)")
    p.add_argument("--predictor", default=None, metavar="NAME|PATH", help="see perfseer predictors")
    p.add_argument("--batch", type=_ints, default=[1], metavar="B[,B...]", help="batch sizes (default 1)")
    p.add_argument("--input-shape", default=None, metavar="CxHxW", help="one sample's shape")
    p.add_argument("--dim", action="append", default=None, metavar="NAME=V",
                   help="value of a symbolic input dimension (repeatable)")
    p.add_argument("--seq-len", type=int, default=None, metavar="N",
                   help="tokens per sample: for hf: models (default 128), or the symbolic sequence dimensions of an "
                        "ONNX model")
    p.add_argument("--device", default=None,
                   help="with --predictor: only this device's targets; alone: any device of perfseer devices")
    p.add_argument("--phase", default=None, choices=("infer", "train"), help="only this phase's targets")
    p.add_argument("--precision", default=None, choices=("fp32", "tf32", "fp16", "bf16"),
                   help="with --device alone: the precision (default: a measured predictor's own, else fp32)")
    p.add_argument("--basis", default="auto", choices=("auto", "spec", "measured"),
                   help="with --device alone: auto (measured where available), or force one")
    p.add_argument("--json", action="store_true")
    p.add_argument("--memory", action="store_true",
                   help="also simulate peak GPU memory (perfseer memory; training with AdamW) for GPU devices")
    p.set_defaults(func=run_predict)

    ls = sub.add_parser("predictors", help="list the bundled predictors with their coverage and test scores",
                        description="List predictors (bundled, or the cards in --dir).")
    ls.add_argument("--dir", default=None, help="a folder of predictor cards (default: the bundled ones)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_predictors)


def run_predict(args: argparse.Namespace) -> int:
    from perfseer.predictor import UnseenOperatorWarning, load_predictor

    from perfseer.cli.graph import check_seq_len, parse_dims, parse_shape

    from perfseer.errors import PerfseerError

    check_seq_len(args.seq_len)
    if args.predictor is None and args.device is None:
        raise PerfseerError("predict needs --predictor NAME or --device DEVICE",
                            "pass --device h100-sxm (perfseer devices lists them) or --predictor NAME")
    dims = parse_dims(args.dim) or None
    shape = parse_shape(args.input_shape) if args.input_shape else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnseenOperatorWarning)
        if args.predictor is None:  # any registered device: measured predictor or spec model
            from perfseer.specmodel.route import predict_on_device

            rows = predict_on_device(args.model, args.device, batch=args.batch, phase=args.phase or "infer",
                                     precision=args.precision, input_shape=shape, dims=dims, prefer=args.basis,
                                     seq_len=args.seq_len)
            label = rows[0]["basis"] if rows else args.device
        else:
            predictor = load_predictor(args.predictor)
            rows = predictor.predict(args.model, batch=args.batch, input_shape=shape, dims=dims,
                                     device=args.device, phase=args.phase, seq_len=args.seq_len)
            label = predictor.name
    if getattr(args, "memory", False):
        from perfseer.memory.api import memory_rows

        extra, notes = memory_rows(args.model, rows, input_shape=shape)
        rows = rows + extra
        for n in notes:
            print(f"warning: {n}", file=__import__("sys").stderr)
    if args.json:
        from perfseer.cli.bounds import dumps

        print(dumps({"predictor": label, "predictions": rows}, indent=1))
    else:
        from rich import box
        from rich.console import Console
        from rich.table import Table

        t = Table(title=f"{args.model} on {args.device}" if args.predictor is None else
                  f"{args.model} with predictor {label}", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for c in ("batch", "device", "phase", "metric", "predicted", "90 % interval", "domain"):
            t.add_column(c, justify="right" if c in ("batch", "predicted", "90 % interval") else "left")
        notes: dict[str, list[int]] = {}  # each reason or flag once, numbered, below the table
        for r in rows:
            reasons, flags = r.get("domain_reasons", []), r.get("flags", [])
            marks = [notes.setdefault(n, [len(notes) + 1])[0] for n in reasons + flags]
            iv = r.get("interval")
            dom = {True: "in", False: "OUT", None: "-"}[r.get("in_domain")]
            t.add_row(str(r["batch_size"]), r["device"], r["phase"], r["metric"],
                      f"{r['value']:.4g} {r['unit']}" + ("*" if flags else ""),
                      f"{iv[0]:.3g}-{iv[1]:.3g}" if iv else "-",
                      dom + (f" [{','.join(map(str, marks))}]" if marks else ""))
        Console().print(t)
        for n, (k,) in notes.items():
            print(f"  [{k}] {n}")
        for b in dict.fromkeys(r.get("basis", "") for r in rows if r.get("basis")):
            print(f"basis: {b}")
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

    t = Table(title="predictors (one row per target; test: the held-out test split, or † the previous predictor's, "
                    "trained without it; k-fold: cross-validation by architecture over the fitted rows)",
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    num = ("fitted", "test MAPE %", "Spearman", "k-fold MAPE %", "90 % interval")
    for c in ("name", "model", "device", "phase", "metric") + num + ("domain",):
        t.add_column(c, justify="right" if c in num else "left")
    for it in items:
        sc = it["scores"]
        test, prev = sc.get("test", {}), sc.get("previous_test", {})
        rows = (it["training"].get("rows") or {}).get("train", "-")
        d = it.get("domain")
        dom = (f"batch {d['batch_sizes'][0]}-{d['batch_sizes'][1]}, {d['op_types']} op types" if d and d["batch_sizes"]
               else "none (uncalibrated)")
        for i, key in enumerate(it["targets"]):
            metric, _, rest = key.partition("@")
            device, _, phase = rest.rpartition(":")
            m, mark = (test.get(key), "") if key in test else (prev.get(key), "†")
            k, q = sc.get("kfold", {}).get(key), it["intervals"].get(key)
            t.add_row(it["name"] if i == 0 else "", it["model"] if i == 0 else "", device, phase, metric,
                      f"{rows:,}" if i == 0 and isinstance(rows, int) else "",
                      f"{m['mape']:.2f}{mark}" if m else "-", f"{m['spearman']:.3f}" if m else "-",
                      f"{k['mape']:.2f}" if k else "-", f"×/÷{math.exp(q):.3f}" if q is not None else "-", dom if i == 0 else "")
    Console().print(t if items else "no predictors found")
    return 0
