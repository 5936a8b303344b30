"""How a step is laid over several GPUs (:class:`Plan`), what of the model matters for it
(:class:`ModelFacts`), and the checks that refuse a layout that cannot run.

A plan is ``gpus = tp x pp x dp``: tensor-parallel degree ``tp`` (Megatron's column/row splits of
every block), pipeline stages ``pp`` (``microbatches`` per step, 1F1B or GPipe) and data-parallel
replicas ``dp``, whose flavour is ``ddp`` (PyTorch DistributedDataParallel), ``zero1``/``zero2``/
``zero3`` (DeepSpeed ZeRO stages), ``fsdp`` (PyTorch FSDP full sharding: ZeRO-3's communication) or
``dataparallel`` (single-process ``torch.nn.DataParallel``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfseer.errors import PerfseerError

#: ``--parallel`` choices: a data-parallel flavour, or ``tp`` / ``pp`` alone over every GPU
STRATEGIES = ("dp", "ddp", "tp", "pp", "fsdp", "zero1", "zero2", "zero3", "dataparallel")
DP_FLAVOURS = ("ddp", "zero1", "zero2", "zero3", "fsdp", "dataparallel")
SCHEDULES = ("1f1b", "gpipe")


class ParallelError(PerfseerError):
    """A several-GPU layout that cannot run (a degree that does not divide, a batch too small)."""


@dataclass(frozen=True)
class Plan:
    """A several-GPU layout.

    Attributes:
        tp, pp, dp: tensor-parallel degree, pipeline stages, data-parallel replicas.
        flavour: the data-parallel flavour (:data:`DP_FLAVOURS`).
        microbatches: microbatches per step and replica (pipeline; 1 without).
        schedule: ``1f1b`` or ``gpipe`` (same bubble; GPipe keeps every microbatch's activations).
        sequence_parallel: Megatron's sequence parallelism with TP (norms and dropout split too;
            all-reduces become reduce-scatter + all-gather).
        nodes: nodes the GPUs are spread over evenly; node: a node type; interconnect: a forced
            path or network (:data:`perfseer.parallel.collectives.INTERCONNECTS`).
        bucket_mb: DDP's gradient bucket size (PyTorch's default 25 MB).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    flavour: str = "ddp"
    microbatches: int = 1
    schedule: str = "1f1b"
    sequence_parallel: bool = False
    nodes: int = 1
    node: str | None = None
    interconnect: str | None = None
    bucket_mb: float = 25.0

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def per_node(self) -> int:
        return self.gpus // self.nodes

    def describe(self) -> str:
        parts = []
        if self.tp > 1:
            parts.append(f"TP {self.tp}" + (" + SP" if self.sequence_parallel else ""))
        if self.pp > 1:
            parts.append(f"PP {self.pp} ({self.schedule}, {self.microbatches} microbatches)")
        if self.dp > 1 or not parts:
            name = {"ddp": "DDP", "fsdp": "FSDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3",
                    "dataparallel": "DataParallel"}[self.flavour]
            parts.append(f"{name} {self.dp}")
        where = f" on {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{self.gpus} GPUs: " + " x ".join(parts) + where


def _int(name: str, v, minimum: int = 1) -> int | None:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise ParallelError(f"{name} must be an integer >= {minimum}, got {v!r}", f"pass {name}={max(minimum, 2)}")
    return v


def make_plan(gpus: int | None = None, parallel: str | None = None, *, tp: int | None = None, pp: int | None = None,
              dp: int | None = None, microbatches: int | None = None, schedule: str = "1f1b",
              sequence_parallel: bool = False, nodes: int = 1, node: str | None = None,
              interconnect: str | None = None) -> Plan:
    """The :class:`Plan` of a request (``perfseer predict --gpus N --parallel ...``, ``--tp --pp --dp``).

    ``parallel``: ``dp`` (= ``ddp``), ``fsdp``, ``zero1``..``zero3``, ``dataparallel``: the
    data-parallel flavour, over the GPUs ``tp`` and ``pp`` leave; ``tp`` / ``pp``: that alone over
    every GPU.  Without ``gpus`` it is ``tp x pp x dp``.

    Raises:
        ParallelError: degrees whose product is not ``gpus``, an unknown strategy or schedule.
    """
    gpus, tp, pp, dp = _int("gpus", gpus), _int("tp", tp), _int("pp", pp), _int("dp", dp)
    microbatches, nodes = _int("microbatches", microbatches), _int("nodes", nodes) or 1
    if parallel is not None and parallel not in STRATEGIES:
        raise ParallelError(f"unknown parallel strategy {parallel!r}", f"use one of {', '.join(STRATEGIES)}")
    if schedule not in SCHEDULES:
        raise ParallelError(f"unknown pipeline schedule {schedule!r}", f"use one of {', '.join(SCHEDULES)}")
    flavour = {"dp": "ddp", None: "ddp", "tp": "ddp", "pp": "ddp"}.get(parallel, parallel)
    if parallel == "tp" and tp is None:
        tp = gpus
    if parallel == "pp" and pp is None:
        pp = gpus
    tp, pp = tp or 1, pp or 1
    if gpus is None:
        gpus = tp * pp * (dp or 1)
    if gpus % (tp * pp):
        raise ParallelError(f"{gpus} GPUs are not a multiple of tp x pp = {tp} x {pp}",
                            f"pass --gpus {tp * pp * max(1, round(gpus / (tp * pp)))} or other degrees")
    if dp is None:
        dp = gpus // (tp * pp)
    if tp * pp * dp != gpus:
        raise ParallelError(f"tp x pp x dp = {tp} x {pp} x {dp} = {tp * pp * dp}, not the {gpus} GPUs asked",
                            f"pass --gpus {tp * pp * dp}, or degrees whose product is {gpus}")
    if pp == 1 and microbatches not in (None, 1):
        raise ParallelError(f"{microbatches} microbatches without pipeline stages", "drop --microbatches, or pass --pp")
    m = microbatches or (4 * pp if pp > 1 else 1)
    if sequence_parallel and tp == 1:
        raise ParallelError("sequence parallelism needs tensor parallelism", "pass --tp 2 or more, or drop it")
    if flavour == "dataparallel" and (tp > 1 or pp > 1 or nodes > 1):
        raise ParallelError("torch.nn.DataParallel runs in one process on one node, without tp or pp",
                            "use --parallel dp (DistributedDataParallel) to combine with --tp/--pp/--nodes")
    if gpus % nodes:
        raise ParallelError(f"{gpus} GPUs do not split evenly over {nodes} nodes",
                            "use a number of GPUs that is a multiple of --nodes")
    return Plan(tp=tp, pp=pp, dp=dp, flavour=flavour, microbatches=m, schedule=schedule,
                sequence_parallel=bool(sequence_parallel), nodes=nodes, node=node, interconnect=interconnect)


