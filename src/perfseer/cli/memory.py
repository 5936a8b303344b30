"""``perfseer memory MODEL``: peak GPU memory of a training or inference step, its breakdown, the
largest batch that fits a device and the smallest MIG slice."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfseer.cli.bounds import dumps
from perfseer.cli.graph import _write_atomic, parse_shape
from perfseer.cli.several import add_arguments as add_parallel_arguments
from perfseer.cli.several import several_asked
from perfseer.cli.train import _ints
from perfseer.errors import MemoryConfigError, PerfseerError
from perfseer.memory.api import max_batch_for, memory, resolve_model
from perfseer.memory.breakdown import LINES
from perfseer.memory.step import OPTIMIZERS, PHASES, PRECISIONS
from perfseer.memory.trace import CATEGORIES
from perfseer.memory.ways import ways_to_fit
from perfseer.shapes import check_seq_len

MIB = 1 << 20


def add_parser(sub) -> None:
    p = sub.add_parser(
        "memory", help="peak GPU memory of a training or inference step, with its breakdown",
        description="Simulate one step of MODEL on fake tensors (no GPU, no weights), replay its allocations "
                    "through a model of PyTorch's CUDA caching allocator and print the peak memory with its "
                    "breakdown; ONNX models get an inference estimate from the graph's liveness. "
                    "See docs/concepts/memory-simulation.md.")
    p.add_argument("model", metavar="MODEL", help="timm:NAME, torchvision:NAME, hf:NAME (--seq-len TOKENS), "
                                                  "nb201:..., fbnet:..., space:..., or an .onnx file / example:NAME "
                                                  "(inference)")
    p.add_argument("--batch", type=_ints, default=[1], metavar="B[,B...]", help="batch sizes (default 1)")
    p.add_argument("--phase", default="train", choices=PHASES, help="default train")
    p.add_argument("--optimizer", default="adamw", choices=OPTIMIZERS, help="default adamw (train only)")
    p.add_argument("--precision", default="fp32", choices=PRECISIONS,
                   help="fp32; amp-fp16 / amp-bf16: autocast with fp32 weights; fp16 / bf16: the model cast")
    p.add_argument("--device", default=None, help="a GPU of 'perfseer devices' (a100-40gb, h100-sxm, h200, "
                                                  "a100-80gb:1g.10gb...): capacity and workspace")
    p.add_argument("--capacity-gib", type=float, default=None, help="device memory in GiB (instead of the registry's)")
    p.add_argument("--context-mib", type=float, default=None, help="CUDA context size (default 1,314 MiB, measured on an H200)")
    p.add_argument("--input-shape", default=None, metavar="CxHxW",
                   help="one sample's shape (default: the model's); for hf:NAME the number of tokens (default 128)")
    p.add_argument("--seq-len", type=int, default=None, metavar="N",
                   help="tokens per sample for hf: models (default 128), as perfseer predict takes it")
    p.add_argument("--max-batch", action="store_true", help="also find the largest batch that fits --device")
    p.add_argument("--mig", action="store_true",
                   help="also give the smallest MIG profile each batch fits (of --device, or of A100 40/80 GB, "
                        "H100 80/94 GB and H200)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="print the results as JSON on stdout (as every command's --json); --json PATH writes them "
                        "to PATH like --out")
    p.add_argument("--out", metavar="FILE", default=None, help="also write the results as JSON to FILE (atomically)")
    p.add_argument("--table", metavar="PATH", default=None,
                   help="add the totals as memory_mb rows to a measurement table (CSV/Parquet; created or "
                        "extended): simulator labels for training a memory predictor")
    add_parallel_arguments(p, memory=True)
    p.set_defaults(func=run)


def memory_report(model, batches, phase="train", optimizer="adamw", precision="fp32", device=None,
                  capacity_gib=None, context_mib=None, input_shape=None, max_batch=False, mig=False) -> dict:
    """What ``perfseer memory`` computes, as the dict its ``--json`` writes (tests call this)."""

    src = resolve_model(model, input_shape)
    out = {"model": src.label, "input_shape": list(src.input_shape) if src.input_shape else None,
           "estimates": [], "max_batch": None}
    for b in batches:
        est = memory(model, batch=b, phase=phase, optimizer=optimizer, precision=precision, device=device,
                     context_mib=context_mib, capacity_gib=capacity_gib, mig=mig, _src=src)
        out["estimates"].append(est.to_dict())
    short = [e for e in out["estimates"] if e["fits"] is False]
    found = None
    if max_batch or short:  # a step that does not fit: the largest batch that does is one way out
        where = device or (f"{capacity_gib:g} GiB" if capacity_gib else "the device")
        print(f"perfseer memory: searching the largest batch that fits {where} (a few simulated steps)...",
              file=sys.stderr, flush=True)
        try:
            mb = max_batch_for(model, device=device, phase=phase, optimizer=optimizer, precision=precision,
                               context_mib=context_mib, capacity_gib=capacity_gib, _src=src)
        except PerfseerError:
            if max_batch:
                raise
            mb = None  # e.g. an ONNX model: the search needs the simulator; the other ways still hold
        if mb is not None:
            found = {"batch": mb.batch, "capped": mb.capped, "traces_run": mb.traces_run,
                     "affine": mb.affine, "device": device, "capacity_gib": capacity_gib,
                     "basis": getattr(mb, "basis", "simulated")}
        if max_batch:
            out["max_batch"] = found
    for e in short:
        e["ways_to_fit"] = [w.to_dict() for w in ways_to_fit(_estimate(e), found["batch"] if found else None)]
    return out


def _estimate(d: dict):
    from perfseer.memory.breakdown import MemoryEstimate  # deferred: keeps --help fast

    return MemoryEstimate(**{k: v for k, v in d.items() if k in MemoryEstimate.__dataclass_fields__})


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f} MiB"


def format_report(rep: dict) -> str:
    lines = []
    for e in rep["estimates"]:
        head = f"{rep['model']}  batch {e['batch']}  {e['phase']}"
        if e["phase"] == "train":
            head += f" ({e['optimizer']})"
        head += f"  {e['precision']}  [{e.get('basis') or e['method']}]"
        if e["device"] or e["capacity"]:
            head += f"  on {e['device'] or 'the device'} ({e['capacity'] / (1 << 30):g} GiB)"
        lines.append(head)
        own = e.get("category_peaks") or {}
        for k in LINES:
            v = e["breakdown"].get(k, 0)
            if v:
                # a tensor category is its value at the moment allocated memory peaks; its own
                # peak (e.g. every gradient, before the optimizer step frees some) beside it
                name = k.replace("_", " ") + (" at the peak" if k in CATEGORIES else "")
                top = own.get(k, 0)
                beside = f"  (own peak {_mib(top)})" if k in CATEGORIES and top > v * 1.01 else ""
                lines.append(f"  {name:<28}{_mib(v):>16}{beside}")
        lines.append(f"  {'total':<28}{_mib(e['total']):>16}")
        lines.append(f"  peak allocated {_mib(e['peak_allocated'])}, peak reserved {_mib(e['peak_reserved'])}")
        if e["fits"] is not None:
            lines.append("  fits" if e["fits"] else "  does not fit")
        if e.get("ways_to_fit"):
            lines.append("  what would make it fit there:")
            for w in e["ways_to_fit"]:
                verdict = {True: "fits", False: "does not fit", None: "can fit"}[w["fits"]]
                need = f", needs {'at least ' if w['fits'] is None else ''}{w['needs'] / (1 << 30):.1f} GiB" \
                    if w["needs"] is not None and w["way"] not in ("larger device", "MIG slice") else ""
                if w["way"] == "smaller batch" and not w["fits"]:
                    verdict = "no"
                lines.append(f"    {w['way']}: {w['how']}{need}: {verdict} ({w['basis']})")
        for n in e["notes"]:
            lines.append(f"  note: {n}")
        for m in e.get("mig") or []:
            if m["smallest"]:
                tight = next(p["tight"] for p in m["profiles"] if p["profile"] == m["smallest"])
                lines.append(f"  MIG {m['device']}: smallest profile that fits: {m['smallest']}"
                             + (" (tight: within 5 % of the slice's nominal size)" if tight else ""))
            else:
                lines.append(f"  MIG {m['device']}: fits no profile")
    mb = rep.get("max_batch")
    if mb:
        where = mb["device"] or f"{mb['capacity_gib']:g} GiB"
        if mb["batch"] == 0:
            lines.append(f"largest batch on {where}: none (one sample does not fit)")
        else:
            capped = " (search ceiling reached)" if mb["capped"] else ""
            lines.append(f"largest batch on {where}: {mb['batch']}{capped}"
                         + (f" [{mb['basis']}]" if mb.get("basis", "simulated") != "simulated" else ""))
    return "\n".join(lines)


def table_rows(rep: dict) -> list[dict]:
    """Measurement-table rows (README, Measurement tables) of a report: ``memory_mb`` is the total
    in MiB; ``device`` is ``GPU/PRECISION-sim`` (``cuda`` when no device was named)."""

    if not rep.get("input_shape"):
        raise MemoryConfigError("a measurement table needs the input shape", "pass --input-shape CxHxW")
    shape = "x".join(str(d) for d in rep["input_shape"])
    return [{"model": rep["model"], "input_shape": shape, "batch_size": e["batch"], "phase": e["phase"],
             "device": f"{e['device'] or 'cuda'}/{e['precision']}-sim", "memory_mb": e["total"] / MIB,
             "precision": e["precision"], "source": f"perfseer memory ({e['method']})",
             "optimizer": e["optimizer"] or ""} for e in rep["estimates"]]


def write_memory_table(rep: dict, path: str) -> None:
    """Add ``rep``'s rows to the table at ``path`` (validated, written atomically by write_table)."""
    import pandas as pd  # deferred: heavy (pandas), loaded on first use

    from perfseer.data.table import read_table, write_table  # deferred with pandas

    rows = pd.DataFrame(table_rows(rep))
    if Path(path).exists():
        rows = pd.concat([read_table(path), rows], ignore_index=True)
    write_table(rows, path)


