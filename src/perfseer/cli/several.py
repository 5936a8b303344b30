"""The several-GPU options of ``perfseer predict`` and ``perfseer memory`` (``--gpus``, ``--parallel``,
``--tp/--pp/--dp``...), and the table of a several-GPU answer."""

from __future__ import annotations

import argparse

from perfseer.parallel.plan import STRATEGIES

#: perfseer.parallel.collectives.INTERCONNECTS (kept here: importing the collectives reads the device registry)
INTERCONNECTS = ("nvlink", "pcie", "ib-ndr", "ib-hdr", "roce")


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} is not >= 1")
    return v


def add_arguments(p, memory: bool = False) -> None:
    """Add the several-GPU options to a subcommand's parser."""
    g = p.add_argument_group("several GPUs (docs/guide/several-gpus.md)")
    g.add_argument("--gpus", type=_positive, default=None, metavar="N",
                   help="GPUs the step runs on (N = tp x pp x dp); --batch is then the global batch")
    g.add_argument("--parallel", default=None, choices=STRATEGIES,
                   help="dp (DistributedDataParallel), fsdp, zero1/zero2/zero3 (DeepSpeed), dataparallel "
                        "(torch.nn.DataParallel), or tp / pp alone over every GPU; with --tp/--pp: the "
                        "data-parallel flavour of the rest")
    g.add_argument("--tp", type=_positive, default=None, metavar="T", help="tensor-parallel degree (Megatron)")
    g.add_argument("--pp", type=_positive, default=None, metavar="P", help="pipeline stages")
    g.add_argument("--dp", type=_positive, default=None, metavar="D", help="data-parallel replicas")
    g.add_argument("--microbatches", type=_positive, default=None, metavar="M",
                   help="microbatches per step with --pp (default 4 x P)")
    g.add_argument("--schedule", default="1f1b", choices=("1f1b", "gpipe"), help="pipeline schedule (default 1f1b)")
    g.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism with --tp")
    g.add_argument("--nodes", type=_positive, default=1, metavar="K", help="nodes the GPUs span (default 1)")
    g.add_argument("--node", default=None, metavar="TYPE",
                   help="node type: dgx-a100, dgx-h100, dgx-h200, dgx-b200 (hgx-* aliases), pcie-8, pcie-4, ... "
                        "(default: the GPU's usual one)")
    g.add_argument("--interconnect", default=None, choices=INTERCONNECTS,
                   help="force the path inside a node (nvlink, pcie) or the network across nodes")
    if memory:
        g.add_argument("--checkpoint", action="store_true",
                       help="activation checkpointing (full recompute of each transformer layer)")


def several_asked(args) -> bool:
    return bool((args.gpus and args.gpus > 1) or args.parallel or args.tp or args.pp or args.dp)


def parallel_kwargs(args) -> dict:
    """The keyword arguments of :func:`perfseer.predict` for the several-GPU options."""
    if not several_asked(args):
        return {}
    return {"gpus": args.gpus or 1, "parallel": args.parallel, "tp": args.tp, "pp": args.pp, "dp": args.dp,
            "microbatches": args.microbatches, "schedule": args.schedule,
            "sequence_parallel": args.sequence_parallel, "nodes": args.nodes, "node": args.node,
            "interconnect": args.interconnect}


