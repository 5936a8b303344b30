"""``perfseer graph MODEL``: extract a model's PerfGraph and summarise it."""

from __future__ import annotations

import argparse
from pathlib import Path


from perfseer.cli.bounds import MAX_BATCH, atomic_write_text, dumps
from perfseer.errors import PerfseerError, ShapeError
from perfseer.shapes import check_seq_len, parse_dims, parse_shape  # noqa: F401 - their old home


def add_parser(sub) -> None:
    p = sub.add_parser("graph", help="extract a model's PerfGraph and summarise it",
                       description="Extract the PerfGraph of MODEL: an .onnx file or a model reference.")
    p.add_argument("model", help="an .onnx file, timm:NAME[@reparam], torchvision:NAME, nb201:ARCH, fbnet:BLOCKS, "
                                 "hf:NAME (a HuggingFace transformer, see docs/concepts/perfgraph.md) or example:NAME")
    p.add_argument("--batch", type=int, default=None, help="batch size to bind (default 1)")
    p.add_argument("--input-shape", help="one sample's shape without the batch, e.g. 3x224x224")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="bind a symbolic input dimension; boxes=N: the boxes a torchvision detector keeps "
                        "(default 1000, docs/concepts/perfgraph.md)")
    p.add_argument("--seq-len", type=int, default=None, metavar="N",
                   help="tokens per sample: for hf: models (default 128), or the symbolic sequence dimensions of an "
                        "ONNX model")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="print the summary as JSON on stdout (as every command's --json); an old form, "
                        "--json PATH, writes it to PATH like --out")
    p.add_argument("--out", metavar="FILE", help="also write the summary as JSON to FILE (atomically)")
    p.add_argument("--save", metavar="PATH", help="save the graph's features (safetensors) to PATH")
    p.add_argument("--top", type=int, default=8, help="how many of the heaviest operators to list (>= 0)")
    p.set_defaults(func=run)


def graph_summary(model, batch=None, input_shape=None, dims=None, seq_len=None) -> tuple[dict, object]:
    """Extract and summarise: the plain function behind the subcommand (tests call it directly)."""
    from perfseer.features.extract import extract  # deferred: keeps --help fast

    pg = extract(model, batch=batch, input_shape=input_shape, dims=dims, seq_len=seq_len)
    return pg.summary(), pg


def run(args: argparse.Namespace) -> int:
    from perfseer.features.pyg import save_graphs  # deferred: keeps --help fast

    if args.batch is not None and not 1 <= args.batch <= MAX_BATCH:
        raise ShapeError(f"--batch must be from 1 to {MAX_BATCH}, got {args.batch}", "pass --batch N with N >= 1")
    shape = parse_shape(args.input_shape) if args.input_shape is not None else None
    check_seq_len(args.seq_len)
    summary, pg = graph_summary(args.model, args.batch, shape, parse_dims(args.dim), args.seq_len)
    summary["heaviest"] = [{"node": n, "op": o, "flops": f} for n, o, f in pg.heaviest(max(args.top, 0))]
    if args.save:
        save_graphs([pg], args.save, meta=[{"model": str(args.model), "batch_size": pg.batch_size}])
    text = dumps(summary, indent=2)
    for path in (args.out, args.json if args.json not in (None, "-") else None):
        if path:
            _write_atomic(Path(path), text + "\n")
    if args.json == "-":
        print(text)
        return 0
    render(summary, args.model)
    return 0


def _write_atomic(path: Path, text: str) -> None:
    try:
        atomic_write_text(path, text)
    except OSError as e:
        raise PerfseerError(f"cannot write {path}: {e.strerror}", "choose a writable path for --out") from e


def _si(value: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def render(summary: dict, model) -> None:
    from rich.console import Console  # deferred: keeps --help fast
    from rich.table import Table  # deferred: keeps --help fast

    console = Console()
    t = Table(title=f"PerfGraph of {model} (batch {summary['batch_size']})", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(justify="right")
    rows = [
        ("operators (nodes)", f"{summary['num_nodes']:,}"),
        ("data-flow edges", f"{summary['num_edges']:,}"),
        ("folded shape/constant ops", f"{summary['folded_nodes']:,}"),
        ("parameters", f"{summary['params']:,} ({_si(summary['params'])})"),
        ("MACs (conv/matmul)", _si(summary["macs"], "MAC")),
        ("FLOPs (all operators)", _si(summary["flops"], "FLOP")),
        ("memory access", _si(summary["memory_access_bytes"], "B")),
        ("weights", _si(summary["weight_bytes"], "B")),
        ("arithmetic intensity", f"{summary['arithmetic_intensity']:.1f} FLOP/B"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)
    heavy = Table(title="heaviest operators", title_justify="left")
    heavy.add_column("node")
    heavy.add_column("op")
    heavy.add_column("FLOPs", justify="right")
    heavy.add_column("share", justify="right")
    for h in summary["heaviest"]:
        share = h["flops"] / summary["flops"] * 100 if summary["flops"] else 0.0
        heavy.add_row(h["node"], h["op"], _si(h["flops"]), f"{share:.1f}%")
    console.print(heavy)
    ops = ", ".join(f"{op} x{n}" for op, n in sorted(summary["op_counts"].items(), key=lambda kv: -kv[1]))
    console.print(f"[bold]operators:[/bold] {ops}")
    if summary["uncovered_ops"]:
        unc = ", ".join(f"{op} x{n}" for op, n in summary["uncovered_ops"].items())
        console.print(f"[yellow]uncovered operators (generic estimate: 1 FLOP per output element):[/yellow] {unc}")
    else:
        console.print("[green]every operator has its own cost function[/green]")
