"""Learned GPU memory, for the models the simulator cannot run.

The simulator (:mod:`perfseer.memory.step`) runs a model's step on fake tensors; a model with
data-dependent shapes, an operator without a fake kernel, or no PyTorch module at all cannot be
simulated.  Their memory comes from a predictor card trained on the simulator's own labels
(``datasets/memory_sim``, ``scripts/memory_labels.py``), split into two parts:

- the **persistent** bytes, computed exactly from the model (:func:`persistent_bytes`): weights
  and buffers; in training also one gradient per trainable parameter and the optimizer's state
  (none for SGD, one buffer for SGD with momentum, two for Adam / AdamW);
- the **rest** of the peak (activations kept for backward, transients, the cuBLAS workspace,
  allocator rounding and cache), predicted by SeerNet from the ONNX graph: the cards
  ``memory-sim.infer`` (targets ``reserved_extra_mb``, ``allocated_extra_mb``) and
  ``memory-sim.train`` (the same per optimizer, prefixed ``sgdm_`` / ``adamw_``).

The total is persistent + predicted rest + CUDA context, with the card's 90 % interval on the
rest.  Training steps use it; an inference step that cannot be simulated gets the ONNX liveness
analysis instead (:data:`INFER_FALLBACK`: it measured better), and ``memory-sim.infer`` stays
available as a predictor card (``perfseer predict --predictor memory-sim.infer``).
``docs/concepts/memory-simulation.md`` ("Learned memory") has the held-out-family accuracy against the ONNX
liveness analysis and a gradient-boosting baseline, and the commands that measure it.
"""

from __future__ import annotations

import functools
import math

from perfseer.errors import AbsurdAnswerError, MemoryConfigError, PerfseerError, SimulationError
from perfseer.memory.breakdown import LINES, MemoryEstimate
from perfseer.memory.fit import MaxBatch
from perfseer.memory.mig import mig_table
from perfseer.memory.overheads import overheads_for

MIB = 1 << 20
#: Optimizer-state buffers per trainable parameter (torch.optim: SGD with momentum keeps
#: ``momentum_buffer``; Adam / AdamW keep ``exp_avg`` and ``exp_avg_sq``; plain SGD none).
STATE_BUFFERS = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2}
#: The card of each phase.
CARDS = {"infer": "memory-sim.infer", "train": "memory-sim.train"}
#: Target-column prefix of each optimizer in the training card (SGD's rest is learned from SGD
#: with momentum, Adam's from AdamW: the same temporaries, state aside).
PREFIX = {"sgd": "sgdm_", "sgd-momentum": "sgdm_", "adam": "adamw_", "adamw": "adamw_"}
#: The fallback for an inference step that cannot be simulated: "learned" (the card) or
#: "onnx-liveness".  Chosen by the held-out-family comparison in docs/concepts/memory-simulation.md ("Learned
#: memory"): on the peak reserved bytes of 38 models of 35 unseen families, ONNX liveness has a
#: MAPE of 7.3 % (median 2.0 %), the inference card 23.7 % (median 11.8 %).  Both need the ONNX
#: graph, so liveness is used whenever the card could be.
INFER_FALLBACK = "onnx-liveness"


def persistent_bytes(phase: str, optimizer: str | None, param_bytes: int, trainable_param_bytes: int,
                     buffer_bytes: int) -> int:
    """Bytes that stay allocated through the peak of a step, exactly: weights and buffers; in
    training also the gradients and the optimizer state (after the first step)."""
    fixed = int(param_bytes) + int(buffer_bytes)
    if phase == "train":
        fixed += int(trainable_param_bytes) * (1 + STATE_BUFFERS[optimizer or "adamw"])
    return fixed


def module_bytes(module) -> dict:
    """Parameter (all, trainable) and buffer bytes of a module, shared tensors counted once."""
    seen, params, trainable, buffers, n = set(), 0, 0, 0, 0
    for p in module.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        params += p.numel() * p.element_size()
        n += p.numel()
        if p.requires_grad:
            trainable += p.numel() * p.element_size()
    for b in module.buffers():
        if id(b) not in seen:
            seen.add(id(b))
            buffers += b.numel() * b.element_size()
    return {"param_bytes": params, "trainable_param_bytes": trainable, "buffer_bytes": buffers, "n_params": n}


