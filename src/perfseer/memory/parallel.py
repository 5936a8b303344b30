"""Memory per GPU on several GPUs (``perfseer memory MODEL --gpus N --parallel ...``), and which
layouts would fit a model that one GPU does not hold.

The step is simulated once on one GPU at the per-GPU microbatch (:func:`perfseer.memory.api.memory`),
then each category of its breakdown is divided as the plan divides it
(:mod:`perfseer.parallel.sharding`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from perfseer.errors import PerfseerError
from perfseer.memory.api import _capacity, memory
from perfseer.parallel.facts import transformer_shape
from perfseer.parallel.plan import ModelFacts, ParallelError, Plan, check, make_plan
from perfseer.parallel.sharding import deepspeed_mixed_precision, logits_bytes, shard


@dataclass
class ParallelMemory:
    """Memory of one GPU of a several-GPU step (bytes).

    Attributes:
        total: the GPU's peak (the sharded breakdown's sum); breakdown: category -> bytes.
        single: the simulated single-GPU step it was divided from (its breakdown and total).
        per_gpu_batch: samples per GPU per step; microbatch: samples per simulated microbatch.
        fits: ``total`` <= the device's capacity (``None`` without a device).
    """

    model: str
    layout: str
    gpus: int
    batch: int
    per_gpu_batch: int
    microbatch: int
    phase: str
    checkpoint: bool
    device: str | None
    capacity: int | None
    total: int
    fits: bool | None
    breakdown: dict
    single: dict
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["units"] = "bytes"
        d["memory_per_gpu_bytes"] = self.total
        return d


def _facts(model, seq_len) -> ModelFacts:
    shape = transformer_shape(model if isinstance(model, str) else None)
    eager = isinstance(model, str) and "@eager" in model  # hf:NAME@eager keeps the score matrices
    return ModelFacts(name=str(model), params=0, param_bytes=0, layers=shape.get("layers"),
                      hidden=shape.get("hidden"), heads=shape.get("heads"),
                      seq_len=(seq_len or 128) if shape else None, vocab=shape.get("vocab"),
                      attention_scores=eager, lm_logits=bool(shape.get("lm_head")))


def memory_parallel(model, batch: int, plan: Plan, *, phase: str = "train", optimizer: str = "adamw",
                    precision: str = "fp32", device: str | None = None, checkpoint: bool = False,
                    seq_len: int | None = None, input_shape=None, capacity_gib: float | None = None,
                    _single=None) -> ParallelMemory:
    """Memory of one GPU when ``model``'s step at global ``batch`` runs under ``plan``.

    Raises:
        ParallelError: a plan that cannot run the model (a degree that does not divide the layers
            or heads, a batch smaller than the data-parallel degree); checkpointing a model
            without known layers.
    """
    facts = _facts(model, seq_len)
    check(plan, facts, batch, phase)
    if checkpoint and phase == "train" and not facts.layers:
        raise ParallelError(f"activation checkpointing is modelled per transformer layer; {facts.name} has no known "
                            "layers", "drop --checkpoint, or use an hf: model")
    per_gpu = batch // plan.dp
    mb = per_gpu // (plan.microbatches if plan.pp > 1 else 1)
    shape = input_shape if input_shape is not None else ((seq_len,) if seq_len and isinstance(model, str)
                                                         and model.startswith("hf:") else None)
    est = _single or memory(model, batch=mb, phase=phase, optimizer=optimizer, precision=precision, device=device,
                            input_shape=shape, capacity_gib=capacity_gib)
    device_name, capacity, _ = _capacity(device, capacity_gib)
    if capacity is None:
        device_name, capacity = est.device, est.capacity
    breakdown, peaks = est.breakdown, getattr(est, "category_peaks", None)
    notes = []
    if plan.flavour in ("zero1", "zero2", "zero3") and precision in ("amp-fp16", "amp-bf16") and phase == "train":
        breakdown = deepspeed_mixed_precision(breakdown)
        peaks = deepspeed_mixed_precision(peaks) if peaks else peaks
        notes.append("DeepSpeed mixed precision: 16-bit parameters and gradients, the fp32 master weights in the "
                     "optimizer state (ZeRO's K = 12 bytes a parameter with Adam)")
    logits = logits_bytes(facts, mb, precision) if phase == "train" else 0
    parts = shard(breakdown, plan, facts, phase, checkpoint, peaks, logits=logits)
    total = int(sum(parts.values()))
    if plan.flavour == "ddp" and plan.dp > 1 and phase == "train":
        notes.append("DDP keeps a bucket copy of the gradients (gradient_as_bucket_view=False, PyTorch's default)")
    if plan.pp > 1:
        notes.append("pipeline stages taken as equal; the first and last also hold the embeddings and the head")
    return ParallelMemory(model=str(model), layout=plan.describe(), gpus=plan.gpus, batch=batch, per_gpu_batch=per_gpu,
                          microbatch=mb, phase=phase, checkpoint=checkpoint, device=device_name, capacity=capacity,
                          total=total, fits=None if capacity is None else total <= capacity, breakdown=parts,
                          single={"total": est.total, "breakdown": est.breakdown, "method": est.method},
                          notes=notes + list(est.notes))


#: Layouts tried by :func:`fitting_layouts`, in the order they are offered
ADVICE = ("zero1", "zero2", "zero3", "fsdp", "tp", "tp+pp")
GPU_COUNTS = (2, 4, 8, 16, 32, 64, 128, 256, 512)


def fitting_layouts(model, batch: int, *, device: str, phase: str = "train", optimizer: str = "adamw",
                    precision: str = "fp32", checkpoint: bool = False, seq_len: int | None = None,
                    input_shape=None, capacity_gib: float | None = None, per_node: int = 8,
                    _single=None) -> list[dict]:
    """For a step that does not fit one GPU: for each strategy, the fewest GPUs (of
    :data:`GPU_COUNTS`) with which one GPU's share fits ``device``, keeping ``batch`` samples per
    GPU (``tp``: at most ``per_node`` GPUs, one node; ``tp+pp``: TP over a node, stages across).

    Returns:
        ``[{"strategy", "gpus", "layout", "memory_per_gpu_bytes", "capacity"}]``, strategies with
        no fitting count left out.
    """
    facts = _facts(model, seq_len)
    shape = input_shape if input_shape is not None else ((seq_len,) if seq_len and isinstance(model, str)
                                                         and model.startswith("hf:") else None)
    single = _single or memory(model, batch=batch, phase=phase, optimizer=optimizer, precision=precision, device=device,
                    input_shape=shape, capacity_gib=capacity_gib)
    out = []
    for strategy in ADVICE:
        for n in GPU_COUNTS:
            try:
                if strategy in ("zero1", "zero2", "zero3", "fsdp"):
                    plan = make_plan(n, strategy)
                    global_batch = batch * n
                elif strategy == "tp":
                    if n > per_node:
                        break
                    plan = make_plan(n, "tp")
                    global_batch = batch
                else:
                    if n <= per_node:
                        continue
                    plan = make_plan(n, "dp", tp=per_node, pp=n // per_node, microbatches=n // per_node)
                    global_batch = batch * plan.microbatches
                pm = memory_parallel(model, global_batch, plan, phase=phase, optimizer=optimizer, precision=precision,
                                     device=device, checkpoint=checkpoint, seq_len=seq_len, input_shape=input_shape,
                                     capacity_gib=capacity_gib, _single=single)
            except ParallelError:
                continue
            if pm.fits:
                out.append({"strategy": strategy, "gpus": n, "layout": pm.layout, "memory_per_gpu_bytes": pm.total,
                            "capacity": pm.capacity, "per_gpu_batch": pm.per_gpu_batch})
                break
    return out


def add_memory_per_gpu(model, rows: list[dict], *, seq_len=None, input_shape=None, precision=None, gpus=1,
                       parallel=None, tp=None, pp=None, dp=None, microbatches=None, schedule="1f1b",
                       sequence_parallel=False, nodes=1, node=None, interconnect=None,
                       optimizer: str = "adamw", checkpoint: bool = False) -> None:
    """Add ``memory_per_gpu_bytes`` and ``memory_fits`` to several-GPU ``perfseer predict`` rows (in
    place); a row whose memory cannot be simulated gets a note instead."""
    plan = make_plan(gpus if gpus != 1 or not (tp or pp or dp) else None, parallel, tp=tp, pp=pp, dp=dp,
                     microbatches=microbatches, schedule=schedule, sequence_parallel=sequence_parallel, nodes=nodes,
                     node=node, interconnect=interconnect)
    prec = precision if precision in ("fp32", "amp-fp16", "amp-bf16", "fp16", "bf16") else "fp32"
    for r in rows:
        if r.get("value") is None:
            continue
        try:
            pm = memory_parallel(model, int(r["batch_size"]), plan, phase=r.get("phase") or "train",
                                 optimizer=optimizer, precision=prec, device=r.get("device"), seq_len=seq_len,
                                 input_shape=input_shape, checkpoint=checkpoint)
        except PerfseerError as e:
            r.setdefault("notes", []).append(f"memory per GPU not simulated: {e}")
            continue
        r["memory_per_gpu_bytes"] = pm.total
        r["memory_fits"] = pm.fits


#: the keyword arguments of :func:`perfseer.predict` that lay a step over several GPUs
LAYOUT_KEYS = ("gpus", "parallel", "tp", "pp", "dp", "microbatches", "schedule", "sequence_parallel", "nodes", "node",
               "interconnect")


def with_memory(model, rows: list[dict], *, checkpoint: bool = False, **kw) -> list[dict]:
    """``perfseer.predict(..., memory=True)``: ``rows`` (its answer to ``kw``) with the simulated
    memory.  Several GPUs: ``memory_per_gpu_bytes`` and ``memory_fits`` on each answered row
    (``checkpoint``: activation checkpointing); one GPU: a ``memory_sim`` row (MiB) per batch size,
    GPU and phase, as ``perfseer predict --memory`` adds.  What cannot be simulated is a warning
    (one GPU) or a note on the row (several)."""
    import warnings

    layout = {k: kw[k] for k in LAYOUT_KEYS if kw.get(k) is not None}
    several = (layout.get("gpus", 1) != 1 or layout.get("parallel") is not None or any(layout.get(k) for k in
                                                                                         ("tp", "pp", "dp")))
    if several:
        add_memory_per_gpu(model, rows, seq_len=kw.get("seq_len"), input_shape=kw.get("input_shape"),
                           precision=kw.get("precision"), checkpoint=checkpoint, **layout)
        return rows
    if checkpoint:
        raise ParallelError("checkpoint with memory is modelled for several GPUs here",
                            "pass gpus/parallel, or use perfseer.memory(model, ..., checkpoint=True)")
    from perfseer.memory.api import memory_rows

    extra, notes = memory_rows(model, rows, input_shape=kw.get("input_shape"))
    for n in notes:
        warnings.warn(n, stacklevel=3)
    return rows + extra


def memory_of_layout(model, batch: int, *, phase: str, optimizer, precision: str, device, input_shape, capacity_gib,
                     context_mib, foreach, mig: bool, gpus: int, parallel, tp, pp, dp, microbatches, schedule: str,
                     sequence_parallel: bool, checkpoint: bool) -> ParallelMemory:
    """``perfseer.memory(..., gpus=..., parallel=...)``: :func:`memory_parallel` of the layout
    (``input_shape=(tokens,)`` gives an ``hf:`` model's sequence length)."""
    if mig or context_mib is not None or foreach is not None:
        raise ParallelError("mig, context_mib and foreach answer one GPU", "drop them, or drop the several-GPU options")
    plan = make_plan(gpus if gpus != 1 or not (tp or pp or dp) else None, parallel, tp=tp, pp=pp, dp=dp,
                     microbatches=microbatches, schedule=schedule, sequence_parallel=sequence_parallel)
    seq_len = None
    if isinstance(model, str) and model.startswith("hf:") and input_shape is not None and len(input_shape) == 1:
        seq_len = int(input_shape[0])
    return memory_parallel(model, batch, plan, phase=phase, optimizer=optimizer, precision=precision, device=device,
                           checkpoint=checkpoint, seq_len=seq_len, input_shape=None if seq_len else input_shape,
                           capacity_gib=capacity_gib)
