"""Several GPUs in the service: the request fields of ``POST /v1/predict`` and ``POST /v1/memory``
(``gpus``, ``parallel``, ``tp``, ``pp``, ``dp``...), their checks, and the answers.

A several-GPU prediction is :func:`perfseer.runtime.several.predict_several` with the service's own
pieces: the model extracted in the sandbox through the graph cache, the per-GPU step answered by the
service's single-GPU ``/v1/predict`` path (sandboxed re-binding, row cache) and the memory per GPU
simulated in the sandbox (:func:`parallel_memory_job`).  A layout that cannot run (a degree that does
not divide the GPUs, layers or heads; a batch smaller than the data-parallel degree; more GPUs than a
node holds without ``nodes``) is refused before any model is extracted, with a 422 naming the fix.
"""

from __future__ import annotations

import re
import time
from typing import Literal

from pydantic import BaseModel, Field

from perfseer.devices import get_device
from perfseer.errors import PerfseerError
from perfseer.graph.extract import weight_work_enabled
from perfseer.parallel.collectives import INTERCONNECTS, fabric
from perfseer.parallel.facts import transformer_shape
from perfseer.parallel.plan import SCHEDULES, STRATEGIES, ModelFacts, ParallelError, Plan, check, make_plan

MAX_GPUS = 4096  # GPUs of one request (the layout's product too)
MAX_NODES = 512
MAX_MICROBATCHES = 4096
MAX_NODE_NAME = 64

Strategy = Literal[STRATEGIES]  # type: ignore[valid-type]
Schedule = Literal[SCHEDULES]  # type: ignore[valid-type]
Interconnect = Literal[INTERCONNECTS]  # type: ignore[valid-type]
Degree = Field(default=None, ge=1, le=MAX_GPUS)

#: the layout's fields (asked: several GPUs) and the fields that only mean something with them
LAYOUT = ("gpus", "parallel", "tp", "pp", "dp")
WITH_LAYOUT = ("microbatches", "schedule", "sequence_parallel", "nodes", "node", "interconnect")


class SeveralGPUs(BaseModel):
    """The layout of a step on several GPUs (docs/guide/several-gpus.md); every field optional."""

    gpus: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="GPUs the step runs on (gpus = tp x pp x "
                             "dp); batch is then the global batch and the phase defaults to train; needs one device")
    parallel: Strategy | None = Field(default=None, description="dp (DistributedDataParallel), fsdp, zero1/zero2/"
                                      "zero3 (DeepSpeed), dataparallel (torch.nn.DataParallel), or tp / pp alone over "
                                      "every GPU; with tp/pp: the data-parallel flavour of the rest")
    tp: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="tensor-parallel degree (Megatron)")
    pp: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="pipeline stages")
    dp: int | None = Field(default=None, ge=1, le=MAX_GPUS, description="data-parallel replicas")
    microbatches: int | None = Field(default=None, ge=1, le=MAX_MICROBATCHES,
                                     description="microbatches per step with pp (default 4 x pp)")
    schedule: Schedule | None = Field(default=None, description="pipeline schedule: 1f1b (default) or gpipe")
    sequence_parallel: bool = Field(default=False, description="Megatron sequence parallelism with tp")
    nodes: int | None = Field(default=None, ge=1, le=MAX_NODES, description="nodes the GPUs span (default 1)")
    node: str | None = Field(default=None, max_length=MAX_NODE_NAME, description="node type: dgx-a100, dgx-h100, "
                             "dgx-h200, dgx-b200 (hgx-* aliases), pcie-8, pcie-4... (default: the GPU's usual one)")
    interconnect: Interconnect | None = Field(default=None, description="force the path inside a node (nvlink, "
                                              "pcie) or the network across nodes (ib-ndr, ib-hdr, roce)")
    checkpoint: bool = Field(default=False, description="activation checkpointing (full recompute of each "
                                                        "transformer layer) for the memory per GPU")


