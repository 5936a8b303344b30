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
activations          TP: ``(10 + (24 + r)/t)/(34 + r)`` of them (Megatron's per-layer
                     ``s b h (34 + r)``, ``r = 5 a s / h`` the attention's score matrices where
                     it keeps them, else 0; the ``24 + r`` inside the split blocks divided;
                     sequence parallel: ``1/t``); 1F1B: the first stage holds ``pp``
                     microbatches of ``1/pp`` of the layers (x1); GPipe: all ``m`` (x
                     ``m/pp``); checkpointing: each layer's input (``2 s b h`` of ``34 + r``,
                     whole on every TP rank, ``1/t`` with sequence parallelism) plus one layer
                     recomputed (``1/L`` of the TP rank's share); a language model's logits (and
                     the loss's fp32 copies) are not a layer's: ``1/t`` (vocab-parallel),
                     kept under checkpointing, GPipe: ``m`` microbatches
input, transient,    unchanged
workspace, context
===================  ===========================================================================

With DeepSpeed's ZeRO stages under mixed precision (``amp-*``) the states are laid out as
DeepSpeed does, not as PyTorch autocast does (:func:`deepspeed_mixed_precision`): 16-bit
parameters (``2 psi``) and gradients (``2 psi``), the fp32 master copy in the optimizer state
(``12 psi`` with Adam: ZeRO's ``K = 12``).

(Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022, for
the activation shares; Rajbhandari et al., "ZeRO", 2020, for the states.)  The published
formulas themselves are :func:`megatron_activation_bytes` and :func:`zero_model_state_bytes`
(the benchmark suite ``parallel`` compares them with this module's answers).
"""

from __future__ import annotations

from perfseer.parallel.plan import ModelFacts, ParallelError, Plan

#: Megatron's activation bytes per layer, in units of ``s b h``: 34 (10 outside the TP-split blocks)
_ACT_TOTAL, _ACT_UNSPLIT, _ACT_INPUT = 34.0, 10.0, 2.0


def attention_term(facts: ModelFacts) -> float:
    """``5 a s / h``: the attention's score matrices in Megatron's per-layer activation bytes (units
    of ``s b h``), 0 when the attention does not keep them (fused) or the shape is unknown."""
    if not (facts.attention_scores and facts.heads and facts.seq_len and facts.hidden):
        return 0.0
    return 5.0 * facts.heads * facts.seq_len / facts.hidden


def megatron_activation_bytes(s: int, b: int, h: int, a: int, layers: int, t: int = 1, *,
                              sequence_parallel: bool = False, recompute: bool = False,
                              scores: bool = True) -> float:
    """Korthikanti et al. (2022), Table 2: activation bytes of ``layers`` transformer layers on one
    tensor-parallel rank, 16-bit activations: ``s b h (10 + 24/t + 5 a s / (h t))`` per layer;
    with sequence parallelism ``s b h (34 + 5 a s / h) / t``; full recomputation ``2 s b h``
    (``/t`` with sequence parallelism); ``scores=False``: without the ``5 a s / h`` term (fused
    attention keeps no score matrices)."""
    r = 5.0 * a * s / h if scores else 0.0
    if recompute:
        per = 2.0 / (t if sequence_parallel else 1)
    elif sequence_parallel:
        per = (34.0 + r) / t
    else:
        per = 10.0 + (24.0 + r) / t
    return float(s * b * h * per * layers)


def zero_model_state_bytes(psi: float, nd: int, stage: int, k: float = 12.0) -> float:
    """Rajbhandari et al. (2020), Figure 1: model-state bytes per GPU with ``psi`` parameters over
    ``nd`` data-parallel GPUs, mixed-precision Adam (16-bit parameters and gradients, ``k`` bytes of
    optimizer state per parameter: fp32 master, momentum, variance): stage 0 (plain data
    parallel) ``(2 + 2 + k) psi``, 1 ``(2 + 2) psi + k psi / nd``, 2 ``2 psi + (2 + k) psi / nd``,
    3 ``(2 + 2 + k) psi / nd``."""
    if stage == 0:
        return (4.0 + k) * psi
    if stage == 1:
        return 4.0 * psi + k * psi / nd
    if stage == 2:
        return 2.0 * psi + (2.0 + k) * psi / nd
    if stage == 3:
        return (4.0 + k) * psi / nd
    raise ValueError(f"ZeRO stage {stage!r}: use 0, 1, 2 or 3")


def deepspeed_mixed_precision(parts: dict[str, int]) -> dict[str, int]:
    """A PyTorch-autocast step's states as DeepSpeed lays them out under mixed precision: the model
    in 16 bits (fp32 ``weights`` halved, no autocast ``weight_casts``), 16-bit ``gradients`` (halved),
    and the fp32 master weights in ``optimizer_state`` (Adam: ``4 + 8 = 12`` bytes a parameter)."""
    out = dict(parts)
    w32 = parts.get("weights", 0)
    out["weights"] = w32 // 2
    if "weight_casts" in out:
        out["weight_casts"] = 0
    if "gradients" in out:
        out["gradients"] = parts["gradients"] // 2
    out["optimizer_state"] = parts.get("optimizer_state", 0) + w32
    return out


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
    r = attention_term(facts)
    a_tp = 1.0
    if plan.tp > 1:
        a_tp = 1.0 / plan.tp if plan.sequence_parallel else \
            (_ACT_UNSPLIT + (_ACT_TOTAL - _ACT_UNSPLIT + r) / plan.tp) / (_ACT_TOTAL + r)
    held = plan.microbatches / plan.pp if plan.pp > 1 and plan.schedule == "gpipe" else 1.0
    if phase != "train":
        held = 1.0 / plan.pp  # inference: one microbatch's activations on a stage
    if checkpoint and phase == "train":
        if not facts.layers:
            raise ParallelError(f"activation checkpointing is modelled per transformer layer; {facts.name} has no "
                                "known layers", "drop --checkpoint, or use an hf: model")
        # each layer's input kept (whole on every TP rank, split along the sequence with sequence
        # parallelism), one layer's activations recomputed at a time
        kept = (_ACT_INPUT / (_ACT_TOTAL + r)) * (1.0 / plan.tp if plan.sequence_parallel else 1.0)
        a = kept * held + a_tp / facts.layers
    else:
        a = a_tp * held
    if phase != "train":
        g = o = 0.0
    # the LM head's logits and the loss's fp32 copies: split over the vocabulary by TP (Megatron's
    # vocab-parallel cross-entropy), on the last stage (GPipe: every microbatch's), never recomputed
    logits = (1.0 / plan.tp) * (plan.microbatches if plan.pp > 1 and plan.schedule == "gpipe" and phase == "train"
                                else 1.0)
    return {"weights": w, "weight_casts": w, "gradients": g, "optimizer_state": o, "activations": a,
            "logits": logits, "input": 1.0, "transient": 1.0, "workspace": 1.0, "allocator_overhead": 1.0,
            "context": 1.0}


def logits_bytes(facts: ModelFacts, microbatch: int, precision: str = "fp32") -> int:
    """Bytes of a language model's logits in a training step at ``microbatch`` samples: the logits
    in the compute dtype, their fp32 copy for the loss and its log-softmax (16-bit: 2 + 4 + 4 bytes
    a logit; fp32: 4 + 4); 0 for a model without an LM head or a known vocabulary."""
    if not (facts.lm_logits and facts.vocab and facts.seq_len):
        return 0
    per = 10 if precision in ("fp16", "bf16", "amp-fp16", "amp-bf16") else 8
    return int(microbatch * facts.seq_len * facts.vocab * per)


def shard(breakdown: dict[str, int], plan: Plan, facts: ModelFacts, phase: str = "train",
          checkpoint: bool = False, category_peaks: dict[str, int] | None = None, logits: int = 0) -> dict[str, int]:
    """One GPU's share under ``plan`` of a single-GPU step's memory (category -> bytes, on one GPU
    running the whole model at the per-GPU microbatch).

    The simulated peak is either in the backward pass (activations live) or in the optimizer
    step (activations freed, the optimizer's temporaries in ``transient``).  Sharding moves the
    peak, so both are divided and the larger is returned: the breakdown at the simulated peak
    (``transient`` divided as the optimizer state when no activation is live there, else as the
    activations) and, from ``category_peaks``, the end of the forward pass (weights, optimizer
    state kept from the previous step, every activation).  ``logits``: the bytes of the
    activations that are the LM head's logits (:func:`logits_bytes`), divided as logits, not as a
    layer's activations.
    """
    f = factors(plan, facts, phase, checkpoint)
    live = breakdown.get("activations", 0)
    top = (category_peaks or {}).get("activations", live)
    in_optimizer = phase == "train" and top > 0 and live < 0.01 * top

    def acts(total: int) -> float:  # the activations' factor with ``total`` live, the logits among them
        lg = min(logits, total)
        return (f["activations"] * (total - lg) + f["logits"] * lg) / total if total > 0 else f["activations"]

    ft = dict(f, activations=acts(live))
    ft["transient"] = f["optimizer_state"] if in_optimizer else ft["activations"]
    at_peak = _divide(breakdown, ft)
    if not category_peaks or phase != "train":
        return at_peak
    fwd = {k: breakdown.get(k, 0) for k in ("weights", "weight_casts", "input", "workspace", "context")}
    fwd["optimizer_state"] = max(breakdown.get("optimizer_state", 0), category_peaks.get("optimizer_state", 0))
    fwd["activations"] = top
    fwd["allocator_overhead"] = breakdown.get("allocator_overhead", 0)
    end_fwd = _divide(fwd, dict(f, activations=acts(top)))
    return at_peak if sum(at_peak.values()) >= sum(end_fwd.values()) else end_fwd


def _divide(parts: dict[str, int], f: dict[str, float]) -> dict[str, int]:
    out = {k: int(round(v * f.get(k, 1.0))) for k, v in parts.items()}
    if "allocator_overhead" in parts:  # the cache's slack scales with what it holds
        before = sum(v for k, v in parts.items() if k not in ("allocator_overhead", "context"))
        after = sum(v for k, v in out.items() if k not in ("allocator_overhead", "context"))
        out["allocator_overhead"] = int(parts["allocator_overhead"] * (after / before if before else 1.0))
    return out
