"""The HTTP service: a versioned REST API over perfseer's predictors and a web page.

Endpoints (OpenAPI docs at ``/docs``, schema at ``/openapi.json``):

- ``GET /v1/health``: liveness, cache and sandbox counters.
- ``GET /v1/predictors``: the predictors served, with coverage and scores.
- ``GET /v1/devices``: the device registry's specs, each with the served predictors measured on it.
- ``GET /v1/models?q=res&limit=20``: model references for completion (timm, torchvision, examples).
- ``POST /v1/models``: upload an ONNX file (multipart field ``file``); answers its ``upload:SHA256``
  reference and its summary.
- ``POST /v1/predict``: a model reference, batch sizes, optional input shape / sequence length /
  symbolic dims, predictors or devices, phase -> the rows ``perfseer predict --json`` prints; with
  ``gpus``/``parallel``/``tp``/``pp``/``dp`` a step on several GPUs (:mod:`perfseer.serve.several`).
- ``POST /v1/memory``: simulated peak GPU memory per batch size with its breakdown, the largest
  batch that fits a device and the smallest MIG slice (what ``perfseer memory --json`` gives); with
  the several-GPU fields one GPU's share, with ``layouts`` the layouts that would fit.
- ``POST /v1/compare``: which GPU: one model's step time (and energy, fit) on every GPU or a list,
  ranked (what ``perfseer compare --json`` gives), extracted through the same sandboxed cache.
- ``GET /``: the web page.

Errors are JSON ``{"error": {"type", "message", "fix"}}`` with a 4xx code (422 for a model or
request that cannot be served, 404 for an unknown predictor, 413 for an upload over the limit), and
503 with ``Retry-After`` when every extraction slot is busy (the one documented 5xx).
"""

from __future__ import annotations

import copy
import math
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated

from perfseer.errors import MissingDependencyError, PerfseerError

try:
    from fastapi import FastAPI, File, Query, Request, UploadFile
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse
    from fastapi.staticfiles import StaticFiles
    from pydantic import BaseModel, Field, StringConstraints
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError("fastapi", "serve", "perfseer serve") from e

from perfseer import __version__
from perfseer.data.splits import model_family
from perfseer.devices import UnknownDeviceError, get_device, list_devices
from perfseer.graph.extract import weight_work_enabled
from perfseer.runtime.monotone import ladder
from perfseer.runtime.predictor import list_predictors, load_predictor
from perfseer.runtime.route import answer_units, extraction, plan
from perfseer.serve import several
from perfseer.serve.graphs import MAX_REFERENCE, GraphCache, ModelStore
from perfseer.serve.jobs import bind_job, memory_job
from perfseer.serve.limits import BodyLimit
from perfseer.serve.llm import LLMRequest
from perfseer.serve.llm import answer as llm_answer
from perfseer.serve.rows import RowCache
from perfseer.serve.sandbox import Busy, Limits, Sandbox, SandboxError
from perfseer.shapes import parse_shape
from perfseer.sources.load import examples
from perfseer.sources.zoo import import_zoo

API_VERSION = "v1"
STATIC = Path(str(resources.files("perfseer") / "serve" / "static"))


@dataclass
class ServeConfig:
    """How the service runs.  Every limit is per request unless said otherwise."""

    jobs: int = 2  # extraction processes at once (each parses or exports one model)
    job_time_s: float = 60.0  # an extraction still running after this is stopped (422)
    job_memory_mb: int = 3072  # address-space limit of an extraction process (a request's memory bound)
    queue_wait_s: float = 30.0  # a request waits this long for an extraction slot, then gets 503
    cache_size: int = 128  # PerfGraphs kept (least recently used dropped first)
    cache_nodes: int = 2_000_000  # graph nodes the PerfGraph cache holds in all (~0.9 KB each held: ~1.7 GB)
    row_cache_size: int = 4096  # prediction rows kept, one entry per graph x batch x predictor/device x phase (0: off)
    max_upload_mb: float = 200.0  # larger uploads are refused (413); the graph, not the weights, is read
    max_uploads: int = 64  # uploaded files kept on disk
    max_batches: int = 32  # batch sizes in one request
    max_batch: int = 1 << 20  # largest batch size accepted
    max_bind_nodes: int = 2_000_000  # graph nodes x new batch sizes one request may re-bind (in the sandbox)
    body_timeout_s: float = 60.0  # a request body that stalls this long between two chunks is dropped (408)
    models_dir: str | None = None  # a folder whose .onnx files clients may name by relative path
    upload_dir: str | None = None  # where uploads are kept (default: a temporary folder)
    torch_threads: int = 1  # torch threads of the serving process (predictions are small)
    predictors: list[str] = field(default_factory=list)  # served predictors (empty: every bundled one)