class PredictSeveral(SeveralGPUs):
    memory: bool = Field(default=False, description="with several GPUs: also memory_per_gpu_bytes and memory_fits "
                                                    "on each row (the step simulated in the sandbox: seconds)")


class MemorySeveral(SeveralGPUs):
    layouts: bool = Field(default=False, description="with a device, training: for a batch that does not fit one "
                                                     "GPU, the fewest GPUs with which ZeRO-1/2/3, FSDP, TP and TP+PP "
                                                     "would fit it (same batch per GPU), as each estimate's layouts")


def with_fields(base: type[BaseModel], extra: type[BaseModel]) -> type[BaseModel]:
    """``base`` (a request model) with ``extra``'s fields after its own: the schema at ``/docs``
    lists the model and batch first."""
    from pydantic import create_model

    fields = {name: (f.annotation, f) for name, f in extra.model_fields.items()}
    return create_model(base.__name__, __base__=base, __doc__=base.__doc__, __module__=base.__module__, **fields)


def asks_several(req) -> bool:
    """Whether a request asks for several GPUs (``gpus`` > 1 or any of parallel, tp, pp, dp)."""
    return bool((req.gpus and req.gpus > 1) or req.parallel or req.tp or req.pp or req.dp)


def _api_words(text: str) -> str:
    """A CLI fix in the API's words: ``--batch 12`` -> ``"batch" 12``, ``--sequence-parallel`` ->
    ``"sequence_parallel"``."""
    text = re.sub(r" \([a-z_]+=\d+\)", "", text or "")  # the CLI's "--nodes 2 (nodes=2)": said once
    return re.sub(r"--([a-z][a-z-]*)", lambda m: '"' + m.group(1).replace("-", "_") + '"', text)


def _refusal(e: PerfseerError) -> PerfseerError:
    """``e`` (the same error type) with its problem and fix in the API's words."""
    e.problem, e.fix = _api_words(e.problem), _api_words(e.fix) if e.fix else e.fix
    e.args = (f"{e.problem}; fix: {e.fix}" if e.fix else e.problem,)
    return e


def _named(e: PerfseerError, target: str, model: str) -> PerfseerError:
    """``e`` naming the reference ``model`` where it named the file ``target`` it resolved to."""
    if target != model:
        e.problem = e.problem.replace(target, model)
        e.fix = e.fix.replace(target, model) if e.fix else e.fix
    return e


def wants(req) -> bool:
    """Whether a request goes through this module: several GPUs, or any of their fields set."""
    return asks_several(req) or any(getattr(req, f, None) not in (None, False)
                                    for f in WITH_LAYOUT + ("checkpoint", "memory", "layouts"))


def layout_of(req, alone: tuple[str, ...] = ()) -> Plan | None:
    """The :class:`Plan` a request asks for (``None``: one GPU; ``alone``: fields that may ask for
    one GPU's plan by themselves, e.g. ``checkpoint`` for the memory).

    Raises:
        ParallelError: a field that only means something with several GPUs given without them,
            degrees whose product is not ``gpus``, more GPUs than the service takes.
    """
    if not asks_several(req):
        extra = [f for f in WITH_LAYOUT + ("checkpoint", "memory") if getattr(req, f, None) not in (None, False)]
        if extra and set(extra) <= set(alone):
            return make_plan(1)
        if extra:
            raise ParallelError(f"{', '.join(extra)} {'describes' if len(extra) == 1 else 'describe'} a step on several "
                                "GPUs, but none was asked",
                                "add \"gpus\" and \"parallel\" (or tp/pp/dp), or leave them out"
                                + ("; for one GPU's memory use POST /v1/memory" if "memory" in extra else ""))
        return None
    product = (req.tp or 1) * (req.pp or 1) * (req.dp or 1)
    if product > MAX_GPUS:
        raise ParallelError(f"tp x pp x dp = {product} GPUs, over this server's {MAX_GPUS}", "ask for fewer GPUs")
    try:
        return make_plan(req.gpus if (req.gpus or 1) != 1 or not (req.tp or req.pp or req.dp) else None,
                         req.parallel, tp=req.tp, pp=req.pp, dp=req.dp, microbatches=req.microbatches,
                         schedule=req.schedule or "1f1b", sequence_parallel=req.sequence_parallel,
                         nodes=req.nodes or 1, node=req.node, interconnect=req.interconnect)
    except PerfseerError as e:
        _refusal(e)
        raise


