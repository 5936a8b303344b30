"""A measured training card outside its step domain: anchored on the card or the spec model alone.

Step ``ratio``: :mod:`benchmarks.lib.step_anchor` on the any-GPU suite's leave-one-GPU-out
predictions (``python -m benchmarks run any-gpu`` first: its ``logo.json``): every step measured at
two or more batch sizes on one GPU, the batch ratio of the held-out GPU's predictions against the
measured one (``card(b*) x spec(b)/spec(b*)`` with the measured time standing for the card, against
``spec(b)``).  Step ``card``: the shipped RTX 3090 training card's step domain (its own rows inside)
and what ``perfseer.predict`` answers for ResNet-34 and ResNet-50 on the RTX 3090 (train) at batch
1-512, with the card (``--basis measured``), the route and the spec model (``--basis spec``).
"""

from __future__ import annotations

import json

from benchmarks.lib import step_anchor
from benchmarks.runner import BenchError, Context, Step, Suite, f, md_table

CARD = "rtx3090-amp-nchw-pt112.train"
PROBES = ("timm:resnet34", "timm:resnet50")
BATCHES = (1, 16, 64, 256, 512)


def _ratio(ctx: Context) -> dict:
    path = ctx.work.parent / ("any-gpu-quick" if ctx.quick else "any-gpu") / "logo.json"
    if not path.exists():
        raise BenchError(f"no {path}: run `python -m benchmarks run any-gpu{' --quick' if ctx.quick else ''}` first")
    return step_anchor.summary(json.loads(path.read_text()))


def _card(ctx: Context) -> dict:
    import perfseer
    from perfseer import load_predictor

    step = load_predictor(CARD).card["domain"]["step"]
    probes = []
    for m in PROBES:
        for basis in ("measured", "auto", "spec"):
            rows = perfseer.predict(m, device="rtx3090", phase="train", batch=list(BATCHES), basis=basis,
                                    precision="amp-fp16")
            for r in rows:
                probes.append({"model": m, "basis_asked": basis, "batch": r["batch_size"], "value": r["value"],
                               "basis": r.get("basis"), "outside_step": bool(r.get("outside_step")),
                               "fallback": bool(r.get("fallback_from"))})
    return {"step": step, "probes": probes}


ZOO = ("timm:resnet50", "torchvision:resnet34", "timm:efficientnet_b0", "timm:vit_base_patch16_224",
       "timm:convnext_tiny", "torchvision:densenet121")
TIMM_CARDS = (("rtx3090-amp-nchw-pt240.infer", "rtx3090"), ("rtx4090-amp-nchw-pt291.infer", "rtx4090"),
              ("rtx5090-amp-nchw-pt291.infer", "rtx5090"), (CARD, "rtx3090"))


def _elasticity(ctx: Context) -> dict:
    """How each timm card's answer grows from batch 16 to 256 (log t(256)/t(16) / log 16; 1: linear),
    beside the spec model's on the same GPU and phase: does the card follow the batch?"""
    import math
    import warnings

    import perfseer

    out = []
    for card, dev in TIMM_CARDS:
        phase = "train" if card.endswith(".train") else "infer"
        for m in ZOO:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                c = perfseer.predict(m, predictor=card, batch=[16, 256])
                s = perfseer.predict(m, device=dev, basis="spec", precision="amp-fp16", phase=phase, batch=[16, 256])
            out.append({"card": card, "model": m, "card_e": math.log(c[1]["value"] / c[0]["value"], 16),
                        "spec_e": math.log(s[1]["value"] / s[0]["value"], 16)})
    return {"rows": out}


def steps(ctx: Context) -> list[Step]:
    return [Step("ratio", lambda: _ratio(ctx)), Step("card", lambda: _card(ctx)),
            Step("elasticity", lambda: _elasticity(ctx))]