def _write_json(path: str, obj: dict) -> None:
    text = dumps(obj, indent=1) + "\n"
    if path == "-":
        sys.stdout.write(text)
        return
    _write_atomic(Path(path), text)


def input_shape_of(model: str, input_shape: str | None, seq_len: int | None):
    """One sample's shape from ``--input-shape`` or, for an ``hf:`` model, ``--seq-len``."""
    shape = parse_shape(input_shape) if input_shape else None
    if seq_len is None:
        return shape
    check_seq_len(seq_len)
    if shape is not None:
        raise MemoryConfigError("--seq-len and --input-shape both give the sample's shape", "pass only --seq-len")
    if not str(model).startswith("hf:"):
        raise MemoryConfigError(f"--seq-len is the number of tokens of an hf: model; {model} is not one",
                                "pass --input-shape CxHxW for this model")
    return (seq_len,)


def run(args: argparse.Namespace) -> int:
    shape = input_shape_of(args.model, args.input_shape, getattr(args, "seq_len", None))
    if several_asked(args) or args.checkpoint:  # one GPU's share (perfseer.memory.parallel)
        from perfseer.cli.several import format_several, memory_several

        rep = memory_several(args, shape)
        for path in (args.out, args.json):
            if path:
                _write_json(path, rep)
        if args.json != "-":
            print(format_several(rep))
        return 0
    rep = memory_report(args.model, args.batch, phase=args.phase, optimizer=args.optimizer, precision=args.precision,
                        device=args.device, capacity_gib=args.capacity_gib, context_mib=args.context_mib,
                        input_shape=shape, max_batch=args.max_batch, mig=args.mig)
    if args.out:
        _write_json(args.out, rep)
    if args.json:
        _write_json(args.json, rep)
    if args.table:
        write_memory_table(rep, args.table)
    if args.json != "-":
        print(format_report(rep))
        if args.device or args.capacity_gib:
            from perfseer.cli.several import advice_lines

            for line in advice_lines(args, shape, rep):
                print(line)
    return 0
