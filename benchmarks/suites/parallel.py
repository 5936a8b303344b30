"""Several GPUs: the collective model on held-out NCCL measurements, ``torch.nn.DataParallel`` step
times on 2-4 GPUs, and multi-GPU transformer training against Megatron-LM's published throughput.

**Collectives** (``vidur/profiling/network``): :func:`perfseer.fit.collectives.validate`, i.e. the
constants refitted without the held-out rows: every third message size and the largest fifth of
each configuration; the 4-GPU DGX all-reduce (fitted on 2 and 8); the 2-nodes x 4-GPU all-reduce
(fitted on 2x1, 2x2, 2x8); the A100 PCIe and A40 servers predicted from the DGX fit and their spec
sheets.

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
    from perfseer.fit.collectives import load, validate

    return {"table": validate(load())}


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


def steps(ctx: Context) -> list[Step]:
    return [Step("collectives", collectives_step),
            Step("dataparallel-measured-compute", dataparallel_measured_step),
            Step("dataparallel-end-to-end", lambda: dataparallel_end_to_end(ctx.quick)),
            Step("megatron", lambda: megatron_step(ctx.quick)),
            Step("activation-formula", lambda: activation_formula_step(ctx.quick))]


def _pct(v):
    return "-" if v is None else f"{100 * v:.1f} %"


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

        lines.append(md_table(["held out", "configuration (nodes x GPUs)", "mean", "median"],
                              [[r["experiment"].replace("held-out ", ""), label(r["config"]),
                                f(r["mean_abs_pct"]) + " %", f(r["median_abs_pct"]) + " %"] for r in col]))
        lines += ["", "Node types predicted from the DGX fit and spec sheets miss where the links were not "
                  "what the sheet says (the A40 pair moved 4 GB/s over a 56 GB/s bridge) and across nodes, "
                  "whose network the source does not name (25 GbE assumed).", ""]
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
    lines.append(timing_note(res))
    return "\n".join(lines)


SUITE = Suite(name="parallel", description="several GPUs: collectives on held-out NCCL data, DataParallel on "
                                           "2-4 GPUs, Megatron-LM layouts",
              reads="datasets vidur/profiling/network, gpu-benchmark", time_full="~40 min", time_quick="~8 min",
              steps=steps, render=render)