def plan_kwargs(plan: Plan) -> dict:
    """The keyword arguments of :func:`perfseer.predict` that give ``plan``."""
    return {"gpus": plan.gpus, "parallel": plan.flavour, "tp": plan.tp, "pp": plan.pp, "dp": plan.dp,
            "microbatches": plan.microbatches if plan.pp > 1 else None, "schedule": plan.schedule,
            "sequence_parallel": plan.sequence_parallel, "nodes": plan.nodes, "node": plan.node,
            "interconnect": plan.interconnect}


def seq_len_of(target: str, seq_len: int | None, shape) -> int | None:
    """Tokens per sample of an ``hf:`` model: ``seq_len``, else a one-dimensional input shape."""
    if seq_len:
        return seq_len
    if str(target).startswith("hf:") and shape is not None and len(shape) == 1:
        return int(shape[0])
    return None


def _shape_facts(target: str, seq_len: int | None) -> ModelFacts:
    """What the layout checks need of a model, read from its ``hf:`` configuration only (nothing is
    extracted): ``target`` is the reference the model store resolved, never a host path for ``hf:``."""
    shape = transformer_shape(target) if str(target).startswith("hf:") else {}
    return ModelFacts(name=str(target) if shape else "this model", params=0, param_bytes=0,
                      layers=shape.get("layers"), hidden=shape.get("hidden"), heads=shape.get("heads"),
                      seq_len=(seq_len or 128) if shape else None, vocab=shape.get("vocab"))


def check_layout(plan: Plan, target: str, model: str, batches, phase: str, seq_len: int | None,
                 device: str | None) -> None:
    """Refuse, before any extraction, a layout that cannot run ``model`` at these global batches:
    a degree not dividing its layers, heads or hidden size; a batch not splitting over the replicas
    and microbatches; more GPUs per node than the node holds (with a device)."""
    facts = _shape_facts(target, seq_len).with_(name=model if len(model) <= 80 else model[:77] + "...")
    try:
        if device is not None:
            spec = get_device(device)
            if spec.kind != "gpu":
                raise ParallelError(f"{spec.name} is a {spec.kind}, not a GPU", "pass a GPU (GET /v1/devices)")
            fabric(plan.gpus, gpu=spec.name, node=plan.node, nodes=plan.nodes, interconnect=plan.interconnect)
        for b in dict.fromkeys(int(b) for b in batches):
            check(plan, facts, b, phase)
    except PerfseerError as e:
        _refusal(e)
        raise


# -- POST /v1/predict ------------------------------------------------------------------------------

