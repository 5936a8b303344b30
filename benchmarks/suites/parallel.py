"""Several GPUs: the collective model on held-out NCCL measurements, ``torch.nn.DataParallel`` step
times on 2-4 GPUs, and multi-GPU transformer training against Megatron-LM's published throughput.

**Collectives** (``vidur/profiling/network``): :func:`perfseer.fit.collectives.validate`, i.e. the
constants refitted without the held-out rows: every third message size and the largest fifth of
each configuration; the 4-GPU DGX all-reduce (fitted on 2 and 8); each cross-node DGX all-reduce
(2x2, 2x4, 2x8 GPUs) fitted on the other three; the A100 PCIe and A40 servers predicted inside
the node from the DGX fit and their spec sheets, across nodes from the other server's fit.

**DataParallel** (``gpu-benchmark/``, 32 torchvision CNNs, batch 12 per GPU, 2-4 GPUs):

* *measured compute*: the measured 1-GPU step plus the DataParallel cost of
  :mod:`perfseer.parallel.step`, constants fitted on the TITAN Xp, the RTX 2080 Ti held out
  (:mod:`perfseer.fit.dataparallel`): the error of the several-GPU model alone;
* *end to end*: ``perfseer.predict(torchvision:NAME, device=..., gpus=N, parallel="dataparallel",
  node="pcie-4")``, the per-GPU compute from the single-GPU basis: what a user gets.

**Megatron** (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC21, Table 1: GPT models, sequence 2048, vocabulary 51,200, on DGX A100
nodes with 8 HDR InfiniBand NICs): ``perfseer.predict`` of the published TP x PP x DP layout and
global batch, against the step time implied by the published per-GPU throughput and the paper's
own FLOP count ``96 B s l h^2 (1 + s/6h + V/16lh)``; the layouts that fit one node's worth of
extraction here (quick: the smallest).

**Published formulas** (no shared TP/PP/FSDP step measurements exist): ZeRO's model-state bytes per
GPU (Rajbhandari et al. 2020, the 7.5 B / 64-GPU example), Korthikanti et al.'s (2022) activation
bytes per tensor-parallel rank with and without sequence parallelism and recomputation, and
1F1B's ``(p - 1) / m`` bubble, each against perfseer's answer for the same configuration.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.runner import Context, Step, Suite, f, md_table, timing_note

#: Narayanan et al. (SC21) Table 1: (parameters in billions, heads, hidden, layers, TP, PP, GPUs,
#: global batch, achieved TFLOP/s per GPU)
MEGATRON = [(1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
            (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
            (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138)]
SEQ, VOCAB = 2048, 51200
QUICK_MODELS = ("resnet18", "resnet50", "densenet121", "mobilenet_v2", "vgg16", "squeezenet1_1")


def collectives_step() -> dict:
    """The held-out table, and the measured bus bandwidths (GB/s, messages of 8 MiB and more) the
    section quotes: median per configuration, 10th and 90th percentiles for those that switch."""
    from perfseer.fit.collectives import load, validate
    from perfseer.parallel.collectives import volume_factor

    df = load()
    big = df[df["size"] >= 8 * 2**20]
    rates = {}
    for (folder, op, n, per), g in big.groupby(["folder", "op", "ranks", "per_node"]):
        bus = volume_factor(op, int(n)) * g["size"] / (g["ms"] * 1e-3) / 1e9
        rates[f"{folder} {op} {n // per}x{per}"] = {"median": float(bus.median()), "p10": float(bus.quantile(0.1)),
                                                    "p90": float(bus.quantile(0.9))}
    from perfseer.fit.collectives import fit

    shipped = fit(df)  # every row, as the shipped constants
    sockets = {name: v["by_gpus_per_node"]["1"] for name, v in shipped["nodes"].items()
               if "network" in v for v in [v["network"].get("p2p", {"by_gpus_per_node": {"1": {}}})]}
    return {"table": validate(df), "bus_gbs": rates,
            "socket_buffers": {k: {"buffer_bytes": v.get("buffer_bytes"), "efficiency": v.get("efficiency"),
                                   "beyond_x": v.get("beyond_x")} for k, v in sockets.items()}}


def dataparallel_measured_step() -> dict:
    from perfseer.fit.dataparallel import build

    consts, rows = build(fit_on="titan-xp")
    return {"table": rows, "constants": {k: consts[k] for k in ("per_tensor_ms", "per_module_ms", "per_replica_ms",
                                                                 "bandwidth_scale")}}


def dataparallel_end_to_end(quick: bool) -> dict:
    import warnings

    import perfseer
    from perfseer.errors import PerfseerError
    from perfseer.fit.dataparallel import load

    df = load()
    df = df[df["precision"] == "float"]
    if quick:
        df = df[df["model"].isin(QUICK_MODELS)]
    out = []
    for (gpu, model, phase), g in df.groupby(["gpu", "model", "phase"]):
        for r in g.itertuples():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    kw = dict(gpus=r.gpus, parallel="dataparallel", node="pcie-4") if r.gpus > 1 else {}
                    row = perfseer.predict(f"torchvision:{model}", device=gpu, batch=12 * r.gpus, phase=phase,
                                           precision="fp32", basis="spec", **kw)[0]
            except PerfseerError as e:
                out.append({"gpu": gpu, "model": model, "phase": phase, "gpus": r.gpus, "error": str(e)[:200]})
                continue
            v = row.get("value")
            out.append({"gpu": gpu, "model": model, "phase": phase, "gpus": r.gpus, "measured_ms": r.ms,
                        "predicted_ms": v, "rel_err": None if v is None else (v - r.ms) / r.ms,
                        "compute_ms": row.get("compute_ms"), "comm_ms": row.get("comm_ms")})
    return {"rows": out}


def megatron_step(quick: bool) -> dict:
    import warnings

    import perfseer

    out = []
    for (pb, heads, h, layers, tp, pp, n, batch, tflops) in MEGATRON[: 1 if quick else 3]:
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h, "n_layer": layers,
               "n_head": heads, "n_positions": SEQ, "n_ctx": SEQ, "vocab_size": VOCAB,
               "activation_function": "gelu_new"}
        path = Path(tempfile.gettempdir()) / f"perfseer-megatron-{pb}b.json"
        path.write_text(json.dumps(cfg))
        flops = 96 * batch * SEQ * layers * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * layers * h))
        published_ms = 1e3 * flops / (n * tflops * 1e12)
        dp = n // (tp * pp)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            row = perfseer.predict(f"hf:{path}", device="a100-80gb-sxm", batch=batch, seq_len=SEQ, phase="train",
                                   precision="amp-fp16", gpus=n, parallel="dp", tp=tp, pp=pp,
                                   microbatches=(batch // dp) if pp > 1 else None, nodes=max(1, n // 8),
                                   node="dgx-a100")[0]
        v = row.get("value")
        out.append({"params_b": pb, "layout": row.get("parallel"), "batch": batch, "published_tflops": tflops,
                    "published_ms": published_ms, "predicted_ms": v, "compute_ms": row.get("compute_ms"),
                    "comm_ms": row.get("comm_ms"), "bubble_ms": row.get("bubble_ms"),
                    "rel_err": None if v is None else (v - published_ms) / published_ms, "basis": row.get("basis")})
    return {"rows": out}


def activation_formula_step(quick: bool) -> dict:
    """The simulator's activation memory of a GPT-2 training step against Korthikanti et al.'s
    per-layer formula ``s b h (34 + 5 a s / h)`` bytes (16-bit activations; the ``5 a s / h`` term is
    the attention matrices, absent with fused attention), times the layers, plus the logits."""
    from perfseer.memory.api import memory

    out = []
    seq = 256 if quick else 1024
    for attention in ("eager", "sdpa"):
        ref = "hf:gpt2" + ("@eager" if attention == "eager" else "")
        for precision in ("fp16", "amp-fp16"):
            est = memory(ref, batch=1, input_shape=(seq,), phase="train", precision=precision, optimizer="adamw")
            h, a, L, V = 768, 12, 12, 50257
            per_layer = seq * h * (34 + (5 * a * seq / h if attention == "eager" else 0))
            logits = seq * V * (2 + 4 + 4)  # fp16 logits, their fp32 copy for the loss and its softmax
            out.append({"attention": attention, "seq": seq, "precision": precision,
                        "simulated_activation_bytes": (est.category_peaks or {}).get("activations"),
                        "formula_layers_bytes": per_layer * L, "formula_logits_bytes": logits})
    return {"rows": out}


#: Rajbhandari et al. (2020) "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
#: Figure 1: model-state GB per GPU for psi = 7.5 B on Nd = 64 GPUs with K = 12 (stages 0-3)
ZERO_PAPER_GB = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
#: the 7.5 B GPT of Narayanan et al. (SC21) Table 1: heads, hidden, layers
GPT75 = (32, 4096, 36)


def _gpt_config(heads: int, h: int, layers: int, seq: int) -> str:
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": h, "n_layer": layers,
           "n_head": heads, "n_positions": seq, "n_ctx": seq, "vocab_size": VOCAB, "activation_function": "gelu_new"}
    path = Path(tempfile.gettempdir()) / f"perfseer-gpt-{h}x{layers}-{seq}.json"
    path.write_text(json.dumps(cfg))
    return f"hf:{path}"


def zero_formula_step(quick: bool) -> dict:
    """Model-state bytes per GPU of the 7.5 B GPT on 64 GPUs (amp-fp16, AdamW) under DDP and ZeRO
    1-3: each state's own peak in the simulated single-GPU step, laid out and divided as
    :func:`perfseer.memory.parallel.memory_parallel` does, against ZeRO's formula at the same
    parameter count and the paper's printed figures."""
    from perfseer.memory.api import memory
    from perfseer.memory.parallel import _facts, memory_parallel
    from perfseer.parallel.plan import make_plan
    from perfseer.parallel.sharding import deepspeed_mixed_precision, factors, zero_model_state_bytes

    heads, h, layers = GPT75
    seq = 128 if quick else 256  # model states do not depend on the sequence
    ref = _gpt_config(heads, h, layers, seq)
    est = memory(ref, batch=1, input_shape=(seq,), phase="train", precision="amp-fp16", optimizer="adamw")
    peaks = dict(est.category_peaks or est.breakdown)
    psi = peaks["weights"] / 4  # fp32 parameters under autocast
    states = ("weights", "weight_casts", "gradients", "optimizer_state")
    out = []
    nd = 64
    for stage, flavour in ((0, "ddp"), (1, "zero1"), (2, "zero2"), (3, "zero3")):
        plan = make_plan(nd, flavour)
        facts = _facts(ref, seq)
        laid = deepspeed_mixed_precision(peaks) if stage else peaks
        f = factors(plan, facts)
        ours = {k: laid.get(k, 0) * f[k] for k in states}
        pm = memory_parallel(ref, nd, plan, precision="amp-fp16", seq_len=seq, device="a100-80gb-sxm", _single=est)
        formula = zero_model_state_bytes(psi, nd, stage)
        out.append({"stage": stage, "layout": plan.describe(), "psi": psi, "paper_gb": ZERO_PAPER_GB[stage],
                    "formula_bytes": formula, "perfseer_bytes": sum(ours.values()),
                    "perfseer_parts": ours, "per_gpu_peak_bytes": pm.total,
                    "rel_err": sum(ours.values()) / formula - 1})
    return {"rows": out, "seq": seq}