def graph_bytes(pg) -> dict:
    """The same from an ONNX graph (initializers and constants; nothing is known to be trainable
    apart from the weights, so an ONNX graph's training memory is not estimated)."""
    static = sum(int(t.nbytes) for t in pg.graph.tensors.values() if t.kind.is_static)
    return {"param_bytes": static, "trainable_param_bytes": static, "buffer_bytes": 0, "n_params": None}


@functools.lru_cache(maxsize=4)
def load_card(phase: str):
    """The bundled memory predictor of ``phase`` (loaded once)."""

    from perfseer.runtime.predictor import load_predictor  # deferred: a simulated step never needs it

    return load_predictor(CARDS[phase])


def columns(phase: str, optimizer: str | None) -> tuple[str, str]:
    """The card's ``(reserved, allocated)`` target columns for a step."""
    p = "" if phase == "infer" else PREFIX[optimizer or "adamw"]
    return f"{p}reserved_extra_mb", f"{p}allocated_extra_mb"


def learned_estimate(src, batch: int, config, device_name, capacity, over, notes: list[str], reason: str | None = None):
    """A :class:`~perfseer.memory.breakdown.MemoryEstimate` from the learned card (``method``
    ``"learned"``; ``interval``: the total's 90 % interval in bytes).

    Args:
        src: the :class:`~perfseer.memory.api.ModelSource` (its module gives the exact bytes; its
            export or ONNX reference gives the graph; read by attribute: :mod:`perfseer.memory.api`
            imports this module, never the other way round).
        reason: why the simulator did not run (first line of the notes).

    Raises:
        SimulationError: the graph cannot be extracted either (both reasons in the message).
        MemoryConfigError: a precision other than fp32, or training without a PyTorch model.
    """
    pg, exact, card, why = _inputs(src, config, reason)
    opt = config.optimizer if config.phase == "train" else None
    fixed = persistent_bytes(config.phase, opt, exact["param_bytes"], exact["trainable_param_bytes"],
                             exact["buffer_bytes"])
    res_col, alloc_col = columns(config.phase, opt)
    rows = {r["metric"]: r for r in card.predict(pg, batch=[batch])}
    res, alloc = rows[res_col], rows[alloc_col]
    for r in (res, alloc):  # a value over the card's sanity ceiling is refused there: no estimate from it
        if r["value"] is None:
            raise AbsurdAnswerError(f"{src.label}: {why}, and the learned memory predictor {card.name} gave no "
                                    f"answer ({r.get('reason') or 'no value'})",
                                    "check the model's shapes (perfseer graph MODEL) and --input-shape")
    # the labels carry the default (pre-Hopper) cuBLAS workspace; a Hopper GPU's is larger
    ws_delta = over.cublas_workspace - _default_workspace()
    rest = res["value"] * MIB + ws_delta
    rest_alloc = min(alloc["value"] * MIB + ws_delta, rest)
    peak_reserved = int(fixed + rest)
    peak_allocated = int(fixed + rest_alloc)
    total = peak_reserved + over.context
    interval = None
    if res["interval"] is not None:
        lo, hi = res["interval"]
        interval = [int(fixed + lo * MIB + ws_delta + over.context), int(fixed + hi * MIB + ws_delta + over.context)]
    spread = (f"90 % interval {interval[0] / MIB:,.0f}-{interval[1] / MIB:,.0f} MiB" if interval
              else "no interval: the card is not calibrated")
    lines = {k: 0 for k in LINES}
    lines["weights"] = exact["param_bytes"] + exact["buffer_bytes"]
    if config.phase == "train":
        lines["gradients"] = exact["trainable_param_bytes"]
        lines["optimizer_state"] = exact["trainable_param_bytes"] * STATE_BUFFERS[opt]
    lines["workspace"] = over.cublas_workspace
    lines["activations"] = max(int(rest_alloc) - over.cublas_workspace, 0)
    lines["allocator_overhead"] = peak_reserved - sum(v for k, v in lines.items() if k != "context")
    lines["context"] = over.context
    fits = None if capacity is None else total <= capacity
    notes = [f"{why}; memory from the learned predictor {card.name} (exact weights"
             + (", gradients and optimizer state" if config.phase == "train" else "")
             + f"; activations and transients predicted; total's {spread})", *notes]
    if not res.get("in_domain", True):
        notes.append(f"outside the learned predictor's training domain: {'; '.join(res.get('domain_reasons') or [])}")
    if capacity is not None and fits and interval and interval[1] > capacity:
        notes.append("fits at the estimate, but not at the top of its interval")
    if config.phase == "train" and opt in ("sgd", "adam"):
        notes.append(f"the rest of the peak is learned from {'SGD with momentum' if opt == 'sgd' else 'AdamW'}")
    return MemoryEstimate(
        model=src.label, batch=batch, phase=config.phase, optimizer=opt, precision=config.precision,
        device=device_name, method="learned", peak_tensor_bytes=peak_allocated, peak_allocated=peak_allocated,
        peak_reserved=peak_reserved, context=over.context, total=total, breakdown=lines, capacity=capacity,
        fits=fits, notes=notes, interval=interval, basis=f"learned (card {card.name}, {spread})")