# Bounds of a request's fields (a longer field is refused by validation, before any work).
MAX_WORD = 200  # a name: predictor, device, phase, precision, dimension, input shape
MAX_LIST = 256  # entries of a list field (the batch sizes are then checked against --max-batches)
MAX_DIMS = 64  # symbolic dimensions given in one request
MAX_JSON_BODY = 1 << 20  # bytes of a JSON request body
Word = Annotated[str, StringConstraints(max_length=MAX_WORD)]
Dim = Annotated[int, Field(ge=1, le=1 << 31)]


class PredictRequest(BaseModel):
    model: str = Field(..., description="timm:NAME, torchvision:NAME, example:NAME, nb201:..., upload:SHA256, ...",
                       examples=["timm:resnet50"], max_length=MAX_REFERENCE)
    batch: list[int] = Field(default=[1], description="batch sizes", examples=[[1, 32, 256]], max_length=MAX_LIST)
    input_shape: str | None = Field(default=None, description="one sample's shape, e.g. 3x224x224",
                                    max_length=MAX_WORD)
    seq_len: int | None = Field(default=None, description="tokens per sample (hf: models, or an ONNX model's "
                                                          "symbolic sequence dimensions)")
    dims: dict[Word, Dim] = Field(default_factory=dict, description="values of other symbolic input dimensions",
                                  max_length=MAX_DIMS)
    predictors: list[Word] = Field(default_factory=list, description="predictor names (default: every served one)",
                                   max_length=MAX_LIST)
    devices: list[Word] = Field(default_factory=list, max_length=MAX_LIST, description="with predictors: only their targets on these "
                               "devices; alone: any registered device (a measured predictor where one covers it, "
                               "else for AMP inference the transfer from the measured GPUs via specs, else the spec model; each "
                               "row names its basis)")
    phase: Word | None = Field(default=None, description="infer or train (default: both where covered; infer for "
                               "devices alone)")
    precision: Word | None = Field(default=None, description="devices alone: fp32, tf32, fp16 or bf16")
    basis: Word = Field(default="auto", description="devices alone: auto, spec, transfer or measured")
    energy: bool = Field(default=False, description="also power_w, energy_j, energy_j_per_sample and util_pct on "
                                                    "every GPU row (the power model)")
    power_limit_w: float | None = Field(default=None, description="with energy: a power cap, W (the step slows)")


class MemoryRequest(BaseModel):
    model: str = Field(..., description="timm:NAME, torchvision:NAME, nb201:..., example:NAME, upload:SHA256 (ONNX: "
                                        "inference only)", examples=["timm:resnet50"], max_length=MAX_REFERENCE)
    batch: list[int] = Field(default=[1], description="batch sizes", examples=[[1, 32, 128]], max_length=MAX_LIST)
    phase: Word = Field(default="train", description="train or infer")
    optimizer: Word | None = Field(default="adamw", description="sgd, sgd-momentum, adam, adamw (train)")
    precision: Word = Field(default="fp32", description="fp32, amp-fp16, amp-bf16, fp16, bf16")
    device: Word | None = Field(default=None, description="a registry device (capacity, fit); GET /v1/devices")
    input_shape: str | None = Field(default=None, description="one sample's shape, e.g. 3x224x224",
                                    max_length=MAX_WORD)
    mig: bool = Field(default=False, description="also the smallest MIG slice that fits (largest batch)")
    max_batch: bool = Field(default=False, description="also the largest batch that fits the device")


# the several-GPU fields (gpus, parallel, tp, pp, dp...) after each request's own
PredictRequest = several.with_fields(PredictRequest, several.PredictSeveral)
MemoryRequest = several.with_fields(MemoryRequest, several.MemorySeveral)


