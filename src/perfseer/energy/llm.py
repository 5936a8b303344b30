"""The work of one LLM decoding step, for the power model: FLOPs and bytes per GPU.

A decoding step of a dense transformer at batch ``B`` (sequences decoding together) with a mean
context of ``L`` tokens per sequence, on ``gpus`` GPUs (tensor or pipeline parallel: each holds
and computes ``1/gpus`` of the model):

- FLOPs: ``2 N_active B`` for the weights (one multiply-add per active parameter and token) plus
  ``4 B L d_attn n_layers`` for attention (scores and weighted values over the context);
- bytes: every weight once (``N_total x weight_bytes``: at a serving batch every expert of a
  mixture of experts is touched) plus the KV cache read once
  (``B L x 2 n_layers n_kv_heads head_dim x kv_bytes``).

The prompt's prefill, the sampler and the scheduler are not in it: energy per output token
measured on a serving system includes them, which the fitted constants absorb
(docs/guide/energy.md says how well).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfseer.errors import PerfseerError


@dataclass(frozen=True)
class DecodeWork:
    """One decoding step's FLOPs and bytes on each GPU."""

    flops: float
    bytes: float


def decode_work(params: float, layers: int, kv_heads: int, head_dim: int, d_attn: int, batch: float,
                context: float, gpus: int = 1, active_params: float | None = None,
                weight_bytes: float = 2.0, kv_bytes: float = 2.0) -> DecodeWork:
    """:class:`DecodeWork` per GPU of one decoding step (see the module doc).

    Args:
        params: parameters of the model (all experts), count.
        layers, kv_heads, head_dim: the transformer's layers, key/value heads and head size.
        d_attn: query heads x head size.
        batch: sequences decoding in the step.
        context: mean tokens in each sequence's KV cache.
        gpus: GPUs the model is split over (tensor x pipeline parallel).
        active_params: parameters each token uses (a mixture of experts' active share; default
            ``params``).
        weight_bytes, kv_bytes: bytes per weight and per cached element (2: bf16/fp16).

    Raises:
        PerfseerError: a count that is not positive.
    """
    for name, v in (("params", params), ("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                    ("d_attn", d_attn), ("batch", batch), ("context", context), ("gpus", gpus)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise PerfseerError(f"decode_work: {name} must be a positive number, got {v!r}",
                                f"pass the model's {name}")
    active = params if active_params is None else active_params
    flops = 2.0 * active * batch + 4.0 * batch * context * d_attn * layers
    bytes_ = params * weight_bytes + batch * context * 2.0 * layers * kv_heads * head_dim * kv_bytes
    return DecodeWork(flops=flops / gpus, bytes=bytes_ / gpus)


def decode_energy(device, tpot_ms: float, work: DecodeWork, batch: int, gpus: int = 1, *, precision: str = "bf16",
                  util: float | None = None, power_limit_w: float | None = None) -> dict:
    """Energy of an LLM decoding step on ``gpus`` GPUs of ``device``, per output token.

    Args:
        device: a registry GPU.
        tpot_ms: the step's time (the time per output token), ms.
        work: one GPU's FLOPs and bytes of the step (:func:`decode_work`).
        batch: sequences in the step (each emits one token).
        gpus: GPUs the model is split over (each draws the power of one).
        precision: the weights' arithmetic (``bf16``, ``fp16``, ``fp8``...).
        util: the share of the step with a kernel running where known; default: the serving
            utilisation of the fitted constants, ``min(1, kappa x roofline time / tpot)`` (a
            serving engine's step is mostly time its kernels do not run at their roofline:
            scheduling, sampling, launches).

    Returns:
        ``{"power_w"`` (per GPU), ``"energy_j"`` (the step, all GPUs), ``"energy_j_per_token"``,
        ``"util_pct"``, ``"latency_ms"``, ``"notes"}``.
    """
    from perfseer.devices import get_device
    from perfseer.energy.activity import activity_from_totals
    from perfseer.energy.power import EnergyError, constants, step_energy

    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise EnergyError(f"batch must be an integer >= 1, got {batch!r}", "pass the sequences decoding together")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise EnergyError(f"gpus must be an integer >= 1, got {gpus!r}", "pass the tensor x pipeline parallel degree")
    if isinstance(tpot_ms, bool) or not isinstance(tpot_ms, (int, float)) or not tpot_ms > 0:
        raise EnergyError(f"tpot_ms must be a positive number, got {tpot_ms!r}", "pass the time per output token")
    spec = get_device(device) if isinstance(device, str) else device
    roof_ms = max(work.flops / (spec.peak(precision) * 1e12), work.bytes / (spec.mem_bandwidth_gbs * 1e9)) * 1000
    s = constants()["power"]
    u = util if util is not None else min(s["u_max_serving"], s["kappa_serving"] * roof_ms / tpot_ms)
    act = activity_from_totals(u * tpot_ms, work.flops, work.bytes, spec, precision)
    e = step_energy(spec, float(tpot_ms), act, batch=batch, util=u, power_limit_w=power_limit_w)
    return {"power_w": e.power_w, "energy_j": e.energy_j * gpus, "energy_j_per_token": e.energy_j * gpus / batch,
            "util_pct": e.util_pct, "latency_ms": e.latency_ms, "notes": e.notes}