@dataclass(frozen=True)
class ModelFacts:
    """What the several-GPU model needs to know of a model.

    Attributes:
        name: the model's label.
        params: parameter count; param_bytes: bytes of the parameters as stored (training:
            their dtype; gradients have the same).
        layers, hidden, heads, seq_len, vocab: the transformer's shape (``None`` for other models:
            TP and PP are refused for them).
        split_fraction: share of the step's work that tensor parallelism splits (matrix products,
            attention, the MLP's activation); the rest (norms, residual adds, dropout, embeddings
            lookup) is repeated on every TP rank unless sequence parallelism splits it.
        act_bytes: bytes of one activation element in the step (2 with 16-bit compute, else 4).
        param_tensors: number of parameter and buffer tensors (DataParallel replicates each);
            modules: number of modules (taken as the graph's operators when not known).
        attention_scores: the attention keeps its ``a s x s`` score and softmax matrices for the
            backward pass (explicit, "eager" attention; fused attention does not).
    """

    name: str
    params: int
    param_bytes: int
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    seq_len: int | None = None
    vocab: int | None = None
    split_fraction: float = 1.0
    act_bytes: int = 4
    param_tensors: int | None = None
    modules: int | None = None
    attention_scores: bool = False
    lm_logits: bool = False

    @property
    def is_transformer(self) -> bool:
        return bool(self.layers and self.hidden and self.heads and self.seq_len)

    def with_(self, **kw) -> "ModelFacts":
        return replace(self, **kw)


def check(plan: Plan, facts: ModelFacts, global_batch: int, phase: str = "train") -> None:
    """Refuse a plan that cannot run ``facts``'s model at ``global_batch``.

    Raises:
        ParallelError: TP or PP on a model without known layers and heads; a degree that does not
            divide the layers, heads or hidden size; a batch smaller than (or not a multiple of)
            the data-parallel degree times the microbatches.
    """
    if (plan.tp > 1 or plan.pp > 1) and not facts.is_transformer:
        raise ParallelError(f"tensor and pipeline parallelism are modelled for transformers of known layers and "
                            f"heads; {facts.name} is not one", "use --parallel dp/fsdp/zero* for it, or an hf: model")
    if plan.tp > 1:
        if facts.heads % plan.tp:
            raise ParallelError(f"tp={plan.tp} does not divide the {facts.heads} attention heads of {facts.name}",
                                f"use a tp among {_divisors(facts.heads, plan.gpus)}")
        if facts.hidden % plan.tp:
            raise ParallelError(f"tp={plan.tp} does not divide the hidden size {facts.hidden} of {facts.name}",
                                f"use a tp among {_divisors(facts.hidden, plan.gpus)}")
    if plan.pp > 1 and facts.layers % plan.pp:
        raise ParallelError(f"pp={plan.pp} does not divide the {facts.layers} layers of {facts.name}",
                            f"use a pp among {_divisors(facts.layers, plan.gpus)}")
    per = plan.dp * plan.microbatches
    if global_batch < per:
        what = f"the data-parallel degree {plan.dp}" + (f" x {plan.microbatches} microbatches" if plan.pp > 1 else "")
        raise ParallelError(f"global batch {global_batch} is smaller than {what} = {per}: a GPU would get no sample",
                            f"pass --batch {per} or more (with --gpus, --batch is the global batch), or fewer GPUs")
    if global_batch % per:
        raise ParallelError(f"global batch {global_batch} does not split evenly into {plan.dp} replicas"
                            + (f" x {plan.microbatches} microbatches" if plan.pp > 1 else ""),
                            f"pass a multiple of {per}, e.g. --batch {per * max(1, global_batch // per)}")


def _divisors(n: int, limit: int) -> str:
    ds = [d for d in range(2, limit + 1) if n % d == 0]
    return ", ".join(map(str, ds)) if ds else "1 (none above 1 fits)"


def bubble_fraction(pp: int, microbatches: int) -> float:
    """The pipeline bubble's share of the step, ``(p-1)/(m+p-1)`` (1F1B and GPipe alike)."""
    if pp < 1 or microbatches < 1:
        raise ParallelError(f"stages and microbatches must be >= 1, got {pp} and {microbatches}", "pass positive values")
    return (pp - 1) / (microbatches + pp - 1)


__all__ = ["Plan", "ModelFacts", "ParallelError", "STRATEGIES", "DP_FLAVOURS", "SCHEDULES", "make_plan", "check",
           "bubble_fraction"]