class CompareRequest(BaseModel):
    model: str = Field(..., description="timm:NAME, torchvision:NAME, example:NAME, nb201:..., upload:SHA256, ...",
                       examples=["timm:resnet50"], max_length=MAX_REFERENCE)
    batch: int = Field(default=1, description="samples per step", examples=[64])
    phase: Word = Field(default="infer", description="infer or train")
    devices: list[Word] = Field(default_factory=list, max_length=MAX_LIST,
                                description="GPU names (GET /v1/devices); default every registered GPU")
    precision: Word | None = Field(default=None, description="one precision for every GPU: fp32, tf32, amp-fp16, "
                                                             "bf16... (default: the first measured card's, else fp32)")
    input_shape: str | None = Field(default=None, description="one sample's shape, e.g. 3x224x224",
                                    max_length=MAX_WORD)
    seq_len: int | None = Field(default=None, description="tokens per sample (transformers)")
    memory: bool = Field(default=False, description="also simulate the step's peak memory (in the sandbox) and "
                                                    "say which GPUs it does not fit (slower: seconds per model)")
    optimizer: Word = Field(default="adamw", description="with memory, train: sgd, sgd-momentum, adam, adamw")
    energy: bool = Field(default=False, description="also power_w, energy_j, energy_j_per_sample and util_pct "
                                                    "per GPU (the power model)")
    power_limit_w: float | None = Field(default=None, description="with energy: a power cap, W (the step slows)")
    rank_by: Word = Field(default="time", description="time (fastest first) or energy (least energy per sample "
                                                      "first; needs energy)")


class ApiError(PerfseerError):
    def __init__(self, status: int, problem: str, fix: str = ""):
        super().__init__(problem, fix)
        self.status = status


def _error(status: int, kind: str, message: str, fix: str | None = None, headers=None) -> JSONResponse:
    return JSONResponse({"error": {"type": kind, "message": message, "fix": fix or ""}}, status_code=status,
                        headers=headers)