def render(ctx: Context, res: dict[str, dict]) -> str:
    r, c, e = res["ratio"], res["card"], res["elasticity"]
    g = r["groups"]
    table = []
    for name, label in (("train", "train"), ("infer", "infer (NeuSight transformers)"),
                        ("infer-nb201", "infer (NAS-Bench-201 cells)")):
        if name in g:
            x = g[name]
            table.append([label, x["steps"], x["pairs"], len(x["gpus"]), f(x["anygpu"]["plain_mape"]),
                          f(x["anygpu"]["anchored_mape"]), f(x["spec"]["plain_mape"]), f(x["spec"]["anchored_mape"])])
    won = [p for p in r["per_gpu"] if p["anygpu_anchored"] < p["anygpu_plain"]]
    st, mem = c["step"], c["step"]["memory"]
    ho = mem["fit"]["holdout"]
    probe = {(p["model"], p["basis_asked"], p["batch"]): p["value"] for p in c["probes"]}
    ptab = [[m.split(":")[1]] + [" / ".join(f(probe.get((m, k, b)), 0) for k in ("measured", "auto", "spec"))
                                 for b in BATCHES] for m in PROBES]
    return ("## A training card outside its step domain\n\n"
            f"`python -m benchmarks run step-anchor` (after `any-gpu`). Steps measured at 2+ batch sizes on one GPU "
            "(NeuSight, NAS-Bench-201), predicted with that GPU held out (any-GPU model; kernel spec model zero-shot): MAPE of "
            "*anchored* t(b\\*) x p(b)/p(b\\*) (measured t(b\\*) standing for the card) against *plain* p(b), over every "
            f"ordered pair; anchored wins on {len(won)} of {len(r['per_gpu'])} (GPU, phase) groups. A card's error at b\\* "
            "adds to *anchored*; its interval widens by the training pairs' 90 % |log ratio error|: "
            f"{f(g['train']['anygpu']['ratio_q90'], 2)} here, {f(_shipped_q90(), 2)} in the runtime "
            "(`python -m benchmarks.lib.step_anchor LOGO --write`). The route anchors (`perfseer.runtime.anchor`): as good on the training pairs, better on "
            "the transformers, worse only on NAS-Bench-201 cells, outside the card's model space.\n\n"
            + md_table(["phase", "steps", "pairs", "GPUs", "any-GPU plain %", "anchored %", "kernel spec plain %",
                        "anchored %"], table)
            + f"\n\nThe RTX 3090's own training rows, held out: any-GPU {f(r['rtx3090_train']['anygpu_plain_mape'])} % "
            "MAPE at the measured batch, against the card's 6.1 % k-fold. Shipped card `" + CARD + "`: "
            f"{100 * st['inside']:.1f} % of its {st['rows']} rows inside its step domain "
            f"(by headroom band: " + ", ".join(f"{2 ** b['range'][0]:.2g}-{2 ** b['range'][1]:.2g}x" for b in st["bands"])
            + f" min({st['top']}, largest batch that fits)); the memory "
            f"estimate's largest batch vs the simulator's, 2-fold over {ho['models']} models: median "
            f"{2 ** ho['median_abs_log2']:.2f}x off. The RTX 3090, train, amp-fp16, ms: card (`--basis measured`) / "
            "route / spec model (`--basis spec`):\n\n"
            + md_table(["model"] + [f"batch {b}" for b in BATCHES], ptab)
            + "\n\nWhich timm cards need a step domain: growth of the answer from batch 16 to 256 (log t(256)/t(16) "
            f"/ log 16), card / spec model, range over {len(ZOO)} zoo CNNs and ViTs: "
            + "; ".join(f"`{c}` {_span(e, c, 'card_e')} / {_span(e, c, 'spec_e')}" for c, _ in TIMM_CARDS) + ".")


def _shipped_q90() -> float:
    from perfseer.runtime import anchor

    return anchor.RATIO_Q90


def _span(res: dict, card: str, key: str) -> str:
    v = [r[key] for r in res["rows"] if r["card"] == card]
    return f"{min(v):.2f}-{max(v):.2f}"


SUITE = Suite(
    name="step-anchor",
    description="a training card outside its step domain: anchored on the card vs the spec model alone",
    reads="the any-gpu suite's logo.json; src/perfseer/predictors/rtx3090-amp-nchw-pt112.train.json",
    time_full="~1 min (after any-gpu)", time_quick="~1 min (after any-gpu --quick)",
    steps=steps, render=render)