def print_rows(rows: list[dict], title: str) -> None:
    """The table of a several-GPU answer: step, its compute / exposed communication / bubble."""
    from rich import box  # deferred: keeps --help fast
    from rich.console import Console
    from rich.table import Table

    first = rows[0] if rows else {}
    setting = ", ".join(str(first[k]) for k in ("phase", "precision") if first.get(k))
    t = Table(title=f"{title}: {first.get('parallel', '')}" + (f" ({setting})" if setting else ""),
              title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    with_memory = any(r.get("memory_per_gpu_bytes") for r in rows)
    cols = ("batch", "per GPU", "step", "compute", "comm", "bubble", "per s") + (("memory/GPU",) if with_memory else ())
    for c in cols:
        t.add_column(c, justify="right")
    notes = []
    for r in rows:
        if r.get("value") is None:
            t.add_row(str(r["batch_size"]), "-", "refused", *[""] * (len(cols) - 3))
            notes.append(r.get("reason") or "no answer")
            continue
        mem = r.get("memory_per_gpu_bytes")
        cells = [str(r["batch_size"]), str(r.get("per_gpu_batch", "")), f"{r['value']:.4g} ms",
                 f"{r['compute_ms']:.4g}", f"{r['comm_ms']:.4g}", f"{r['bubble_ms']:.4g}",
                 f"{r['throughput_per_s']:.4g}" if r.get("throughput_per_s") else ""]
        t.add_row(*cells, *([f"{mem / 2**30:.3g} GiB" if mem else "-"] if with_memory else []))
        notes += r.get("notes", [])
    Console().print(t)
    for n in dict.fromkeys(notes):
        print(f"  note: {n}")
    print("step = compute + comm (exposed communication) + bubble (pipeline), ms; per s: samples per second")
    for b in dict.fromkeys(r.get("basis", "") for r in rows if r.get("basis")):
        print(f"basis: {b}")


def memory_several(args, shape) -> dict:
    """``perfseer memory`` with several-GPU options or ``--checkpoint``: one GPU's share per batch."""
    from perfseer.memory.parallel import memory_parallel  # deferred: loads torch
    from perfseer.parallel.plan import make_plan

    if args.max_batch or args.mig or args.table:
        from perfseer.errors import PerfseerError

        raise PerfseerError("--max-batch, --mig and --table answer one GPU", "drop them, or drop the several-GPU options")
    kw = parallel_kwargs(args)
    plan = make_plan((kw.get("gpus") if kw.get("gpus", 1) != 1 or not (args.tp or args.pp or args.dp) else None)
                     if kw else 1, args.parallel, tp=args.tp, pp=args.pp, dp=args.dp, microbatches=args.microbatches,
                     schedule=args.schedule, sequence_parallel=args.sequence_parallel, nodes=args.nodes,
                     node=args.node, interconnect=args.interconnect)
    seq = getattr(args, "seq_len", None)
    out = {"model": args.model, "layout": plan.describe(), "estimates": []}
    for b in args.batch:
        pm = memory_parallel(args.model, b, plan, phase=args.phase, optimizer=args.optimizer, precision=args.precision,
                             device=args.device, checkpoint=args.checkpoint, seq_len=seq,
                             input_shape=None if seq else shape, capacity_gib=args.capacity_gib)
        out["estimates"].append(pm.to_dict())
    return out


def format_several(rep: dict) -> str:
    lines = []
    for e in rep["estimates"]:
        head = (f"{rep['model']}  {e['layout']}  global batch {e['batch']} ({e['per_gpu_batch']} per GPU"
                + (f", microbatch {e['microbatch']}" if e["microbatch"] != e["per_gpu_batch"] else "") + f")  {e['phase']}"
                + ("  checkpointed" if e["checkpoint"] else ""))
        if e["capacity"]:
            head += f"  on {e['device'] or 'the device'} ({e['capacity'] / 2**30:g} GiB)"
        lines.append(head)
        for k, v in e["breakdown"].items():
            if v:
                one = e["single"]["breakdown"].get(k, 0)
                lines.append(f"  {k.replace('_', ' '):<24}{v / 2**20:>14,.1f} MiB   (one GPU, whole model: "
                             f"{one / 2**20:,.1f} MiB)")
        lines.append(f"  {'total per GPU':<24}{e['total'] / 2**20:>14,.1f} MiB")
        if e["fits"] is not None:
            lines.append("  fits" if e["fits"] else "  does not fit")
        for n in e["notes"]:
            lines.append(f"  note: {n}")
    return "\n".join(lines)


def advice_lines(args, shape, rep: dict) -> list[str]:
    """Where a training step does not fit one GPU: the fewest GPUs of each strategy that would."""
    from perfseer.memory.parallel import fitting_layouts  # deferred: loads torch

    lines = []
    for e in rep["estimates"]:
        if e.get("fits") is not False or e["phase"] != "train":
            continue
        seq = getattr(args, "seq_len", None)
        fits = fitting_layouts(args.model, e["batch"], device=args.device, phase=e["phase"], optimizer=args.optimizer,
                               precision=args.precision, seq_len=seq, input_shape=None if seq else shape,
                               capacity_gib=args.capacity_gib)
        lines.append(f"batch {e['batch']} does not fit one {args.device or 'GPU'}; with {e['batch']} samples per GPU "
                     "it would fit on:")
        for f in fits:
            lines.append(f"  {f['layout']:<44} {f['memory_per_gpu_bytes'] / 2**30:8.1f} GiB per GPU")
        if not fits:
            lines.append(f"  no layout of up to 512 GPUs tried (ZeRO, FSDP, TP, TP+PP); lower the batch or add "
                         "--checkpoint")
        lines.append("  (perfseer memory MODEL --gpus N --parallel STRATEGY for the breakdown)")
    return lines