def _inputs(src, config, reason):
    """``(graph at batch 1, exact bytes, card, why)`` of a model the simulator could not run."""

    why = f"the simulator could not run ({reason})" if reason else "the simulator could not run"
    if config.precision != "fp32":
        raise MemoryConfigError(f"{src.label}: {why}, and the learned memory predictor covers fp32 only, not "
                                f"{config.precision}", "pass --precision fp32 for a learned estimate")
    from perfseer.features.extract import extract  # deferred: a simulated step never needs it

    target = src.export if src.export is not None else src.onnx
    try:
        pg = extract(target, batch=1, input_shape=src.input_shape)
    except PerfseerError as e:
        raise SimulationError(f"{src.label}: {why}; the learned fallback needs the ONNX graph, which could not be "
                              f"extracted either ({e.problem})",
                              "simulate a variant of the model without the data-dependent step, or export it to "
                              "ONNX with static shapes and pass the .onnx file (--phase infer)") from e
    if src.build is not None:
        exact = module_bytes(src.build())
    elif config.phase == "train":
        raise MemoryConfigError(f"{src.label}: training memory needs the PyTorch model (an ONNX graph has no "
                                "backward pass or optimizer)", "pass the timm:/torchvision: reference or nn.Module")
    else:
        exact = graph_bytes(pg)
    return pg, exact, load_card(config.phase), why


def learned_max_batch(src, config, capacity: int, over, reason: str | None = None):
    """The largest batch whose learned total fits ``capacity`` (doubling, then bisection over the
    card's predictions; one graph extraction).  A :class:`~perfseer.memory.fit.MaxBatch` with
    ``traces_run`` 0 and ``basis`` set."""
    pg, exact, card, why = _inputs(src, config, reason)
    opt = config.optimizer if config.phase == "train" else None
    fixed = persistent_bytes(config.phase, opt, exact["param_bytes"], exact["trainable_param_bytes"],
                             exact["buffer_bytes"])
    col = card.targets.index(next(t for t in card.targets if t.metric == columns(config.phase, opt)[0]))
    ws_delta = over.cublas_workspace - _default_workspace()

    def fits(b: int) -> bool:
        rest = float(card.predict_graphs([pg.with_batch(b).to_pyg()])[0, col]) * MIB
        if not math.isfinite(rest):  # NaN would read as "does not fit" and end the search at a wrong batch
            raise AbsurdAnswerError(f"{src.label}: the learned memory predictor {card.name} returned {rest} at "
                                    f"batch {b}: no largest batch", "check the model's shapes (perfseer graph MODEL)")
        return fixed + rest + ws_delta + over.context <= capacity

    lo, hi, ceiling = 0, 1, 1 << 22
    while fits(hi):
        lo, hi = hi, hi * 2
        if hi > ceiling:
            mb = MaxBatch(lo, 0, False, capped=True)
            break
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        mb = MaxBatch(lo, 0, False)
    mb.basis = f"learned (card {card.name}; {why})"
    return mb


def _default_workspace() -> int:
    return overheads_for(None).cublas_workspace


def learned_mig(est, devices=None, context_mib: float | None = None) -> list[dict]:
    """:func:`perfseer.memory.mig.mig_advice` for a learned estimate: a profile fits when the
    estimated total (with that GPU's workspace and context) is within its memory."""

    def total_and_fit(over, cap):
        total = est.peak_reserved - est.breakdown["workspace"] + over.cublas_workspace + over.context
        return total, total <= cap

    return mig_table(devices, context_mib, total_and_fit)