def predict(svc, req, shape, dims: dict) -> dict:
    """``/v1/predict`` with several GPUs: one row per global batch size, with ``compute_ms``,
    ``comm_ms`` (exposed), ``bubble_ms``, ``per_gpu_batch``, ``gpus``, ``parallel`` and, with
    ``memory``, ``memory_per_gpu_bytes`` (what ``perfseer predict --gpus N --json`` prints)."""
    from perfseer.runtime.several import predict_several  # deferred: only for this route

    plan = layout_of(req)
    if req.checkpoint and not req.memory:
        raise ParallelError("checkpoint changes only the memory per GPU", "add \"memory\": true, or drop it")
    if req.predictors:
        raise ParallelError("several GPUs are answered for a device, not with named predictors",
                            "pass one device in \"devices\" (its measured card answers the per-GPU step if it has "
                            "one) and no \"predictors\"")
    if len(req.devices) != 1:
        raise ParallelError(f"several GPUs are predicted for one GPU model at a time, got {len(req.devices)} devices",
                            "pass one GPU in \"devices\", e.g. [\"a100-80gb-sxm\"]")
    if req.energy or req.power_limit_w is not None:
        raise ParallelError("energy on several GPUs is not predicted yet", "drop \"energy\" and \"power_limit_w\", "
                            "or ask for one GPU")
    phase = req.phase or "train"
    target = svc.store.resolve(req.model)  # an unserved reference is refused here, before anything is read
    seq_len = seq_len_of(target, req.seq_len, shape)
    check_layout(plan, target, req.model, req.batch, phase, seq_len, req.devices[0])
    c = svc.config
    t0 = time.perf_counter()
    got: dict = {"warnings": [], "cached": None, "entry": None}

    def extract(model, **_):
        entry, cached = svc.graphs.entry(req.model, shape, dims, wait_s=c.queue_wait_s, seq_len=req.seq_len,
                                         weight_work=weight_work_enabled())
        got.update(entry=entry, cached=cached)
        return entry.pg

    def single(_pg, *, device, batch, phase, precision, basis, force=False):
        one = svc.predict(type(req)(model=req.model, batch=[int(batch)], devices=[device], phase=phase,
                                    precision=precision, basis=basis, input_shape=req.input_shape,
                                    seq_len=req.seq_len, dims=req.dims))
        got["warnings"] += one["warnings"]
        return one["predictions"]

    kw = plan_kwargs(plan)
    try:
        rows = predict_several(single, extract, req.model, device=req.devices[0], predictor=None,
                               batches=list(req.batch), phase=phase, precision=req.precision, basis=req.basis,
                               input_shape=shape, dims=dims, seq_len=req.seq_len, force=False, **kw)
    except ParallelError as e:
        _refusal(e)
        raise
    t1 = time.perf_counter()
    for r in rows:
        r["model"] = req.model
        r["notes"] = [svc.scrub(n) for n in r.get("notes") or []]
    if req.memory:
        _add_memory(svc, req, target, rows, plan, shape)
    entry = got["entry"]
    if entry.summary is None:
        entry.summary = {k: v for k, v in entry.pg.summary().items() if k not in ("heaviest", "folded_ops")}
    return {"api": "v1", "model": req.model, "layout": plan.describe(), "summary": {**entry.summary, "model": req.model},
            "predictions": rows, "warnings": sorted({svc.scrub(w) for w in got["warnings"]}), "cached": got["cached"],
            "timing_ms": {"predict": round((t1 - t0) * 1e3, 2), "memory": round((time.perf_counter() - t1) * 1e3, 2)}}


def _add_memory(svc, req, target: str, rows: list[dict], plan: Plan, shape) -> None:
    """``memory_per_gpu_bytes`` and ``memory_fits`` on the answered rows, simulated in the sandbox; a
    row whose memory cannot be simulated keeps its step time and says why in its notes."""
    answered = [r for r in rows if r.get("value") is not None]
    if not answered:
        return
    lite = [{"batch_size": r["batch_size"], "phase": r.get("phase"), "device": r.get("device"), "value": r["value"]}
            for r in answered]
    # the step's precision (a measured card's own when none was asked; tf32 is simulated as fp32)
    precision = req.precision or answered[0].get("precision")
    got = svc.sandbox.run(parallel_rows_job, target, lite, plan_kwargs(plan), precision, req.seq_len, shape,
                          req.checkpoint, wait_s=svc.config.queue_wait_s)
    for r, m in zip(answered, got):
        if m.get("memory_per_gpu_bytes") is not None:
            r["memory_per_gpu_bytes"] = m["memory_per_gpu_bytes"]
            r["memory_fits"] = m.get("memory_fits")
        r["notes"] = r.get("notes", []) + [_api_words(svc.scrub(n.replace(target, req.model)))
                                           for n in m.get("notes", [])]


