"""``perfseer train`` and ``perfseer evaluate``: fit a predictor on a graph dataset; score one on
a measurement table."""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path


from perfseer.errors import PerfseerError


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    from perfseer.cli.bounds import MAX_BATCH  # deferred: loads onnx

    if not values or any(v < 1 or v > MAX_BATCH for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers from 1 to {MAX_BATCH}, got {text!r}")
    return values


def positive(kind):
    """An argparse type: ``kind(text)``, refused unless > 0 (benchmarks share it)."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            v = 0
        if v <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
        return v
    return parse


def add_parser(sub) -> None:
    from perfseer.cli.bounds import MAX_GRAPHS_PER_STEP, MAX_HIDDEN, bounded_int  # deferred: loads onnx
    from perfseer.fit.trainer import TrainConfig  # deferred: loads torch

    d = TrainConfig()
    p = sub.add_parser(
        "train", help="train a predictor on a graph dataset",
        description="Train a predictor (SeerNet or a baseline) on a graph dataset with the paper's recipe "
                    "(2:1:1 split by architecture, Adam, learning rate halved on plateaus, early stopping) and "
                    "write OUT/NAME.json (its card: config, scaling, targets, data, split, scores) and, for a "
                    "network, OUT/NAME.safetensors.")
    p.add_argument("--data", required=True, metavar="DATASET",
                   help="a dataset folder (perfseer data build) or a committed dataset name (timm, nb201, fbnet, cpu)")
    p.add_argument("--model", default="seernet", metavar="NAME",
                   help="seernet (default), seernet-multi, pmgns, gcn, gat, gin, mlp-node, additive, gbm, flops")
    p.add_argument("--device", action="append", metavar="DEVICE",
                   help="device column value; repeat for one target per device (one metric)")
    p.add_argument("--phase", choices=("infer", "train"), default=None, help="default: the only phase present")
    p.add_argument("--metric", action="append", metavar="METRIC",
                   help="latency_ms (default), memory_mb, util_pct, energy_j; repeat for several")
    p.add_argument("--split", choices=("split", "family_split"), default="split",
                   help="split by architecture (default) or by model family (timm)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the predictor files")
    p.add_argument("--name", default=None, help="predictor name (default: from the device and phase)")
    p.add_argument("--epochs", type=positive(int), default=d.max_epochs, help=f"at most (default {d.max_epochs})")
    p.add_argument("--time-limit", type=positive(float), default=None, metavar="S",
                   help="stop after the epoch that ends past S seconds")
    p.add_argument("--hidden", type=bounded_int(1, MAX_HIDDEN), default=None,
                   help=f"hidden width of the network (at most {MAX_HIDDEN})")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a model config field (JSON value), repeatable: e.g. --set head_globals=true --set dropout=0.1")
    p.add_argument("--batch-size", type=bounded_int(1, MAX_GRAPHS_PER_STEP), default=d.batch_size,
                   help=f"graphs per step (default: about 32 steps per epoch, between 16 and 128; at most "
                        f"{MAX_GRAPHS_PER_STEP})")
    p.add_argument("--lr", type=positive(float), default=d.lr, help=f"default {d.lr}")
    p.add_argument("--max-train-models", type=positive(int), default=None, metavar="N",
                   help="train on at most N of the training split's models (hash-chosen; cheaper)")
    p.add_argument("--pretrained", default=None, metavar="CARD",
                   help="start SeerNet's trunk from a pre-trained graph auto-encoder card (docs/guide/calibrate.md)")
    p.add_argument("--fit", choices=("train", "train+test"), default="train",
                   help="splits the network is fitted on: train (default; test is scored) or train+test (all "
                        "measured data but validation, which early stopping reads: a predictor to ship)")
    p.add_argument("--kfold", type=positive(int), default=None, metavar="K",
                   help="also score the recipe by K-fold cross-validation by architecture over the fitted rows "
                        "(K more trainings; each stage is saved in OUT/.stages/NAME, so --resume continues)")
    p.add_argument("--stage", action="append", default=None, metavar="NAME",
                   help="train only this stage of a --fit train+test / --kfold run (final, fold0, fold1, ...; "
                        "repeatable) into OUT/.stages: run stages in parallel processes, then the same command "
                        "without --stage and with --resume builds the card from them")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=positive(int), default=None, help="torch CPU threads while training")
    p.add_argument("--no-pcgrad", action="store_true", help="SeerNet-Multi: plain summed losses")
    p.add_argument("--cuda", action="store_true", help="train on CUDA")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run from OUT/.checkpoint (written each epoch, removed at the end)")
    p.add_argument("--json", action="store_true", help="print the card as JSON")
    p.set_defaults(func=run_train)

    e = sub.add_parser(
        "evaluate", help="score a predictor on measurements",
        description="Predict every row of a measurement table (or a built dataset folder) that the predictor "
                    "covers and report MAPE, RMSE, the share within 5/10/20 % and rank correlations per "
                    "target. Rows of devices or phases it does not cover are counted, never guessed.")
    e.add_argument("--predictor", required=True, metavar="NAME|PATH")
    e.add_argument("--measurements", required=True, metavar="TABLE|DATASET")
    e.add_argument("--split", default=None, choices=("train", "val", "test"),
                   help="with a dataset folder: score only this split's rows")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=run_evaluate)


def run_train(args: argparse.Namespace) -> int:
    from perfseer.cli.bounds import check_name, check_out_dir  # deferred: loads onnx
    from perfseer.fit.recipe import train_predictor  # deferred: loads torch, onnx
    from perfseer.fit.trainer import TrainConfig  # deferred: loads torch

    if args.name is not None:
        check_name(args.name)  # before training: the name becomes a file in --out
    out = Path(args.out)
    check_out_dir(out)  # a file, a device or /proc: refused before training, not after
    cfg = TrainConfig(max_epochs=args.epochs, time_limit_s=args.time_limit, batch_size=args.batch_size, lr=args.lr,
                      seed=args.seed, num_threads=args.threads, pcgrad=not args.no_pcgrad,
                      device="cuda" if args.cuda else "cpu", progress=sys.stderr.isatty(),
                      checkpoint_dir=str(out / ".checkpoint"), resume=args.resume)
    from perfseer.fit.methods import ALIASES  # deferred: loads torch, onnx
    from perfseer.models.registry import parse_overrides  # deferred: loads torch, pandas

    model_config = (({"hidden_dim": args.hidden} if args.hidden else {})
                    | parse_overrides(ALIASES.get(args.model, args.model), args.set))
    start = time.perf_counter()
    staged = args.kfold is not None or args.fit != "train"
    stage_dir = out / ".stages" / (args.name or "run") if staged else None
    predictor, fitted = train_predictor(args.data, args.model, devices=args.device, phase=args.phase,
                                        metrics=args.metric or "latency_ms", split_column=args.split, name=args.name,
                                        model_config=model_config or None, train_config=cfg,
                                        max_train_models=args.max_train_models, pretrained=args.pretrained,
                                        fit=args.fit.split("+"), kfold=args.kfold, stage_dir=stage_dir,
                                        on_stage=lambda p: p.save(out), only_stages=args.stage)
    if args.stage:
        print(f"trained stage(s) {', '.join(dict.fromkeys(args.stage))} into {stage_dir} in "
              f"{time.perf_counter() - start:.0f} s; when every stage is done, run the same command without "
              "--stage and with --resume to build the card")
        return 0
    card = predictor.save(out)

    shutil.rmtree(out / ".checkpoint", ignore_errors=True)  # the predictor is saved: nothing to resume
    if args.json:
        from perfseer.cli.bounds import dumps  # deferred: loads onnx

        print(dumps(predictor.card, indent=1))
        return 0
    _print_scores(predictor.card, f"{predictor.name} ({args.model}) in {time.perf_counter() - start:.0f} s")
    print(f"wrote {card}")
    return 0


def _print_scores(card: dict, title: str) -> None:
    from rich import box  # deferred: keeps --help fast
    from rich.console import Console  # deferred: keeps --help fast
    from rich.table import Table  # deferred: keeps --help fast

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for c in ("split", "target", "n", "MAPE %", "RMSE", "≤10 %", "Spearman", "Kendall"):
        t.add_column(c, justify="left" if c in ("split", "target") else "right")
    for split, per in card.get("scores", {}).items():
        for target, m in per.items():
            t.add_row(split, target, f"{m['n']:,}", f"{m['mape']:.2f}", f"{m['rmse']:.4g}", f"{m['acc10']:.1f}",
                      f"{m['spearman']:.3f}", f"{m['kendall']:.3f}")
    Console().print(t)


def run_evaluate(args: argparse.Namespace) -> int:
    from perfseer.runtime.predictor import load_predictor  # deferred: keeps --help fast
    from rich.console import Console  # deferred: keeps --help fast

    from perfseer.fit.evaluate import evaluate_predictor  # deferred: loads onnx, pandas

    predictor = load_predictor(args.predictor)
    report = evaluate_predictor(predictor, args.measurements, split=args.split)
    if not report["rows_scored"]:
        why = [f"{n} rows of devices/phases the predictor does not cover" for n in [report["rows_not_covered"]] if n]
        why += [f"{len(report['failures'])} models that could not be built"] if report["failures"] else []
        raise PerfseerError(f"nothing in {args.measurements} could be scored by {predictor.name}"
                            + (f" ({'; '.join(why)})" if why else " (no rows)"),
                            "give measurements of a device and phase the predictor covers (perfseer predictors)")
    if args.json:
        from perfseer.cli.bounds import dumps  # deferred: loads onnx

        print(dumps(report, indent=1))
        return 0

    _print_scores({"scores": {"measured": report["scores"]}}, f"{predictor.name} on {args.measurements}")
    c = Console()
    for key, m in report["scores"].items():
        c.print(f"{key}: 90 % intervals hold {m['coverage90']:.1f} % of the measurements; " if "coverage90" in m
                else f"{key}: no intervals (uncalibrated card); ", end="")
        c.print(f"{m['out_of_domain_pct']:.1f} % of rows out of the predictor's domain; "
                f"{m['clipped_pct']:.1f} % clipped to physical bounds")
    c.print(f"rows scored {report['rows_scored']:,}; not covered (device/phase) {report['rows_not_covered']:,}"
            + (f" ({', '.join(f'{k}: {v}' for k, v in report['not_covered'].items())})" if report["not_covered"] else "")
            + f"; models that could not be built {len(report['failures'])}")
    for f in report["failures"][:10]:
        c.print(f"  {f['model']}: {f['error']}")
    if report["unseen_ops"]:
        c.print(f"[yellow]operator types never seen in training: {', '.join(report['unseen_ops'])}[/yellow]")
    return 0 if report["rows_scored"] else 1