def activation_tp_step(quick: bool) -> dict:
    """Activation bytes per TP rank of the 7.5 B GPT (16-bit, explicit attention) under TP 1-8,
    with and without sequence parallelism and with full recomputation, against Korthikanti et
    al.'s per-layer formula times the layers (plus the logits, which the formula leaves out)."""
    from perfseer.memory.api import memory
    from perfseer.memory.parallel import _facts
    from perfseer.parallel.plan import make_plan
    from perfseer.parallel.sharding import factors, logits_bytes, megatron_activation_bytes

    heads, h, layers = GPT75
    if quick:
        heads, h, layers = 12, 768, 12
    seq = 512 if quick else 2048
    ref = _gpt_config(heads, h, layers, seq) + "@eager"
    est = memory(ref, batch=1, input_shape=(seq,), phase="train", precision="fp16", optimizer="adamw")
    acts = (est.category_peaks or {}).get("activations") or est.breakdown.get("activations", 0)
    facts = _facts(ref, seq)
    logits = logits_bytes(facts, 1, "fp16")  # fp16 logits, their fp32 copy for the loss and its log-softmax
    out = []
    for t in (1, 2, 4, 8):
        for sp, ck in ((False, False), (True, False), (False, True), (True, True)):
            if t == 1 and sp:
                continue
            plan = make_plan(t, "tp", sequence_parallel=sp) if t > 1 else make_plan(1, "dp")
            f = factors(plan, facts, checkpoint=ck)
            ours = (acts - logits) * f["activations"] + logits * f["logits"]  # as shard() divides them
            formula = megatron_activation_bytes(seq, 1, h, heads, layers, t, sequence_parallel=sp, recompute=ck)
            if ck:  # the layer being recomputed holds its activations while its backward runs
                formula += megatron_activation_bytes(seq, 1, h, heads, 1, t, sequence_parallel=sp)
            out.append({"t": t, "sequence_parallel": sp, "recompute": ck, "perfseer_bytes": ours,
                        "formula_bytes": formula, "formula_logits_bytes": logits / t,
                        "rel_err": ours / (formula + logits / t) - 1})
    return {"rows": out, "shape": {"heads": heads, "hidden": h, "layers": layers, "seq": seq},
            "simulated_activation_bytes": acts}


