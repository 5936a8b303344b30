"""Step time on several GPUs: the single-GPU answer on each GPU's share, plus the communication
that does not hide behind it, plus the pipeline bubble.

For a :class:`~perfseer.parallel.plan.Plan` ``tp x pp x dp`` and a global batch ``B``, with
``t1(b)`` the single-GPU step time of the whole model at batch ``b`` (any basis of
:mod:`perfseer.runtime`):

* each replica gets ``B/dp`` samples, cut into ``m`` microbatches of ``b = B/(dp m)``;
* a pipeline stage runs ``1/pp`` of the layers, a TP rank ``1/tp`` of the split work
  (:attr:`~perfseer.parallel.plan.ModelFacts.split_fraction`; all of it with sequence
  parallelism): ``t_stage = t1(b) (f/tp + 1 - f) / pp``;
* compute is ``m t_stage``; the bubble ``(pp-1)`` stage-steps (1F1B and GPipe alike:
  ``(p-1)/(m+p-1)`` of the step);
* TP (Megatron): two all-reduces of ``b s h`` activations per layer forward, two backward
  (sequence parallel: reduce-scatter + all-gather of the same volume), not overlapped;
* PP: a send/recv of ``b s h`` activations per stage boundary and microbatch, forward and
  backward, on the critical path;
* DP: DDP all-reduces the gradients in 25 MB buckets as the backward pass produces them (the
  last microbatch's backward with a pipeline); ZeRO-1/2 reduce-scatter them the same way and
  all-gather the updated parameters after the optimizer step (exposed), in 16 bits under mixed
  precision (DeepSpeed's 16-bit model; DDP's autocast gradients are fp32); ZeRO-3/FSDP all-gather
  each layer's parameters before its forward and backward (prefetched one layer ahead) and
  reduce-scatter its gradients after; ``dataparallel`` (``torch.nn.DataParallel``) scatters the
  batch, replicates the parameters from GPU 0 every step, gathers the outputs and reduces the
  gradients to GPU 0, with a fitted per-tensor host cost.

The backward pass is taken as two thirds of forward plus backward (the usual 1:2 split); the
optimizer step (``optimizer_ms``) runs once per step, on the GPU's share of the parameters.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from perfseer.errors import PerfseerError
from perfseer.parallel.collectives import collective_cost
from perfseer.parallel.plan import ModelFacts, Plan, bubble_fraction, check

BWD_SHARE = 2.0 / 3.0  # backward's share of forward + backward
DATAPARALLEL_FACTS = Path(__file__).resolve().parent / "data" / "dataparallel.json"


@dataclass
class StepTime:
    """One several-GPU step (ms): ``value = compute_ms + comm_ms + bubble_ms``; ``comm`` lists
    each kind of communication's total and exposed time."""

    value: float
    compute_ms: float
    comm_ms: float
    bubble_ms: float
    per_gpu_batch: int
    microbatch: int
    comm: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def fields(self) -> dict:
        return {"value": self.value, "compute_ms": self.compute_ms, "comm_ms": self.comm_ms,
                "bubble_ms": self.bubble_ms, "per_gpu_batch": self.per_gpu_batch, "microbatch": self.microbatch,
                "comm": self.comm}


def _coll(op, nbytes, ranks, nodes, plan: Plan, gpu):
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return collective_cost(op, float(nbytes), ranks, gpu=gpu, node=plan.node, nodes=nodes,
                           interconnect=plan.interconnect).ms