class Service:
    """The state behind the routes: sandbox, graph cache, loaded predictors."""

    def __init__(self, config: ServeConfig):
        import torch  # deferred: heavy, loaded on first use

        torch.set_num_threads(config.torch_threads)
        self.config = config
        self._tmp = None
        upload_dir = config.upload_dir
        if upload_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="perfseer-uploads-")
            upload_dir = self._tmp.name
        self.sandbox = Sandbox(Limits(time_s=config.job_time_s, memory_mb=config.job_memory_mb), max_jobs=config.jobs)
        self.store = ModelStore(upload_dir, config.models_dir, config.max_uploads)
        self.rows = RowCache(config.row_cache_size)
        self.graphs = GraphCache(self.sandbox, self.store, config.cache_size, on_evict=self.rows.drop_graph,
                                 max_nodes=config.cache_nodes)
        self._predictors: dict = {}
        self._lock = threading.Lock()
        self._names: list[str] | None = None
        self._served: list[str] | None = None
        self._memory_cache: dict = {}
        self._routes: dict = {}  # Unit -> the extraction its basis wants
        self.started = time.time()
        hidden = [(str(self.store.upload_dir), "<uploads>"), (str(Path(upload_dir).resolve()), "<uploads>")]
        if self.store.models_dir is not None:
            hidden += [(str(self.store.models_dir), "<served>"), (str(config.models_dir), "<served>")]
        hidden += [(str(Path(__file__).resolve().parents[2]), "<install>"), (sys.prefix, "<install>"),
                   (tempfile.gettempdir(), "<tmp>"), (str(Path.home()), "<home>")]
        # longest first, so that a folder inside another is named as itself
        self._hidden = sorted({(p, s) for p, s in hidden if len(p) > 1}, key=lambda x: -len(x[0]))

    def scrub(self, text: str) -> str:
        """``text`` without the host's paths (upload folder, served folder, install, home,
        temporary folder): what an error answer may show."""
        if not text:
            return text or ""
        for path, shown in self._hidden:
            text = text.replace(path, shown)
        return text

    # -- predictors ------------------------------------------------------------------------------
    def predictor_names(self) -> list[str]:
        if self._served is None:  # read once: the bundled cards do not change under a running server
            # by default the latency predictors; the learned memory fallback cards (role
            # "memory-fallback") answer through /v1/memory, where their extra bytes are completed
            self._served = list(self.config.predictors) or [p["name"] for p in list_predictors()
                                                            if p.get("role", "latency") == "latency"]
        return list(self._served)

    def predictor(self, name: str):
        if name not in self.predictor_names():
            raise ApiError(404, f"no predictor named '{name}' on this server",
                           f"use one of: {', '.join(self.predictor_names())} (GET /v1/predictors)")
        with self._lock:
            if name not in self._predictors:
                self._predictors[name] = load_predictor(name)
            return self._predictors[name]

    def extraction(self, unit) -> bool | None:
        """:func:`perfseer.runtime.route.extraction` of ``unit``, read once per device unit (the
        bundled cards do not change under a running server); ``None`` for a device that does not
        resolve (its rows fail later, with the error)."""

        if unit.kind == "predictor":  # its card's own, read from the loaded predictor
            return self.predictor(unit.name).weight_work
        with self._lock:
            if unit in self._routes:
                return self._routes[unit]
        try:
            kept = extraction(unit, load=self.predictor)
        except PerfseerError:
            return None
        with self._lock:
            self._routes[unit] = kept
        return kept

    def describe_predictors(self) -> list[dict]:
        return [self.predictor(n).describe() for n in self.predictor_names()]

    def devices(self) -> list[dict]:
        """The registry's devices with their specs, each with the served predictors measured on it."""

        covered: dict[str, dict] = {}
        for p in self.describe_predictors():
            for d in p["devices"]:
                try:
                    name = get_device(d).name
                except (UnknownDeviceError, PerfseerError):
                    name = d
                entry = covered.setdefault(name, {"predictors": [], "settings": set(), "phases": set()})
                entry["predictors"].append(p["name"])
                entry["settings"].add(d)
                entry["phases"].update(p["phases"])
        out = []
        for spec in list_devices():
            c = covered.pop(spec.name, None)
            out.append({**spec.to_dict(), "predictors": c["predictors"] if c else [],
                        "settings": sorted(c["settings"]) if c else [], "phases": sorted(c["phases"]) if c else []})
        for name, c in covered.items():  # measured settings the registry has no spec sheet for
            out.append({"name": name, "kind": None, "predictors": c["predictors"], "settings": sorted(c["settings"]),
                        "phases": sorted(c["phases"])})
        return out

    def memory(self, req: MemoryRequest) -> dict:
        c = self.config
        if not req.batch or len(req.batch) > c.max_batches or any(not 1 <= b <= c.max_batch for b in req.batch):
            raise ApiError(422, f"batch sizes must be 1 to {c.max_batches} values in 1..{c.max_batch}, got {req.batch}",
                           "pass e.g. [1, 32, 128]")
        if req.max_batch and not req.device:
            raise ApiError(422, "the largest batch needs a device", "pass \"device\": \"a100-40gb\" (GET /v1/devices)")
        if several.wants(req):  # several GPUs, checkpointing or the layouts that would fit: perfseer.serve.several
            return several.memory(self, req, self.memory)
        shape = parse_shape(req.input_shape) if req.input_shape else None
        target = self.store.resolve(req.model)
        key = (target, self.store.version(target), tuple(req.batch), req.phase, req.optimizer, req.precision,
               req.device, shape, req.mig, req.max_batch)
        with self._lock:
            hit = self._memory_cache.get(key)
        if hit is not None:
            return {**hit, "cached": True}
        t0 = time.perf_counter()
        try:
            result = self.sandbox.run(memory_job, target, list(req.batch), req.phase, req.optimizer, req.precision,
                                      req.device, shape, req.mig, req.max_batch, wait_s=c.queue_wait_s)
        except PerfseerError as e:
            if target != req.model:
                e.problem = e.problem.replace(target, req.model)
                e.args = (e.problem,)
            raise
        for est in result["estimates"]:
            est["model"] = req.model
        result = {"api": API_VERSION, "model": req.model, **result,
                  "timing_ms": {"simulate": round((time.perf_counter() - t0) * 1e3, 2)}}
        with self._lock:
            self._memory_cache[key] = result
            while len(self._memory_cache) > c.cache_size:
                self._memory_cache.pop(next(iter(self._memory_cache)))
        return {**result, "cached": False}

    # -- which GPU -----------------------------------------------------------------------------
    def compare(self, req: CompareRequest) -> dict:
        """:func:`perfseer.comparison.compare` with the step times from :meth:`predict` (the model
        extracted and re-bound in the sandbox, through the graph and row caches) and the memory,
        when asked, simulated in the sandbox as ``/v1/memory`` does; never a host path."""
        from perfseer.comparison import _MEMORY_PRECISION, compare  # deferred: only for this route

        c = self.config
        if not 1 <= req.batch <= c.max_batch:
            raise ApiError(422, f"batch must lie in 1..{c.max_batch}, got {req.batch}", "pass e.g. \"batch\": 64")
        if req.phase not in ("infer", "train"):
            raise ApiError(422, f"phase '{req.phase}' is neither infer nor train", "use infer or train")
        if req.rank_by not in ("time", "energy"):
            raise ApiError(422, f"rank_by '{req.rank_by}' is neither time nor energy", "use time or energy")
        if req.rank_by == "energy" and not req.energy:
            raise ApiError(422, "ranking by energy needs the energy prediction", "add \"energy\": true")
        if req.power_limit_w is not None and not req.energy:
            raise ApiError(422, "power_limit_w caps the energy prediction", "add \"energy\": true, or leave it out")
        if req.power_limit_w is not None and not (math.isfinite(req.power_limit_w) and 0 < req.power_limit_w <= 10_000):
            raise ApiError(422, f"power_limit_w must be a number of watts in (0, 10000], got {req.power_limit_w}",
                           "pass e.g. \"power_limit_w\": 300, or leave it out")
        if req.optimizer not in ("sgd", "sgd-momentum", "adam", "adamw"):
            raise ApiError(422, f"optimizer '{req.optimizer}' is not one of sgd, sgd-momentum, adam, adamw",
                           "use adamw, or leave it out")
        shape = parse_shape(req.input_shape) if req.input_shape else None
        answered: dict = {}
        t0 = time.perf_counter()

        def rows_of(model, *, device, batch, phase, precision, input_shape, seq_len, **energy):
            from perfseer.comparison import ahead
            from perfseer.devices import get_device

            # the kernel networks predict a graph's kernels for every GPU at once (in this thread)
            with ahead([get_device(d) for d in device]):
                answered.update(self.predict(PredictRequest(
                    model=req.model, batch=[batch], devices=list(device), phase=phase, precision=precision,
                    input_shape=req.input_shape, seq_len=req.seq_len, **energy)))
            return answered["predictions"]

        def memory_of(model, batch, phase, precision, optimizer, input_shape):
            target = self.store.resolve(req.model)
            try:
                got = self.sandbox.run(memory_job, target, [batch], phase, optimizer, _MEMORY_PRECISION.get(
                    precision or "fp32", "fp32"), None, shape, False, False, wait_s=c.queue_wait_s)
            except (Busy, SandboxError):  # a busy server or a stopped simulation: the request's answer
                raise
            except PerfseerError as e:  # a model the simulator cannot read: the rows without a fit
                return None, self.scrub(f"memory not estimated: {e}").replace(target, req.model)
            est = got["estimates"][0]
            return float(est["total"]), est.get("basis", "")

        rows = compare(req.model, batch=req.batch, phase=req.phase, devices=req.devices or None,
                       precision=req.precision, optimizer=req.optimizer, input_shape=shape, seq_len=req.seq_len,
                       memory=req.memory, energy=req.energy, power_limit_w=req.power_limit_w, rank_by=req.rank_by,
                       _predict=rows_of, _memory_of=memory_of)
        for r in rows:
            r["model"] = req.model
        return {"api": API_VERSION, "model": req.model, "batch_size": req.batch, "phase": req.phase,
                "rank_by": req.rank_by, "summary": answered.get("summary"), "rows": rows,
                "warnings": answered.get("warnings", []), "cached": answered.get("cached"),
                "timing_ms": {"total": round((time.perf_counter() - t0) * 1e3, 2)}}

    # -- completion ----------------------------------------------------------------------------
    def model_names(self) -> list[str]:
        if self._names is None:
            names = [f"example:{e}" for e in examples()]

            for zoo in ("timm", "torchvision"):
                try:
                    module = import_zoo(zoo)  # timm, or torchvision.models
                except PerfseerError:  # the zoo extra is optional
                    continue
                names += [f"{zoo}:{n}" for n in module.list_models()]
            self._names = names
        return self._names

    # -- prediction ----------------------------------------------------------------------------
    def predict(self, req: PredictRequest) -> dict:
        """Rows for every (unit, batch size) of the request, from the row cache where it has them.

        A *unit* is what one set of rows is computed for: a predictor on one of its devices in one
        phase, or (devices alone) a device with its phase, precision and basis.  The misses are
        computed together: each missing batch size is bound and its features built once for every
        predictor, and each predictor runs one forward pass for all its devices and phases.
        """

        c = self.config
        if not req.batch:
            raise ApiError(422, "no batch sizes given", "pass e.g. \"batch\": [1, 32]")
        if len(req.batch) > c.max_batches:
            raise ApiError(422, f"{len(req.batch)} batch sizes in one request (at most {c.max_batches})",
                           "split the request")
        bad = [b for b in req.batch if b < 1 or b > c.max_batch]
        if bad:
            raise ApiError(422, f"batch sizes must lie in 1..{c.max_batch}, got {bad}", "pass e.g. [1, 32, 256]")
        if req.phase not in (None, "infer", "train"):
            raise ApiError(422, f"phase '{req.phase}' is neither infer nor train", "use infer or train, or omit it")
        shape = parse_shape(req.input_shape) if req.input_shape else None
        dims = dict(req.dims)
        if req.seq_len is not None and not 1 <= req.seq_len <= 1 << 20:
            raise ApiError(422, f"seq_len must lie in 1..{1 << 20}, got {req.seq_len}", "pass e.g. 128")
        if several.wants(req):  # a step on several GPUs: perfseer.serve.several
            return several.predict(self, req, shape, dims)
        notes: list[str] = []
        units = self._units(req, notes)
        # each unit answers from the model extracted the way its predictor's training graphs were
        # (its card's extraction; a device: the measured card it routes to, if any, else the
        # server's default), and the first extraction is the first unit's: a request whose
        # predictors all extract one way extracts once

        default = weight_work_enabled()
        kept_of = {unit: self.extraction(unit) for unit in units}
        kept_of = {unit: default if kept is None else kept for unit, kept in kept_of.items()}
        t0 = time.perf_counter()
        entry, cached = self.graphs.entry(req.model, shape, dims, wait_s=c.queue_wait_s, seq_len=req.seq_len,
                                          weight_work=next(iter(kept_of.values()), default))
        t1 = time.perf_counter()
        entries = {entry.pg.graph.weight_work: entry}
        entry_of = {}
        for unit in units:
            kept = kept_of[unit]
            if kept not in entries:
                entries[kept] = self.graphs.entry(req.model, shape, dims, wait_s=c.queue_wait_s, seq_len=req.seq_len,
                                                  weight_work=kept)[0]
            entry_of[unit] = entries[kept]
        batches = list(dict.fromkeys(int(b) for b in req.batch))
        found = {}
        for unit in units:
            for b in batches:
                hit = self.rows.get((entry_of[unit].token, b, unit))
                if hit is not None:
                    found[b, unit] = hit
        hits = len(found)
        missing = [(b, u) for u in units for b in batches if (b, u) not in found]
        for e in entries.values():
            mine = [(b, u) for b, u in missing if entry_of[u] is e]
            if mine:
                found.update(self._compute(e, mine, req.model))
        rows = []
        for unit in units:
            for b in req.batch:
                got_rows, got_notes = found[int(b), unit]  # a predictor that failed: no rows, a note
                rows += [dict(r, model=req.model) for r in got_rows]
                notes += got_notes
        if req.energy:
            rows = self._with_energy(rows, entry.pg, req.power_limit_w, notes)
        if entry.summary is None:
            entry.summary = {k: v for k, v in entry.pg.summary().items() if k not in ("heaviest", "folded_ops")}
        summary = {**entry.summary, "model": req.model}  # the reference, never the file it resolved to
        return {"api": API_VERSION, "model": req.model, "summary": summary, "predictions": rows,
                "warnings": sorted({self.scrub(n) for n in notes}), "cached": cached,
                "row_cache": {"hits": hits, "misses": len(missing)},
                "timing_ms": {"extract": round((t1 - t0) * 1e3, 2),
                              "predict": round((time.perf_counter() - t1) * 1e3, 2)}}

    @staticmethod
    def _with_energy(rows: list[dict], pg, power_limit_w: float | None, notes: list[str]) -> list[dict]:
        """``rows`` with the power model's fields on each GPU latency row; a row it cannot answer
        (a CPU, a MIG slice, a refused latency) is kept as it is, with a note."""
        from perfseer.runtime.power import energy_rows  # deferred: loads the spec model

        if power_limit_w is not None and not (math.isfinite(power_limit_w) and 0 < power_limit_w <= 10_000):
            raise ApiError(422, f"power_limit_w must be a number of watts in (0, 10000], got {power_limit_w}",
                           "pass e.g. \"power_limit_w\": 300, or leave it out")
        out = []
        for r in rows:
            if r.get("metric") != "latency_ms" or r.get("value") is None:
                out.append(r)
                continue
            try:
                out += energy_rows([r], pg, power_limit_w)
            except PerfseerError as e:
                out.append(r)
                notes.append(f"no energy for {r.get('device')}: {e.problem}")
        return out

    def _units(self, req: PredictRequest, notes: list[str]) -> list:
        """The units of a request, in the order its rows are answered (:func:`perfseer.runtime.route.plan`)."""

        if req.predictors:
            for name in req.predictors:
                self.predictor(name)  # 404 for a predictor this server does not serve
        predictors = req.predictors or ([] if req.devices else self.predictor_names())
        units, skipped = plan(req.devices, predictors, req.phase, req.precision, req.basis, load=self.predictor,
                              strict=False)
        if req.predictors:
            notes += skipped
        return units

    def _compute(self, entry, missing: list[tuple], model: str) -> dict:
        """Rows for the (batch, unit) pairs the row cache lacked (:func:`perfseer.runtime.route.answer_units`,
        a failing unit's error as its note); each is put in the cache."""

        pg = entry.pg
        # the batch sizes asked and the powers of two their answers are made monotone from (runtime.monotone)
        new = [b for b in ladder([int(b) for b, _ in missing]) if b != pg.batch_size]
        if pg.num_nodes * len(new) > self.config.max_bind_nodes:
            raise ApiError(422, f"re-binding this {pg.num_nodes:,}-node graph to {len(new)} new batch sizes is over "
                                f"this server's budget of {self.config.max_bind_nodes:,} node bindings per request",
                           "ask for fewer batch sizes at a time")
        # re-binding runs in the sandbox (time and memory limits); features are built here from its result
        bound = self.sandbox.run(bind_job, pg, new, wait_s=self.config.queue_wait_s) if new else {}
        built: dict = {}

        def graph_at(b: int):
            if b not in built:
                built[b] = bound.get(int(b), pg).to_pyg()
            return built[b]

        got = answer_units(_rebound(pg, bound), missing, family=model_family(model), load=self.predictor,
                           errors="note", graph_at=graph_at)
        for (b, unit), (rows, notes) in got.items():
            self.rows.put((entry.token, b, unit), rows, notes)
        return got