def bubble_step(quick: bool) -> dict:
    """1F1B's bubble in ``perfseer.predict`` (GPT-2 on 4 pipeline stages of a DGX A100) against
    Megatron's ``(p - 1) / m`` of the ideal compute time."""
    import warnings

    import perfseer

    out = []
    for m in ((8,) if quick else (4, 8, 16)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            row = perfseer.predict("hf:gpt2", device="a100-80gb-sxm", batch=4 * m, seq_len=1024, phase="train",
                                   precision="amp-fp16", gpus=4, parallel="pp", microbatches=m, node="dgx-a100")[0]
        share = row["bubble_ms"] / row["compute_ms"]
        out.append({"p": 4, "m": m, "bubble_ms": row["bubble_ms"], "compute_ms": row["compute_ms"],
                    "comm_ms": row["comm_ms"], "perfseer_share": share, "formula_share": 3 / m,
                    "rel_err": share / (3 / m) - 1})
    return {"rows": out}


def steps(ctx: Context) -> list[Step]:
    return [Step("collectives", collectives_step),
            Step("dataparallel-measured-compute", dataparallel_measured_step),
            Step("dataparallel-end-to-end", lambda: dataparallel_end_to_end(ctx.quick)),
            Step("megatron", lambda: megatron_step(ctx.quick)),
            Step("activation-formula", lambda: activation_formula_step(ctx.quick)),
            Step("zero-formula", lambda: zero_formula_step(ctx.quick)),
            Step("activation-tp-formula", lambda: activation_tp_step(ctx.quick)),
            Step("bubble-formula", lambda: bubble_step(ctx.quick))]


def _pct(v):
    return "-" if v is None else f"{100 * v:.1f} %"


def _socket_note(res: dict) -> str:
    """The PCIe servers' cross-node fit in words: burst rate, buffer, sustained rate (from the step)."""
    buf = res.get("collectives", {}).get("socket_buffers", {})
    parts = []
    for node, v in sorted(buf.items()):
        if not v.get("buffer_bytes"):
            continue
        burst = v["efficiency"] * 3.125  # ethernet-25g's rated GB/s per port
        sustained = 1.0 / (1.0 / burst + v["beyond_x"] / 3.125)
        parts.append(f"{node} {burst:.1f} GB/s for the first {v['buffer_bytes'] / 2**20:.1f} MiB, "
                     f"{sustained:.1f} GB/s beyond")
    if not parts:
        return ""
    return ("  Across the PCIe servers' network (NCCL's socket transport) a message goes at a burst rate "
            "into the hosts' buffers, then at the sustained rate: " + "; ".join(parts) + " (fitted).")


def render(ctx: Context, res: dict[str, dict]) -> str:
    lines = ["## Several GPUs (`python -m benchmarks run parallel`)", ""]
    col = res.get("collectives", {}).get("table", [])
    if col:
        lines += ["**Collectives** against held-out NCCL measurements (Vidur, `vidur/profiling/network`; "
                  "`perfseer.fit.collectives` refits without the held-out rows): absolute error.", ""]
        short = {"a100_dgx": "DGX A100", "a100_pairwise_nvlink": "A100 PCIe pairs", "a40_pairwise_nvlink": "A40 pairs"}

        def label(c: str) -> str:
            folder, op, n, _, per = c.split()[:5]  # "a100_dgx all_reduce 16 GPUs, 8/node"
            per = per.split("/")[0]
            return f"{short.get(folder, folder)} {op} {int(n) // int(per)}x{per}"

        lines.append(md_table(["held out", "configuration (nodes x GPUs)", "mean (median) %"],
                              [[r["experiment"].replace("held-out ", ""), label(r["config"]),
                                f"{f(r['mean_abs_pct'])} ({f(r['median_abs_pct'])})"] for r in col]))
        bus = res.get("collectives", {}).get("bus_gbs", {})

        def gbs(key: str, q: str = "median") -> str:
            return f(bus.get(key, {}).get(q), 1)

        one = bus.get("a100_dgx all_reduce 2x1", {}).get("median")
        lines += ["", "Held out: *sizes*, every third size and the largest fifth of each configuration; *rank "
                  "count*, one configuration refitted without (1x4 from 1x2 and 1x8; 2x2, 2x4, 2x8 each from the "
                  "other two); *node type*, a PCIe server from the DGX fit and its spec sheet (across nodes, from "
                  "the other server's fit).  Measured all-reduce bus bandwidth across 2 DGX nodes (median, >= 8 "
                  f"MiB): {gbs('a100_dgx all_reduce 2x1')} GB/s with 1 GPU per node, {gbs('a100_dgx all_reduce 2x4')} "
                  f"with 4, {gbs('a100_dgx all_reduce 2x8')} with 8 (8 NICs at the 1-GPU rate would give "
                  f"{f(8 * one, 1) if one else '-'}: a limit of that cluster); 2 per node switch between "
                  f"{gbs('a100_dgx all_reduce 2x2', 'p10')} and {gbs('a100_dgx all_reduce 2x2', 'p90')} GB/s.  "
                  f"The A40 pair's send/recv ran at {gbs('a40_pairwise_nvlink send_recv 1x2')} GB/s, far below its "
                  "56.25 GB/s NVLink bridge (NCCL's host-memory path, most likely): no spec sheet predicts it; a "
                  "measured node type answers with its own fitted link." + _socket_note(res), ""]
    dm = res.get("dataparallel-measured-compute", {}).get("table", [])
    if dm:
        lines += ["**torch.nn.DataParallel**, the several-GPU model alone (measured 1-GPU step + modelled "
                  "DataParallel cost; `gpu-benchmark/`, 32 torchvision CNNs, batch 12 per GPU, fp32 and fp16 "
                  "(`model.half()`); constants fitted on the TITAN Xp, the RTX 2080 Ti held out):", ""]
        held = [r for r in dm if r["split"] != "fitted on"]
        lines.append(md_table(["phase", "precision", "GPUs", "mean", "median", "within 10 %"],
                              [[r["phase"], r["precision"], r["gpus"], f(r["mean_abs_pct"]) + " %",
                                f(r["median_abs_pct"]) + " %", f(100 * r["within_10pct"], 0) + " %"] for r in held]))
        fitted = [r["mean_abs_pct"] for r in dm if r["split"] == "fitted on"]
        if fitted:
            lines.append(f"\nRTX 2080 Ti, 32 models a row; on the TITAN Xp (fitted): "
                         f"{min(fitted):.1f}-{max(fitted):.1f} % mean.")
        lines += ["The TITAN Xp's fp32 4-GPU runs take up to 3 times their 3-GPU time (a disturbed run); "
                  "the fit down-weights them.", ""]
    e2e = res.get("dataparallel-end-to-end", {}).get("rows", [])
    ok = [r for r in e2e if r.get("rel_err") is not None]
    if ok:
        lines += ["**DataParallel end to end** (`perfseer.predict(torchvision:NAME, device=GPU, gpus=N, "
                  "parallel='dataparallel', node='pcie-4', basis='spec')`, fp32; the 1-GPU rows are the "
                  "single-GPU spec model alone):", ""]
        tab = []
        counts = sorted({r["gpus"] for r in ok})
        for gpu, phase in sorted({(r["gpu"], r["phase"]) for r in ok}):
            cells = []
            for n in counts:
                errs = np.abs([r["rel_err"] for r in ok if (r["gpu"], r["phase"], r["gpus"]) == (gpu, phase, n)])
                cells.append(f"{100 * errs.mean():.1f} / {100 * np.median(errs):.1f} %" if len(errs) else "-")
            tab.append([gpu, phase, *cells])
        lines.append(md_table(["GPU", "phase", *[f"{n} GPU{'s' if n > 1 else ''}: mean / median" for n in counts]],
                              tab))
        failed = [r for r in e2e if r.get("error")]
        if failed:
            lines.append(f"\n{len(failed)} rows not answered (first: {failed[0]['error']}).")
        lines.append("")
    mg = res.get("megatron", {}).get("rows", [])
    if mg:
        lines += ["**Megatron-LM** (Narayanan et al. SC21, Table 1; DGX A100 nodes, amp-fp16, spec-model "
                  "per-GPU compute): the step implied by the published per-GPU TFLOP/s against ours.", ""]
        lines.append(md_table(["model", "layout", "global batch", "published TFLOP/s/GPU", "published step",
                               "predicted step", "compute", "comm", "bubble", "error"],
                              [[f"{r['params_b']} B", r["layout"], r["batch"], r["published_tflops"],
                                f(r["published_ms"], 0) + " ms", f(r["predicted_ms"], 0) + " ms",
                                f(r["compute_ms"], 0), f(r["comm_ms"], 0), f(r["bubble_ms"], 0),
                                _pct(r["rel_err"])] for r in mg]))
        lines.append("")
    af = res.get("activation-formula", {}).get("rows", [])
    if af:
        lines += ["**Activation memory against Megatron's formula** (Korthikanti et al. 2022: per layer "
                  "`s b h (34 + 5 a s / h)` bytes, the second term the attention matrices, which fused "
                  "attention does not keep; the whole model in 16 bits): `perfseer memory hf:gpt2` (batch 1, "
                  "AdamW), the activations' own peak in the simulated step.  Under autocast (amp-fp16) the "
                  "residual stream, the norms and the softmax stay in fp32, which the formula does not "
                  "count.", ""]
        lines.append(md_table(["attention", "precision", "tokens", "simulated", "formula + logits", "ratio"],
                              [[r["attention"], r["precision"], r["seq"], f(r["simulated_activation_bytes"] / 2**20) + " MiB",
                                f((r["formula_layers_bytes"] + r["formula_logits_bytes"]) / 2**20) + " MiB",
                                f(r["simulated_activation_bytes"] / (r["formula_layers_bytes"]
                                                                     + r["formula_logits_bytes"]), 2)]
                               for r in af if r.get("simulated_activation_bytes")]))
        lines.append("")
    zf = res.get("zero-formula", {}).get("rows", [])
    if zf:
        psi = zf[0]["psi"]
        lines += [f"**Model states against ZeRO** (Rajbhandari et al. 2020, Figure 1: 7.5 B parameters, 64 GPUs, "
                  f"mixed-precision Adam, K = 12): Megatron's 7.5 B GPT ({psi / 1e9:.2f} B parameters), amp-fp16, "
                  "AdamW, each state's simulated peak divided as `perfseer memory --gpus 64 --parallel ...` "
                  "divides it.  ZeRO: DeepSpeed's layout; DDP: PyTorch's (fp32 parameters and gradients, autocast "
                  "copies, a gradient bucket copy), not the paper's baseline; ZeRO-3 keeps two layers gathered "
                  "(prefetch), which the formula leaves out.", ""]
        lines.append(md_table(["layout", "paper (7.5 B)", "formula", "perfseer", "difference"],
                              [[r["layout"], f(r["paper_gb"], 1) + " GB", f(r["formula_bytes"] / 1e9, 2) + " GB",
                                f(r["perfseer_bytes"] / 1e9, 2) + " GB", _pct(r["rel_err"])] for r in zf]))
        lines.append("")
    at = res.get("activation-tp-formula", {})
    if at.get("rows"):
        sh = at["shape"]
        lines += ["**Activations per tensor-parallel rank against Korthikanti et al.** (2022, Table 2: per layer "
                  "`s b h (10 + 24/t + 5 a s / (h t))`, sequence parallel `s b h (34 + 5 a s / h) / t`, full "
                  "recomputation `2 s b h`; 16-bit): a GPT with hidden {hidden}, {layers} layers, {heads} heads, "
                  "{seq} tokens, explicit attention, fp16, batch 1; perfseer's simulated single-GPU activations "
                  "divided as `perfseer memory --tp T` divides them, against the formula times the layers plus "
                  "the logits split over the vocabulary (and, with recomputation, the layer being recomputed).  "
                  "HF's explicit attention keeps more per layer than Megatron's fused kernels.".format(**sh), ""]
        variants = [(False, False, "plain"), (True, False, "sequence parallel"), (False, True, "recompute"),
                    (True, True, "sequence parallel + recompute")]

        def cell(t, sp, rc) -> str:
            r = next((r for r in at["rows"] if r["t"] == t and bool(r["sequence_parallel"]) == sp
                      and bool(r["recompute"]) == rc), None)
            if r is None:
                return "-"
            return (f"{f(r['perfseer_bytes'] / 2**20, 0)} / {f((r['formula_bytes'] + r['formula_logits_bytes']) / 2**20, 0)}"
                    f" MiB ({_pct(r['rel_err'])})")

        tps = sorted({r["t"] for r in at["rows"]})
        lines.append("Each cell: perfseer / formula + logits, MiB (difference).\n")
        lines.append(md_table(["TP", *[v[2] for v in variants]],
                              [[t, *[cell(t, sp, rc) for sp, rc, _ in variants]] for t in tps]))
        plain = [r["rel_err"] for r in at["rows"] if not r["recompute"]]
        lines.append(f"\nWithout recomputation the difference is {_pct(min(plain))} to {_pct(max(plain))} whatever the "
                     "TP degree: the shares follow the formula; the difference is the single-GPU simulation's.")
        lines.append("")
    bf = res.get("bubble-formula", {}).get("rows", [])
    if bf:
        lines += ["**1F1B bubble against Megatron's `(p - 1) / m`** (`perfseer.predict(hf:gpt2, gpus=4, "
                  "parallel='pp', microbatches=m, node='dgx-a100')`, amp-fp16): the bubble over the compute "
                  "time.", ""]
        lines.append(md_table(["stages", "microbatches", "compute", "bubble", "perfseer", "formula", "difference"],
                              [[r["p"], r["m"], f(r["compute_ms"], 1) + " ms", f(r["bubble_ms"], 1) + " ms",
                                f(r["perfseer_share"], 3), f(r["formula_share"], 3), _pct(r["rel_err"])]
                               for r in bf]))
        lines.append("")
    lines.append(timing_note(res))
    return "\n".join(lines)


SUITE = Suite(name="parallel", description="several GPUs: collectives on held-out NCCL data, DataParallel on "
                                           "2-4 GPUs, Megatron-LM layouts, ZeRO / Megatron / 1F1B formulas",
              reads="datasets vidur/profiling/network, gpu-benchmark", time_full="~40 min", time_quick="~8 min",
              steps=steps, render=render)