def group_nodes(plan: Plan) -> dict[str, int]:
    """Nodes each group spans: TP innermost (inside a node when it fits), then PP, then DP."""
    per = plan.per_node
    tp_nodes = max(1, plan.tp // per) if plan.tp > per else 1
    inner = plan.tp * plan.pp
    pp_cross = inner > per  # some stage boundary crosses nodes
    dp_nodes = 1
    if plan.nodes > 1:
        dp_nodes = min(plan.dp, plan.nodes // max(1, inner // per) if inner > per else plan.nodes)
        while dp_nodes > 1 and plan.dp % dp_nodes:
            dp_nodes -= 1
    return {"tp": tp_nodes, "pp": 2 if pp_cross else 1, "dp": max(1, dp_nodes)}


def overlap(compute: list[float], before: list[float], after: list[float], prefetch: int = 1) -> float:
    """End time of a chunked phase on a compute stream and one communication stream: chunk ``i``
    computes once ``before[i]`` (a gather) is done, which starts at most ``prefetch`` chunks ahead;
    ``after[i]`` (a reduction) is queued when chunk ``i`` finishes."""
    n = len(compute)
    comm_free, t_compute = 0.0, 0.0
    done_before = [0.0] * n
    pending: deque = deque()  # (ready time, duration) of reductions
    c_end = [0.0] * n
    for i in range(n):
        ready = c_end[i - prefetch] if i - prefetch >= 0 else 0.0
        # reductions queued before this gather goes first
        while pending and pending[0][0] <= max(comm_free, ready):
            r, d = pending.popleft()
            comm_free = max(comm_free, r) + d
        if before[i] > 0:
            done_before[i] = max(comm_free, ready) + before[i]
            comm_free = done_before[i]
        else:
            done_before[i] = 0.0  # nothing to gather: the chunk waits for nothing but the previous one
        t_compute = max(t_compute, done_before[i]) + compute[i]
        c_end[i] = t_compute
        if after[i] > 0:
            pending.append((t_compute, after[i]))
    for r, d in pending:
        comm_free = max(comm_free, r) + d
    return max(t_compute, comm_free)


#: most gradient buckets a step is computed with: a larger model's gradients are taken as this many
#: equal buckets (DDP's 25 MB buckets of a 26 B-parameter fp32 model; the exposed tail then grows by
#: at most one bucket's all-reduce), so that a huge parameter count costs no more time to answer
MAX_BUCKETS = 4096


def _buckets(total: float, bucket: float) -> list[float]:
    if total <= 0:
        return []
    n = max(1, math.ceil(total / bucket))
    if n > MAX_BUCKETS:
        return [total / MAX_BUCKETS] * MAX_BUCKETS
    return [bucket] * (n - 1) + [total - bucket * (n - 1)]


@lru_cache(maxsize=1)
def dataparallel_constants() -> dict:
    if not DATAPARALLEL_FACTS.exists():
        raise PerfseerError(f"the fitted DataParallel constants {DATAPARALLEL_FACTS} are missing",
                            "reinstall perfseer, or refit them: python -m perfseer.fit.dataparallel")
    return json.loads(DATAPARALLEL_FACTS.read_text())


def dataparallel_overhead(facts: ModelFacts, plan: Plan, phase: str, gpu: str | None, input_bytes: float,
                          consts: dict | None = None, modules: int | None = None) -> dict:
    """``torch.nn.DataParallel``'s own cost per step (ms) on ``plan.dp`` GPUs, the batch of
    ``input_bytes`` in all: the batch copied to GPU 0 and scattered, the module replicated (its
    parameters broadcast; a fitted host cost per tensor, per module and per extra replica), the
    outputs gathered, and in training the gradients reduced back to GPU 0 (a host cost per tensor
    again).  Bytes go at the bus bandwidth of an all-reduce of the parameters over the GPUs'
    links times a fitted scale (:mod:`perfseer.fit.dataparallel`)."""
    n = plan.dp
    c = consts or dataparallel_constants()
    if n <= 1:
        return {"transfers": 0.0, "host": 0.0}
    bus = collective_cost("all_reduce", float(max(facts.param_bytes, 1)), n, gpu=gpu, node=plan.node,
                          interconnect=plan.interconnect).bus_gbs
    bw = bus * 1e9 * c["bandwidth_scale"]
    tensors = facts.param_tensors or max(1, facts.params // 250_000)
    modules = modules if modules is not None else tensors
    train = phase == "train"
    moved = 2 * input_bytes * (n - 1) / n + facts.param_bytes * (2 if train else 1)
    host = (c["per_tensor_ms"] * (tensors * (n - 1) + (tensors if train else 0))
            + c.get("per_module_ms", 0.0) * modules * (n - 1) + c["per_replica_ms"] * (n - 1))
    return {"transfers": 1e3 * moved / bw, "host": host}


def step_time(plan: Plan, facts: ModelFacts, global_batch: int, single_ms: Callable[[int], float], *,
              phase: str = "train", gpu: str | None = None, input_bytes_per_sample: float = 0.0,
              grad_bytes: float | None = None, optimizer_ms: float = 0.0) -> StepTime:
    """The several-GPU step of ``facts``'s model at ``global_batch`` under ``plan``.

    Args:
        single_ms: the single-GPU step time (ms) of the whole model at a batch size.
        phase: ``train`` (forward, backward, optimizer) or ``infer`` (forward only).
        gpu: the GPU model (its links, :mod:`perfseer.devices.interconnect`).
        input_bytes_per_sample: bytes of one sample's input (DataParallel scatters them).
        grad_bytes: bytes of the gradients all-reduced (default: the parameters' bytes).
        optimizer_ms: the optimizer step's part of ``single_ms`` (training): taken out of each
            microbatch and run once per step on the GPU's share of the parameters (``1/(tp pp)``,
            and ``1/dp`` where ZeRO or FSDP shard the optimizer state).

    Raises:
        ParallelError: a plan that cannot run the model (:func:`~perfseer.parallel.plan.check`).
    """
    check(plan, facts, global_batch, phase)
    train = phase == "train"
    b_rep = global_batch // plan.dp
    m = plan.microbatches if plan.pp > 1 else 1
    b_mb = b_rep // m
    t1 = float(single_ms(b_mb))
    t_opt = min(max(optimizer_ms, 0.0), 0.5 * t1) if train else 0.0
    f = 1.0 if plan.sequence_parallel else facts.split_fraction
    share = (f / plan.tp + 1.0 - f) if plan.tp > 1 else 1.0
    t_stage = (t1 - t_opt) * share / plan.pp
    where = group_nodes(plan)
    comm: dict[str, dict] = {}
    notes: list[str] = []
    # tensor parallel: per layer 2 all-reduces forward, 2 backward (SP: RS + AG of the same volume)
    c_tp = 0.0
    if plan.tp > 1:
        act = b_mb * facts.seq_len * facts.hidden * facts.act_bytes
        if plan.sequence_parallel:
            one = _coll("reduce_scatter", act, plan.tp, where["tp"], plan, gpu) + \
                _coll("all_gather", act, plan.tp, where["tp"], plan, gpu)
        else:
            one = _coll("all_reduce", act, plan.tp, where["tp"], plan, gpu)
        per_layer = (4 if train else 2) * one
        c_tp = per_layer * facts.layers / plan.pp
        comm["tp"] = {"total_ms": m * c_tp, "exposed_ms": m * c_tp, "per_microbatch_ms": c_tp}
    # pipeline: activations (and their gradients) across each stage boundary
    c_pp = 0.0
    if plan.pp > 1:
        act = b_mb * facts.seq_len * facts.hidden * facts.act_bytes / (plan.tp if plan.sequence_parallel else 1)
        one = _coll("send_recv", act, 2, where["pp"], plan, gpu)
        c_pp = (2 if train else 1) * one
        comm["pp"] = {"total_ms": m * c_pp, "exposed_ms": m * c_pp, "per_microbatch_ms": c_pp}
    sharded = plan.flavour in ("zero1", "zero2", "zero3", "fsdp")
    compute = m * t_stage + t_opt / (plan.tp * plan.pp) / (plan.dp if sharded else 1)
    bubble = (plan.pp - 1) * (t_stage + c_tp + c_pp) if plan.pp > 1 else 0.0
    exposed = m * (c_tp + c_pp)
    # data parallel
    wire = grad_bytes if grad_bytes is not None else facts.param_bytes
    if (grad_bytes is None and plan.flavour in ("zero1", "zero2", "zero3") and facts.act_bytes == 2
            and facts.params and facts.param_bytes > 2 * facts.params):
        wire = 2 * facts.params  # DeepSpeed mixed precision: 16-bit parameters and gradients on the wire
        notes.append("DeepSpeed mixed precision: gradients reduced and parameters gathered in 16 bits")
    shard_bytes = wire / (plan.tp * plan.pp)
    if plan.dp > 1:
        dp_exposed, dp_total = _data_parallel(plan, facts, phase, gpu, where["dp"], shard_bytes, t_stage, m,
                                              b_rep * input_bytes_per_sample, notes)
        comm["dp"] = {"total_ms": dp_total, "exposed_ms": dp_exposed, "bytes_per_gpu": shard_bytes,
                      "flavour": plan.flavour}
        exposed += dp_exposed
    if plan.pp > 1:
        notes.append(f"pipeline bubble {(plan.pp - 1)}/{m + plan.pp - 1} = {bubble_fraction(plan.pp, m):.3f} of the "
                     f"step ({plan.schedule})")
    value = compute + exposed + bubble
    return StepTime(value=value, compute_ms=compute, comm_ms=exposed, bubble_ms=bubble, per_gpu_batch=b_rep,
                    microbatch=b_mb, comm=comm, notes=notes)


def _data_parallel(plan: Plan, facts: ModelFacts, phase: str, gpu, dp_nodes: int, grad_bytes: float,
                   t_stage: float, m: int, input_bytes: float, notes: list) -> tuple[float, float]:
    """``(exposed, total)`` ms of the data-parallel communication of one step."""
    train = phase == "train"
    n = plan.dp
    if plan.flavour == "dataparallel":
        o = dataparallel_overhead(facts, plan, phase, gpu, input_bytes, modules=facts.modules)
        total = sum(o.values())
        return total, total  # single-process DataParallel: nothing overlaps (one Python thread drives it)
    if not train and plan.flavour not in ("zero3", "fsdp"):
        return 0.0, 0.0  # inference replicas run independently
    bucket = plan.bucket_mb * 1e6
    fwd = t_stage * (1 - BWD_SHARE) if train else t_stage
    bwd = t_stage * BWD_SHARE if train else 0.0
    if plan.flavour in ("ddp", "zero1", "zero2"):
        op = "all_reduce" if plan.flavour == "ddp" else "reduce_scatter"
        sizes = _buckets(grad_bytes, bucket)
        if not sizes:  # a model without parameters: no gradient to reduce, no parameter to gather
            return 0.0, 0.0
        comm = [_coll(op, s, n, dp_nodes, plan, gpu) for s in sizes]
        k = len(comm)
        end = overlap([bwd / k] * k, [0.0] * k, comm)  # the last microbatch's backward
        exposed, total = end - bwd, sum(comm)
        if plan.flavour != "ddp":  # updated parameters gathered after the optimizer step
            ag = _coll("all_gather", grad_bytes, n, dp_nodes, plan, gpu)
            exposed, total = exposed + ag, total + ag
        return exposed, total
    # ZeRO-3 / FSDP: a gather per unit forward and backward, a reduce-scatter per unit backward
    units = (facts.layers // plan.pp) if facts.layers else 8
    unit = grad_bytes / units
    ag = _coll("all_gather", unit, n, dp_nodes, plan, gpu)
    rs = _coll("reduce_scatter", unit, n, dp_nodes, plan, gpu) if train else 0.0
    end_f = overlap([fwd / units] * units, [ag] * units, [0.0] * units)
    exposed = end_f - fwd
    total = ag * units
    if train:
        end_b = overlap([bwd / units] * units, [ag] * units, [rs] * units)
        exposed += end_b - bwd
        total += (ag + rs) * units
    if m > 1:
        notes.append("ZeRO-3/FSDP with a pipeline: parameters gathered once per microbatch")
        exposed, total = exposed * m, total * m
    return exposed, total
