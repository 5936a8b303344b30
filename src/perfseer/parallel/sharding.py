"""Memory per GPU under a several-GPU plan: the single-GPU step's breakdown with each category
divided as the strategy divides it.

From the simulated single-GPU step at the per-GPU microbatch (``perfseer memory``'s breakdown at
the peak, bytes), with ``mp = tp x pp`` and ``d = dp``:

===================  ===========================================================================
category             per GPU
===================  ===========================================================================
weights, casts       ``/mp``; ZeRO-3 / FSDP ``/(mp d)`` plus two layers gathered whole (prefetch)
gradients            ``/mp``; ZeRO-2/3, FSDP ``/(mp d)``; DDP keeps a bucket copy (x2)
optimizer state      ``/mp``; ZeRO-1/2/3, FSDP ``/(mp d)``
activations          TP: ``(10 + 24/t)/34`` of them (Megatron's per-layer ``34 s b h``, the
                     ``24 s b h`` inside the split blocks divided; sequence parallel: ``1/t``);
                     1F1B: the first stage holds ``pp`` microbatches of ``1/pp`` of the layers
                     (x1); GPipe: all ``m`` (x ``m/pp``); checkpointing: each layer's input
                     (``2 s b h`` of 34) plus one layer recomputed (``1/L``)
input, transient,    unchanged
workspace, context
===================  ===========================================================================

(Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, for
the activation shares; Rajbhandari et al., "ZeRO", 2020, for the states.)
"""

from __future__ import annotations

from perfseer.parallel.plan import ModelFacts, ParallelError, Plan

#: Megatron's activation bytes per layer, in units of ``s b h``: 34 (10 outside the TP-split blocks)
_ACT_TOTAL, _ACT_UNSPLIT, _ACT_INPUT = 34.0, 10.0, 2.0


def factors(plan: Plan, facts: ModelFacts, phase: str = "train", checkpoint: bool = False) -> dict[str, float]:
    """The factor each breakdown category is multiplied by on one GPU."""
    mp, d = plan.tp * plan.pp, plan.dp
    full = plan.flavour in ("zero3", "fsdp")
    w = 1.0 / mp
    if full and d > 1:
        units = (facts.layers // plan.pp) if facts.layers else 8
        w = 1.0 / (mp * d) + min(1.0, 2.0 / max(units, 1)) / mp  # the shard, plus two units gathered
    g = 1.0 / mp
    if plan.flavour in ("zero2", "zero3", "fsdp") and d > 1:
        g = 1.0 / (mp * d)
    elif plan.flavour == "ddp" and d > 1 and phase == "train":
        g = 2.0 / mp  # DDP's buckets hold a copy of the gradients (gradient_as_bucket_view=False)
    o = 1.0 / mp / (d if plan.flavour in ("zero1", "zero2", "zero3", "fsdp") else 1)
    a_tp = 1.0
    if plan.tp > 1:
        a_tp = 1.0 / plan.tp if plan.sequence_parallel else \
            (_ACT_UNSPLIT + (_ACT_TOTAL - _ACT_UNSPLIT) / plan.tp) / _ACT_TOTAL
    held = plan.microbatches / plan.pp if plan.pp > 1 and plan.schedule == "gpipe" else 1.0
    if phase != "train":
        held = 1.0 / plan.pp  # inference: one microbatch's activations on a stage
    if checkpoint and phase == "train":
        if not facts.layers:
            raise ParallelError(f"activation checkpointing is modelled per transformer layer; {facts.name} has no "
                                "known layers", "drop --checkpoint, or use an hf: model")
        a = a_tp * (_ACT_INPUT / _ACT_TOTAL) * held + a_tp / facts.layers  # layer inputs kept, one layer recomputed
    else:
        a = a_tp * held
    if phase != "train":
        g = o = 0.0
    return {"weights": w, "weight_casts": w, "gradients": g, "optimizer_state": o, "activations": a,
            "input": 1.0, "transient": 1.0, "workspace": 1.0, "allocator_overhead": 1.0, "context": 1.0}


def shard(breakdown: dict[str, int], plan: Plan, facts: ModelFacts, phase: str = "train",
          checkpoint: bool = False, category_peaks: dict[str, int] | None = None) -> dict[str, int]:
    """One GPU's share under ``plan`` of a single-GPU step's memory (category -> bytes, on one GPU
    running the whole model at the per-GPU microbatch).

    The simulated peak is either in the backward pass (activations live) or in the optimizer
    step (activations freed, the optimizer's temporaries in ``transient``).  Sharding moves the
    peak, so both are divided and the larger is returned: the breakdown at the simulated peak
    (``transient`` divided as the optimizer state when no activation is live there, else as the
    activations) and, from ``category_peaks``, the end of the forward pass (weights, optimizer
    state kept from the previous step, every activation).
    """
    f = factors(plan, facts, phase, checkpoint)
    live = breakdown.get("activations", 0)
    top = (category_peaks or {}).get("activations", live)
    in_optimizer = phase == "train" and top > 0 and live < 0.01 * top
    ft = dict(f, transient=f["optimizer_state"] if in_optimizer else f["activations"])
    at_peak = _divide(breakdown, ft)
    if not category_peaks or phase != "train":
        return at_peak
    fwd = {k: breakdown.get(k, 0) for k in ("weights", "weight_casts", "input", "workspace", "context")}
    fwd["optimizer_state"] = max(breakdown.get("optimizer_state", 0), category_peaks.get("optimizer_state", 0))
    fwd["activations"] = top
    fwd["allocator_overhead"] = breakdown.get("allocator_overhead", 0)
    end_fwd = _divide(fwd, f)
    return at_peak if sum(at_peak.values()) >= sum(end_fwd.values()) else end_fwd


def _divide(parts: dict[str, int], f: dict[str, float]) -> dict[str, int]:
    out = {k: int(round(v * f.get(k, 1.0))) for k, v in parts.items()}
    if "allocator_overhead" in parts:  # the cache's slack scales with what it holds
        before = sum(v for k, v in parts.items() if k not in ("allocator_overhead", "context"))
        after = sum(v for k, v in out.items() if k not in ("allocator_overhead", "context"))
        out["allocator_overhead"] = int(parts["allocator_overhead"] * (after / before if before else 1.0))
    return out