def _rebound(pg, bound: dict):
    """A copy of PerfGraph ``pg`` whose ``with_batch`` answers from the graphs the sandbox re-bound
    (the answerers that bind for themselves, spec and transfer, then do no heavy work in the server
    process); still a PerfGraph for every ``isinstance`` check."""
    if not bound:
        return pg
    view = copy.copy(pg)

    def with_batch(batch: int):
        hit = bound.get(int(batch)) if isinstance(batch, int) else None
        return hit if hit is not None else pg.with_batch(batch)

    object.__setattr__(view, "with_batch", with_batch)  # frozen dataclass: set on the copy only
    object.__setattr__(view, "_rebound", type(pg._rebound)())  # its own kept graphs (PerfGraph.at_batch), dropped with it
    return view


def _short(part) -> str:
    """One part of a field's place in a request, cut short (a dictionary key can be any length)."""
    text = str(part)
    return text if len(text) <= 40 else text[:37] + "..."


def create_app(config: ServeConfig | None = None) -> FastAPI:
    """The FastAPI application (``uvicorn`` runs it; tests call it through ``TestClient``)."""

    svc = Service(config or ServeConfig())
    app = FastAPI(title="perfseer", version=__version__,
                  description="Predict deep-learning model performance from the computational graph.")
    app.state.service = svc

    upload_limit = int(svc.config.max_upload_mb * 2**20)
    app.add_middleware(BodyLimit, limit_for=lambda path: upload_limit + 2**16 if path == "/v1/models" else MAX_JSON_BODY,
                       timeout_s=svc.config.body_timeout_s,
                       message=lambda limit: (f"the request body is over this server's {limit / 2**20:.1f} MB limit",
                                              ("export the model without weights (perfseer reads only the graph) "
                                               "or ask the operator to raise --max-upload-mb")))
    scrub = svc.scrub

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError):
        return _error(e.status, type(e).__name__, scrub(e.problem), scrub(e.fix))

    @app.exception_handler(Busy)
    async def _busy(request: Request, e: Busy):
        return _error(503, "Busy", e.problem, e.fix, headers={"Retry-After": "5"})

    @app.exception_handler(SandboxError)
    async def _sandbox(request: Request, e: SandboxError):
        return _error(422, f"Sandbox{e.kind.capitalize()}", scrub(e.problem), scrub(e.fix))

    @app.exception_handler(PerfseerError)
    async def _perfseer(request: Request, e: PerfseerError):
        return _error(422, getattr(e, "kind", None) or type(e).__name__, scrub(e.problem), scrub(e.fix))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, e: StarletteHTTPException):
        # the framework's own refusals (a body it cannot parse: JSON nested past the parser's depth,
        # broken multipart; an unknown path or method) in the same error format as every other
        kinds = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed"}
        return _error(e.status_code, kinds.get(e.status_code, "HTTPError"), scrub(str(e.detail))[:200],
                      "see the schema at /docs", headers=getattr(e, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, e: RequestValidationError):
        errors = e.errors()  # the places and reasons, never the values (a field may be huge, or a secret)
        parts = [f"{'.'.join(_short(x) for x in err.get('loc', ())[1:]) or 'body'}: {str(err.get('msg'))[:200]}"
                 for err in errors[:5]]
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        return _error(422, "InvalidRequest", "; ".join(parts) + more, "see the schema at /docs")

    @app.get("/v1/health")
    def health() -> dict:
        return {"status": "ok", "version": __version__, "uptime_s": round(time.time() - svc.started, 1),
                "cache": {"entries": len(svc.graphs), "nodes": svc.graphs.nodes, "hits": svc.graphs.hits,
                          "misses": svc.graphs.misses},
                "row_cache": svc.rows.stats(),
                "sandbox": dict(svc.sandbox.stats)}

    @app.get("/v1/predictors")
    def predictors() -> list[dict]:
        return svc.describe_predictors()

    @app.get("/v1/devices")
    def devices() -> list[dict]:
        return svc.devices()

    @app.get("/v1/models")
    def models(q: str = Query("", max_length=200), limit: int = Query(20, ge=1, le=200)) -> list[str]:
        q = q.strip().lower()
        names = svc.model_names()
        starts = [n for n in names if n.lower().startswith(q) or n.lower().partition(":")[2].startswith(q)]
        inner = [n for n in names if q in n.lower() and n not in set(starts)] if q else []
        return (starts + inner)[:limit]

    @app.post("/v1/models")
    def upload(request: Request, file: UploadFile = File(...)) -> dict:
        limit = int(svc.config.max_upload_mb * 2**20)
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit + 2**16:
            raise ApiError(413, f"the upload is {int(declared) / 2**20:.1f} MB, over this server's "
                                f"{svc.config.max_upload_mb:g} MB limit", "export the model without weights "
                                "(perfseer reads only the graph) or ask the operator to raise --max-upload-mb")

        def chunks():
            seen = 0
            while True:
                chunk = file.file.read(1 << 20)
                if not chunk:
                    return
                seen += len(chunk)
                if seen > limit:
                    raise ApiError(413, f"the upload is over this server's {svc.config.max_upload_mb:g} MB limit",
                                   "export the model without weights (perfseer reads only the graph)")
                yield chunk

        ref = svc.store.add_upload(chunks())
        try:
            pg, cached = svc.graphs.get(ref, wait_s=svc.config.queue_wait_s)
        except Busy:  # the file is fine: kept for the retry
            raise
        except BaseException:  # refused: not kept
            svc.store.discard(ref)
            raise
        summary = {**{k: v for k, v in pg.summary().items() if k not in ("heaviest", "folded_ops")}, "model": ref}
        name = Path(str(file.filename or "")).name[:MAX_WORD] or None  # the client's own name, never a path
        return {"model": ref, "filename": name, "summary": summary, "cached": cached}

    @app.post("/v1/predict")
    def predict(req: PredictRequest) -> dict:
        return svc.predict(req)

    @app.post("/v1/memory")
    def memory(req: MemoryRequest) -> dict:
        return svc.memory(req)

    @app.post("/v1/compare")
    def compare(req: CompareRequest) -> dict:
        return svc.compare(req)

    @app.post("/v1/llm")
    def llm(req: LLMRequest) -> dict:
        return llm_answer(req)

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