def parallel_rows_job(target: str, rows: list[dict], kw: dict, precision, seq_len, shape, checkpoint: bool) -> list:
    """(sandbox) :func:`perfseer.memory.parallel.add_memory_per_gpu` on ``rows``: per row its
    ``memory_per_gpu_bytes``, ``memory_fits`` and notes."""
    from perfseer.memory.parallel import add_memory_per_gpu  # deferred: loads torch

    add_memory_per_gpu(target, rows, seq_len=seq_len, input_shape=shape, precision=precision,
                       checkpoint=checkpoint, **kw)
    return [{"memory_per_gpu_bytes": r.get("memory_per_gpu_bytes"), "memory_fits": r.get("memory_fits"),
             "notes": list(r.get("notes", []))} for r in rows]


# -- POST /v1/memory -------------------------------------------------------------------------------

def memory(svc, req, plain) -> dict:
    """``/v1/memory`` with several GPUs (one GPU's share per global batch, what ``perfseer memory
    --gpus N --json`` prints) or with ``layouts`` (``plain``: the service's one-GPU answer, to which
    each estimate that does not fit adds the fewest GPUs per strategy that would fit it)."""
    plan = layout_of(req, alone=("checkpoint",))
    shape = _shape(req)
    if plan is None:
        if not req.layouts:
            return plain(req)
        return _layouts(svc, req, shape)
    if req.layouts:
        raise ParallelError("layouts answers for one GPU (which layouts would fit the step)",
                            "drop \"layouts\", or drop the several-GPU fields")
    if req.mig or req.max_batch:
        raise ParallelError("mig and max_batch answer one GPU", "drop them, or drop the several-GPU fields")
    target = svc.store.resolve(req.model)
    seq_len = seq_len_of(target, None, shape)
    check_layout(plan, target, req.model, req.batch, req.phase, seq_len, req.device)
    if req.checkpoint and req.phase == "train" and not _shape_facts(target, seq_len).layers:
        raise ParallelError(f"activation checkpointing is modelled per transformer layer; {req.model} has no known "
                            "layers", "drop \"checkpoint\", or use an hf: model")
    key = ("several", target, svc.store.version(target), tuple(req.batch), req.phase, req.optimizer, req.precision,
           req.device, shape, req.checkpoint, tuple(sorted(plan_kwargs(plan).items())))
    hit = _cached(svc, key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    try:
        ests = svc.sandbox.run(parallel_memory_job, target, list(req.batch), plan_kwargs(plan), req.phase,
                               req.optimizer, req.precision, req.device, req.checkpoint, seq_len, shape,
                               wait_s=svc.config.queue_wait_s)
    except PerfseerError as e:  # the sandbox's re-raised error: the reference, never the file it resolved to
        _refusal(_named(e, target, req.model))
        raise
    for e in ests:
        e["model"] = req.model
        e["notes"] = [svc.scrub(n.replace(target, req.model)) for n in e.get("notes", [])]
    result = {"api": "v1", "model": req.model, "layout": plan.describe(), "gpus": plan.gpus, "estimates": ests,
              "max_batch": None, "timing_ms": {"simulate": round((time.perf_counter() - t0) * 1e3, 2)}}
    return _keep(svc, key, result)


def _shape(req):
    from perfseer.shapes import parse_shape

    return parse_shape(req.input_shape) if req.input_shape else None


def _cached(svc, key) -> dict | None:
    with svc._lock:
        hit = svc._memory_cache.get(key)
    return {**hit, "cached": True} if hit is not None else None


def _keep(svc, key, result: dict) -> dict:
    with svc._lock:
        svc._memory_cache[key] = result
        while len(svc._memory_cache) > svc.config.cache_size:
            svc._memory_cache.pop(next(iter(svc._memory_cache)))
    return {**result, "cached": False}


def parallel_memory_job(target: str, batches, kw: dict, phase: str, optimizer, precision: str, device,
                        checkpoint: bool, seq_len, shape) -> list[dict]:
    """(sandbox) :func:`perfseer.memory.parallel.memory_parallel` per global batch, as JSON-ready dicts."""
    from perfseer.memory.parallel import memory_parallel  # deferred: loads torch

    plan = make_plan(kw["gpus"], kw["parallel"], tp=kw["tp"], pp=kw["pp"], dp=kw["dp"],
                     microbatches=kw["microbatches"], schedule=kw["schedule"],
                     sequence_parallel=kw["sequence_parallel"], nodes=kw["nodes"], node=kw["node"],
                     interconnect=kw["interconnect"])
    out = []
    for b in batches:
        pm = memory_parallel(target, int(b), plan, phase=phase, optimizer=optimizer, precision=precision,
                             device=device, checkpoint=checkpoint, seq_len=seq_len,
                             input_shape=None if seq_len else shape)
        out.append(pm.to_dict())
    return out


def _layouts(svc, req, shape) -> dict:
    """``/v1/memory`` with ``layouts``: each batch's one-GPU estimate and, where it does not fit the
    device, the layouts that would (one simulation per batch, in the sandbox)."""
    if not req.device:
        raise ParallelError("layouts needs a device (whose memory the layouts must fit)",
                            "pass \"device\": \"a100-40gb\" (GET /v1/devices)")
    if req.phase != "train":
        raise ParallelError("layouts answers for a training step", "pass \"phase\": \"train\", or drop \"layouts\"")
    if req.mig or req.max_batch:
        raise ParallelError("layouts is answered on its own", "ask for mig or max_batch in another request")
    target = svc.store.resolve(req.model)
    seq_len = seq_len_of(target, None, shape)
    key = ("layouts", target, svc.store.version(target), tuple(req.batch), req.optimizer, req.precision, req.device,
           shape)
    hit = _cached(svc, key)
    if hit is not None:
        return hit
    t0 = time.perf_counter()
    try:
        ests = svc.sandbox.run(layouts_job, target, list(req.batch), req.optimizer, req.precision, req.device,
                               seq_len, shape, wait_s=svc.config.queue_wait_s)
    except PerfseerError as e:
        _refusal(_named(e, target, req.model))
        raise
    for e in ests:
        e["model"] = req.model
        e["notes"] = [svc.scrub(n.replace(target, req.model)) for n in e.get("notes", [])]
    result = {"api": "v1", "model": req.model, "estimates": ests, "max_batch": None,
              "timing_ms": {"simulate": round((time.perf_counter() - t0) * 1e3, 2)}}
    return _keep(svc, key, result)


def layouts_job(target: str, batches, optimizer, precision: str, device: str, seq_len, shape) -> list[dict]:
    """(sandbox) Each batch's one-GPU training step (:func:`perfseer.memory`) and, where it does not
    fit ``device``, :func:`perfseer.memory.parallel.fitting_layouts` from that same simulation: for
    each strategy the fewest GPUs with which the batch, per GPU, fits."""
    from perfseer.memory.api import memory, resolve_model  # deferred: loads torch
    from perfseer.memory.parallel import fitting_layouts

    src = resolve_model(target, shape)
    out = []
    for b in batches:
        est = memory(target, batch=int(b), phase="train", optimizer=optimizer, precision=precision, device=device,
                     input_shape=shape, _src=src)
        d = est.to_dict()
        if est.fits is False:
            d["layouts"] = fitting_layouts(target, int(b), device=device, phase="train", optimizer=optimizer,
                                           precision=precision, seq_len=seq_len,
                                           input_shape=None if seq_len else shape, _single=est)
        out.append(d)
    return out
