"""``perfseer compare``: rank GPUs by a model's step time and throughput (:func:`perfseer.compare`)."""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare", help="rank GPUs by a model's step time and throughput, saying where it does not fit",
        description="Predict one model's step on every registered GPU (or those given with --device), one precision "
                    "for all, and rank them by step time, with throughput, each row's basis and 90 %% interval, and "
                    "whether the step fits in the GPU's memory (simulated peak).")
    p.add_argument("model", help="a model: timm:NAME, torchvision:NAME, hf:NAME, a .onnx file...")
    p.add_argument("--batch", type=int, default=1, help="samples per step (default 1)")
    p.add_argument("--phase", choices=("infer", "train"), default="infer", help="inference or training step")
    p.add_argument("--device", action="append", default=None, metavar="GPU",
                   help="a GPU to compare (repeat it); default every registered GPU")
    p.add_argument("--precision", default=None,
                   help="fp32, tf32, fp16, bf16, amp-fp16, amp-bf16 (default: as perfseer predict picks it)")
    p.add_argument("--optimizer", default="adamw", help="the training step's optimizer, for its memory (default adamw)")
    p.add_argument("--input-shape", default=None, help="one sample's shape without the batch, e.g. 3x224x224")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per sample for a language model")
    p.add_argument("--no-memory", action="store_true", help="skip the memory simulation")
    p.add_argument("--energy", action="store_true",
                   help="also predict power, energy per sample and utilisation on each GPU (perfseer.energy)")
    p.add_argument("--power-limit", type=float, default=None, metavar="W", help="a power cap for every GPU (with --energy)")
    p.add_argument("--rank-by", choices=("time", "energy"), default="time",
                   help="rank by step time (default) or by energy per sample (needs --energy)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--plot", nargs="?", const="-", default=None, metavar="PNG",
                   help="draw the ranking: bars in the terminal, or a PNG file when a path is given")
    p.set_defaults(func=run_compare)


def _shape(text):
    if text is None:
        return None
    try:
        return tuple(int(v) for v in str(text).lower().replace(",", "x").split("x") if v)
    except ValueError:
        from perfseer.errors import PerfseerError

        raise PerfseerError(f"--input-shape {text!r} is not a shape like 3x224x224", "pass e.g. --input-shape 3x224x224")


def run_compare(args: argparse.Namespace) -> int:
    from perfseer.cli.warm import compare_rows  # deferred: keeps --help fast

    # answered by the warm process of an earlier call where one is running (perfseer.cli.warm)
    rows, warned = compare_rows(dict(model=args.model, batch=args.batch, phase=args.phase, devices=args.device,
                                precision=args.precision, optimizer=args.optimizer,
                                input_shape=_shape(args.input_shape), seq_len=args.seq_len,
                                memory=not args.no_memory, energy=args.energy, power_limit_w=args.power_limit,
                                rank_by=args.rank_by))
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        print_table(rows, args, bars=args.plot == "-")
    if args.plot and args.plot != "-":
        save_plot(rows, args.plot, f"{args.model}, batch {args.batch}, {args.phase}")
        print(f"plot written to {args.plot}")
    for w in warned:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _f(v, digits=3):
    return "-" if v is None else f"{v:.{digits}g}"


def print_table(rows: list[dict], args, bars: bool = False) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from perfseer.comparison import describe_basis

    prec = next((r["precision"] for r in rows if r.get("precision")), "?")
    energy = getattr(args, "energy", False)
    order = "most efficient first" if getattr(args, "rank_by", "time") == "energy" else "fastest first"
    t = Table(title=f"{args.model}, batch {args.batch}, {args.phase}, {prec} ({order})", title_justify="left",
              box=box.SIMPLE_HEAD, pad_edge=False)
    cols = ("#", "GPU", "ms/step", "90 % interval", "samples/s") + (("W", "J/sample") if energy else ()) + (
        "memory GiB", "basis", "seen")
    for c in cols:
        t.add_column(c, justify="right" if c in ("#", "ms/step", "samples/s", "W", "J/sample") else "left",
                     no_wrap=True)
    if bars:
        t.add_column("")
    notes: dict[str, str] = {}
    slowest = max((r["value"] for r in rows if r["value"] is not None), default=1.0)
    for r in rows:
        iv = r.get("interval")
        mem = "-" if r["fits"] is None else (f"{r['memory_gib']:.1f} of {r['device_memory_gib']:g}" if r["fits"]
                                              else f"NO FIT: {r['memory_gib']:.1f} of {r['device_memory_gib']:g}")
        label, note, seen = describe_basis(r, r["device"])
        notes.setdefault(label, note)
        cells = [str(r["rank"]), r["device"], _f(r["value"]), f"{_f(iv[0])}-{_f(iv[1])}" if iv else "-",
                 _f(r["throughput_per_s"], 4)]
        if energy:
            cells += [_f(r.get("power_w")), _f(r.get("energy_j_per_sample"))]
        cells += [mem, label, {True: "yes", False: "no"}.get(seen, "-")]
        if bars:
            cells.append("█" * max(1, round(30 * r["value"] / slowest)) if r["value"] else "")
        t.add_row(*cells)
    con = Console(width=max(Console().width, 132))
    con.print(t)
    for label, note in notes.items():
        if note and note != label:
            con.print(f"[dim]{label}: {note}[/dim]")
    con.print("[dim]seen: the GPU's own measurements are in the basis's data (no: from its spec sheet alone)[/dim]")
    mem_basis = next((r["memory_basis"] for r in rows if r.get("memory_basis")), None)
    if mem_basis:
        con.print(f"[dim]memory: the step's peak device memory ({mem_basis}), against each GPU's memory[/dim]")


def save_plot(rows: list[dict], path: str, title: str) -> None:
    import matplotlib  # deferred: only for --plot

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r["value"] is not None][::-1]
    fig, ax = plt.subplots(figsize=(7, 0.25 * len(ok) + 1.2))
    colors = ["tab:gray" if r["fits"] is False else "tab:blue" for r in ok]
    ax.barh([r["device"] for r in ok], [r["value"] for r in ok], color=colors,
            xerr=[[r["value"] - r["interval"][0] if r.get("interval") else 0 for r in ok],
                  [r["interval"][1] - r["value"] if r.get("interval") else 0 for r in ok]])
    ax.set_xlabel("ms per step (grey: does not fit in memory)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
