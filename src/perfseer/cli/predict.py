"""``perfseer predict`` and ``perfseer predictors``: a model's predicted metrics; the predictors
available, with what they cover and how well they scored."""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from pathlib import Path

from perfseer.cli.footnotes import footnotes
from perfseer.cli.several import add_arguments as add_parallel_arguments
from perfseer.cli.several import parallel_kwargs
from perfseer.cli.train import _ints
from perfseer.errors import MissingDependencyError, PerfseerError
from perfseer.runtime.answer import PRECISIONS


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict", help="predict a model's latency (and other metrics) with a trained predictor",
        description="Extract MODEL's PerfGraph once, re-bind it to each batch size and predict every target of "
                    "the predictor (or those of --device/--phase).  With --device and no --predictor: a bundled "
                    "measured predictor of that device if there is one, else (AMP inference) the transfer from the "
                    "measured GPUs via specs, else the spec model (any GPU of perfseer devices, from its spec "
                    "sheet); each row says its basis.  A measured predictor answers only for models inside its "
                    "model space (else the next basis answers, naming the one it fell back from); a value that hit "
                    "a sanity bound is shown refused, with the reason.")
    p.add_argument("model", metavar="MODEL", help="an .onnx file or a reference (timm:NAME, nb201:..., example:NAME...)")
    p.add_argument("--predictor", default=None, metavar="NAME|PATH", help="see perfseer predictors")
    p.add_argument("--batch", type=_ints, default=[1], metavar="B[,B...]", help="batch sizes (default 1)")
    p.add_argument("--input-shape", default=None, metavar="CxHxW", help="one sample's shape")
    p.add_argument("--dim", action="append", default=None, metavar="NAME=V",
                   help="value of a symbolic input dimension (repeatable)")
    p.add_argument("--seq-len", type=int, default=None, metavar="N",
                   help="tokens per sample: for hf: models (default 128), or the symbolic sequence dimensions of an "
                        "ONNX model")
    p.add_argument("--device", action="append", default=None, metavar="DEVICE",
                   help="repeatable, shown side by side; with --predictor: only these devices' targets; alone: any "
                        "device of perfseer devices, or the device of a card in a folder of $PERFSEER_PREDICTORS "
                        "(e.g. perfseer calibrate --out DIR)")
    p.add_argument("--phase", default=None, choices=("infer", "train"), help="only this phase's targets")
    p.add_argument("--precision", default=None, metavar="NAME",
                   help=f"one of {', '.join(PRECISIONS)} (aliases: amp = amp-fp16, amp_bf16 = amp-bf16); default: a "
                        "measured predictor's own, else fp32; several devices are compared at one precision, the "
                        "first measured predictor's when not given; a basis that cannot answer at it says so")
    p.add_argument("--force", action="store_true",
                   help="let a measured predictor answer for a model outside its model space (by default it "
                        "refuses, and with --device alone the routing falls back to the next basis)")
    p.add_argument("--basis", default="auto", choices=("auto", "spec", "transfer", "measured"),
                   help="with --device alone: auto (measured where available, else for AMP inference the transfer "
                        "from the measured GPUs via specs, else the spec model), or force one")
    p.add_argument("--no-cache", dest="cache", action="store_false",
                   help="export a timm:, torchvision:, hf:, ofa: or space: model again instead of reading its earlier "
                        "export from the graph cache ($PERFSEER_CACHE/skeletons or ~/.cache/perfseer/skeletons, at most "
                        "$PERFSEER_GRAPH_CACHE_MB MB, default 1024; PERFSEER_GRAPH_CACHE=0 turns it off).  A second "
                        "call is answered by the warm process the first one left (PERFSEER_WARM=0: never)")
    p.add_argument("--explain", action="store_true",
                   help="print every reason and flag in full below the table (default: one short note per kind)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON on stdout")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the JSON to FILE (atomically)")
    p.add_argument("--plot", default=None, metavar="FILE.png|FILE.svg",
                   help="plot latency and throughput against batch size, one line per device and phase "
                        "(pip install 'perfseer[plot]')")
    p.add_argument("--energy", action="store_true",
                   help="also predict GPU power (W), energy per step and per sample (J) and utilisation (%%) with "
                        "the power model, from the GPU's spec sheet and the step's activity (docs/guide/energy.md)")
    p.add_argument("--power-limit", type=float, default=None, metavar="W",
                   help="a GPU power limit below the TDP (as nvidia-smi -pl sets it; implies --energy): the step "
                        "slows by the power model's clock rule (physics only, not measured)")
    p.add_argument("--memory", action="store_true",
                   help="also simulate peak GPU memory (perfseer memory; training with AdamW) for GPU devices")
    add_parallel_arguments(p)
    p.set_defaults(func=run_predict)

    ls = sub.add_parser("predictors", help="list the bundled predictors with their coverage and test scores",
                        description="List predictors (bundled, or the cards in --dir).")
    ls.add_argument("--dir", default=None, help="a folder of predictor cards (default: the bundled ones, then those in the folders of "
                         "$PERFSEER_PREDICTORS)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_predictors)


def run_predict(args: argparse.Namespace) -> int:
    """``perfseer predict``: :func:`perfseer.predict` (routing included), then the table or JSON."""
    from perfseer.cli.graph import check_seq_len, parse_dims, parse_shape  # deferred: loads onnx
    from perfseer.cli.warm import predict_rows  # deferred: keeps --help fast

    check_seq_len(args.seq_len)
    devices = args.device or []
    if args.plot and not args.plot.lower().endswith((".png", ".svg", ".pdf")):
        raise PerfseerError(f"--plot {args.plot}: the file name must end in .png, .svg or .pdf", "e.g. --plot sweep.png")
    dims = parse_dims(args.dim) or None
    shape = parse_shape(args.input_shape) if args.input_shape else None
    # answered by the warm process of an earlier call where one is running (perfseer.cli.warm)
    rows, warned = predict_rows(dict(model=args.model, device=devices, predictor=args.predictor, batch=args.batch,
                                     phase=args.phase, precision=args.precision, basis=args.basis,
                                     input_shape=shape, dims=dims, seq_len=args.seq_len, force=args.force,
                                     energy=getattr(args, "energy", False),
                                     power_limit_w=getattr(args, "power_limit", None), cache=args.cache,
                                     **parallel_kwargs(args)))
    label = args.predictor if args.predictor is not None else ", ".join(devices)
    if args.predictor is not None:
        label = next((r["predictor"] for r in rows if r.get("predictor")), label)
    for r in rows:
        r.pop("predictor", None)
    several = bool(parallel_kwargs(args))
    if getattr(args, "memory", False) and several:
        from perfseer.memory.parallel import add_memory_per_gpu  # deferred: loads torch

        add_memory_per_gpu(args.model, rows, seq_len=args.seq_len, input_shape=shape, precision=args.precision,
                           **parallel_kwargs(args))
    elif getattr(args, "memory", False):
        from perfseer.memory.api import memory_rows  # deferred: loads torch

        extra, notes = memory_rows(args.model, rows, input_shape=shape)
        rows = rows + extra
        for n in notes:
            print(f"warning: {n}", file=sys.stderr)
    from perfseer.cli.bounds import dumps  # deferred: loads onnx

    doc = {"predictor": label, "predictions": rows}
    if args.out:
        from perfseer.cli.graph import _write_atomic  # deferred: loads onnx

        _write_atomic(Path(args.out), dumps(doc, indent=1) + "\n")
    if args.plot:
        plot_sweep(rows, args.plot, args.model)
    if args.json:
        print(dumps(doc, indent=1))
    elif several:
        from perfseer.cli.several import print_rows

        print_rows(rows, f"{args.model} on {label}")
    else:
        _print_rows(rows, f"{args.model} on {label}" if args.predictor is None else f"{args.model} with predictor {label}",
                    explain=getattr(args, "explain", False))
        if args.plot:
            print(f"plot: {args.plot}")
    for w in warned:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _print_rows(rows: list[dict], title: str, explain: bool = False) -> None:
    # a column whose value is the same on every row goes to the title (the table fits 80 columns)
    from rich import box  # deferred: keeps --help fast
    from rich.console import Console  # deferred: keeps --help fast
    from rich.table import Table  # deferred: keeps --help fast

    same = {k: rows[0].get(k) for k in ("device", "phase", "metric", "precision")
            if rows and len({r.get(k) for r in rows}) == 1 and rows[0].get(k) is not None}
    if same:
        title += " (" + ", ".join(str(v) for v in same.values()) + ")"
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    cols = [c for c in ("batch", "device", "phase", "precision", "metric", "predicted", "90 % interval", "per s",
                        "domain") if c not in same]
    for c in cols:
        t.add_column(c, justify="right" if c in ("batch", "predicted", "90 % interval", "per s") else "left")
    ordered = sorted(rows, key=lambda r: (r["metric"], r["phase"], r["batch_size"], r["device"]))
    row_notes = []
    for r in ordered:
        reasons, flags = r.get("domain_reasons", []), r.get("flags", [])
        if r.get("value") is None:  # a refusal: its reason is its one note
            reasons, flags = [r.get("reason") or "no answer"], []
        elif r.get("fallback_from"):
            reasons = [f"fell back from {r['fallback_from'].get('basis')}: {r['fallback_from'].get('reason')}"] + reasons
        row_notes.append(list(reasons) + list(flags))
    if explain:  # each reason or flag once, numbered, in full
        long: dict[str, int] = {}
        all_marks = [[long.setdefault(n, len(long) + 1) for n in ns] for ns in row_notes]
        texts = list(long)
    else:  # one short note per kind of reason
        all_marks, texts = footnotes(row_notes)
    for r, marks in zip(ordered, all_marks):
        flags = r.get("flags", []) if r.get("value") is not None else []
        iv = r.get("interval")
        dom = {True: "in", False: "OUT", None: "-"}[r.get("in_domain")]
        tput = r.get("throughput_per_s")
        value = "refused" if r.get("value") is None else f"{r['value']:.4g} {r['unit']}" + ("*" if flags else "")
        cells = {"batch": str(r["batch_size"]), "device": r["device"], "phase": r["phase"],
                 "precision": str(r.get("precision") or "-"), "metric": r["metric"],
                 "predicted": value,
                 "90 % interval": f"{iv[0]:.3g}-{iv[1]:.3g}" if iv else "-", "per s": f"{tput:.4g}" if tput else "",
                 "domain": dom + (f" [{','.join(map(str, marks))}]" if marks else "")}
        t.add_row(*(cells[c] for c in cols))
    Console().print(t)
    if any(r.get("energy_j") is not None for r in rows):
        from perfseer.cli.energy import print_energy  # deferred: only with --energy

        print_energy(ordered)
    for k, n in enumerate(texts, 1):
        print(f"  [{k}] {n}")
    if texts and not explain:
        print("(--explain: the notes in full)")
    if any(r.get("flags") for r in rows):
        print("*: the prediction carries flags (among the numbered notes)")
    for b in dict.fromkeys(r.get("basis", "") for r in rows if r.get("basis")):
        print(f"basis: {b}")
    if any(r.get("throughput_per_s") for r in rows):
        print("per s: samples per second (batch / latency)")


def plot_sweep(rows: list[dict], path: str, title: str) -> None:
    """Latency and throughput against batch size, one line (and 90 % band) per device and phase."""
    try:
        import matplotlib  # deferred: an optional extra

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # deferred: an optional extra
    except ImportError as e:
        raise MissingDependencyError("matplotlib", "plot", "perfseer predict --plot") from e

    series: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("metric") == "latency_ms" and r.get("value") is not None:
            series.setdefault(f"{r['device']} · {r['phase']}", []).append(r)
    if not series:
        raise PerfseerError("nothing to plot: no latency predictions", "drop --plot, or predict latency")
    fig, (ax_l, ax_t) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, rs in series.items():
        rs = sorted(rs, key=lambda r: r["batch_size"])
        b = [r["batch_size"] for r in rs]
        lat = [r["value"] for r in rs]
        line, = ax_l.plot(b, lat, marker="o", label=name)
        ax_t.plot(b, [x / y * 1e3 for x, y in zip(b, lat)], marker="o", color=line.get_color(), label=name)
        if all(r.get("interval") for r in rs):
            lo = [r["interval"][0] for r in rs]
            hi = [r["interval"][1] for r in rs]
            ax_l.fill_between(b, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
            ax_t.fill_between(b, [x / h * 1e3 for x, h in zip(b, hi)], [x / lo_ * 1e3 for x, lo_ in zip(b, lo)],
                              color=line.get_color(), alpha=0.15, linewidth=0)
    from matplotlib.ticker import FuncFormatter, NullFormatter  # deferred: an optional extra

    for ax, label in ((ax_l, "latency per step (ms)"), (ax_t, "throughput (samples / s)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 32, not 2^5
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_l.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        raise PerfseerError(f"cannot write {path}: {e.strerror}", "choose a writable path for --plot") from e
    finally:
        plt.close(fig)


def run_predictors(args: argparse.Namespace) -> int:
    from rich.console import Console  # deferred: keeps --help fast

    from perfseer.runtime.predictor import list_predictors  # deferred: keeps --help fast

    items = list_predictors(args.dir)
    if args.json:
        from perfseer.cli.bounds import dumps  # deferred: loads onnx

        print(dumps(items, indent=1))
        return 0

    console = Console(highlight=False)
    if not items:
        console.print("no predictors found")
        return 0
    console.print("[bold]predictors[/bold] (test: held-out architectures, † the predictor this one replaced; "
                  "k-fold: cross-validation by architecture; 90 %: the interval's factor)\n")
    for it in items:
        console.print(_predictor_block(it), soft_wrap=False)
    console.print("details: perfseer predictors --json; how they were trained: docs/concepts/predictors-and-cards.md")
    return 0


def _predictor_block(it: dict) -> str:
    """One predictor in a few lines that fit 80 columns: what it covers, on which data, how well."""
    from rich.markup import escape  # deferred: keeps --help fast

    tr, d, sc = it.get("training") or {}, it.get("domain") or {}, it.get("scores") or {}
    rows = (tr.get("rows") or {}).get("train")
    lines = [f"[bold]{escape(it['name'])}[/bold]  {escape(str(it['model']))}"]
    batches = d.get("batch_sizes") or tr.get("batch_sizes")
    data = [f"{rows:,} graphs" + (f" of {tr['dataset']}" if tr.get("dataset") else "")] if isinstance(rows, int) else []
    cal_rows = (tr.get("rows") or {}).get("calibration")
    if not data and isinstance(cal_rows, int):  # a calibrated card: its rows and its source
        data = [f"{cal_rows:,} calibration rows" + (f", from {tr['calibrated_from']}" if tr.get("calibrated_from")
                                                      else "")]
    if batches:
        data.append(f"batch {batches[0]}" + (f"-{batches[1]}" if batches[1] != batches[0] else ""))
    inputs, shape = d.get("inputs") or {}, []
    if inputs.get("values_per_sample"):
        lo, hi = inputs["values_per_sample"]
        shape.append(f"{lo:,}-{hi:,} values per sample" if lo != hi else f"{lo:,} values per sample")
    if isinstance(d.get("op_types"), (int, list)):
        n = d["op_types"] if isinstance(d["op_types"], int) else len(d["op_types"])
        shape.append(f"{n} operator types")
    lines.append("  covers  " + escape(", ".join(it.get("devices") or [])) + f" ({', '.join(it.get('phases') or [])})")
    lines.append("  data    " + escape("; ".join(data) if data else "not recorded") + ("" if d else " (no domain check)"))
    if shape:
        lines.append("  inputs  " + "; ".join(shape))
    if d.get("step"):  # a training card measured at one batch per model (perfseer.trust.step)
        lines.append(f"  steps   batch {d['step'][0]:.2g}-{d['step'][1]:.2g}x the one each model was measured at")
    test, prev, kf = sc.get("test") or {}, sc.get("previous_test") or {}, sc.get("kfold") or {}
    lomo = sc.get("calibration_leave_one_model_out") or {}
    intervals = it.get("intervals") or {}
    for key in it.get("targets") or []:
        metric, _, rest = key.partition("@")
        m, mark = (test.get(key), "") if key in test else (prev.get(key), "†")
        parts = [f"test {m['mape']:.2f} %{mark} (Spearman {m['spearman']:.3f})" if m
                 else f"leave-one-model-out {lomo[key]['mape']:.2f} % (Spearman {lomo[key]['spearman']:.3f})"
                 if lomo.get(key) else "no test score"]
        folds = (tr.get("kfold") or {}).get("folds") or []
        if kf.get(key):
            parts.append(f"k-fold\u00a0{kf[key]['mape']:.2f}\u00a0%")
        elif folds:  # an unfinished cross-validation: the folds done so far, weighted by their rows
            held = [(f["rows_held"], f["mape"][key]) for f in folds if key in f.get("mape", {})]
            n = sum(h for h, _ in held)
            if n:
                parts.append(f"k-fold {sum(h * v for h, v in held) / n:.2f} % ({len(held)}/{tr['kfold']['k']})")
        q = intervals.get(key)
        if q is not None:
            parts.append(f"90\u00a0%\u00a0×/÷{math.exp(q):.2f}")  # kept on one line by the wrap below
        device = rest.rpartition(":")[0]
        who = metric if len(it.get("devices") or []) < 2 else f"{metric} {device}"

        body = textwrap.wrap("; ".join(parts), 78 - 19, break_on_hyphens=False) or [""]
        if len(who) > 18:  # a long target name on a line of its own, its scores under it
            lines.append(f"  {escape(who)}")
            lines += [" " * 21 + more for more in body]
        else:
            lines.append(f"  {escape(who):<19}" + body[0])
            lines += [" " * 21 + more for more in body[1:]]
    return "\n".join(lines) + "\n"
