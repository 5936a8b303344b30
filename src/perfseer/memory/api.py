"""``perfseer.memory(...)``: the GPU memory of a step, by simulation (or ONNX liveness)."""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
import types
from dataclasses import dataclass

from perfseer.deadline import deadline
from perfseer.errors import AbsurdAnswerError, ModelLoadError, PerfseerError
from perfseer.memory.breakdown import MemoryEstimate, analyse, fits_in
from perfseer.memory.fit import max_batch
from perfseer.memory.imports import import_zoo, skip_meta_init, without_dynamo
from perfseer.memory.learned import INFER_FALLBACK, learned_estimate, learned_max_batch, learned_mig
from perfseer.memory.mig import GIB, MIG_DEVICES, TIGHT_SHARE, MigFit, device_spec, mig_advice
from perfseer.memory.onnx_liveness import liveness_trace
from perfseer.memory.overheads import Overheads, overheads_for
from perfseer.memory.step import MemoryConfigError, SimulationError, StepConfig, trace_step
from perfseer.sources import SCHEMES, Scheme, hf, split_reference
from perfseer.sources.zoo import ZOOS
from perfseer.trust.bounds import check_memory

__all__ = ["GIB", "MIG_DEVICES", "TIGHT_SHARE", "MigFit", "ModelSource", "device_spec", "estimate_from_trace",
           "max_batch_for", "memory", "memory_rows", "mig_advice", "resolve_model", "simulate", "trace_model"]


@dataclass
class ModelSource:
    """A model the simulator can run: ``build()`` returns a fresh module (on the meta device when
    possible) each call; or an ONNX reference for the liveness analysis."""

    label: str
    build: object = None          # () -> torch.nn.Module
    input_shape: tuple | None = None
    onnx: object = None           # path / ModelProto / reference for perfseer.sources.load
    export: object = None         # what load_skeleton exports when the simulation fails
    input_dtype: str = "float32"  # the input's dtype ("int64": token ids)
    loss: str = "auto"            # the training loss (perfseer.memory.step.LOSSES)


def resolve_model(model, input_shape=None) -> ModelSource:
    """Turn a reference, path, ``onnx.ModelProto`` or ``torch.nn.Module`` into a :class:`ModelSource`."""
    import torch  # deferred: heavy, loaded on first use

    shape = tuple(input_shape) if input_shape is not None else None
    if isinstance(model, torch.nn.Module):
        hf_src = _hf_module_source(model, shape)
        if hf_src is not None:
            return hf_src
        if shape is None:
            raise ModelLoadError("a torch.nn.Module needs its input shape",
                                 "pass input_shape=(C, H, W) (one sample, without the batch)")
        meta = _meta_copy(model)
        return ModelSource(type(model).__name__, lambda: copy.deepcopy(meta), shape, export=model)
    if isinstance(model, (str, os.PathLike)) and not isinstance(model, str):
        model = str(model)
    if isinstance(model, str):
        split = split_reference(model)  # the table of perfseer.sources: None for a path
        if split is not None:
            scheme, name = SCHEMES[split[0]], split[1]
            if scheme.name == "hf":
                return _hf_source(model, name, shape)
            if scheme.simulable:
                module, default = _meta_module(scheme, name)
                return ModelSource(model, lambda: copy.deepcopy(module), shape or default, export=model)
        return ModelSource(model, onnx=model, input_shape=shape)
    try:
        import onnx  # deferred: heavy, loaded on first use

        if isinstance(model, onnx.ModelProto):
            return ModelSource(model.graph.name or "onnx model", onnx=model, input_shape=shape)
    except ImportError:  # pragma: no cover - onnx is a core dependency
        pass
    raise ModelLoadError(f"cannot read a model from a {type(model).__name__}",
                         "pass a reference (timm:resnet50), an .onnx path, an onnx.ModelProto or a "
                         "torch.nn.Module with input_shape")


def _meta_module(scheme: Scheme, name: str):
    """``(module, default input shape)`` of a reference, on the meta device (a zoo model some of
    whose constructors compute on their tensors is built on CPU, then moved)."""
    if scheme.name not in ZOOS:
        return scheme.build(name, meta=True)
    import_zoo(scheme.name)  # without torch._dynamo: a faster first call
    with without_dynamo(), skip_meta_init():
        module, default = scheme.build(name, meta=True)
    return (module.to("meta") if _on_cpu(module) else module), default


def _hf_source(reference: str, name: str, shape) -> ModelSource:
    """``hf:NAME`` for the simulator: the ``transformers`` model on the meta device, fed token ids
    of ``(seq_len,)`` (``shape``, default :data:`perfseer.sources.hf.DEFAULT_SEQ_LEN`), its first
    output (the logits, or the hidden states of ``@base``) trained with a token-level cross-entropy.
    An encoder-decoder reads the same ids on both sides; a model with other inputs (Whisper's
    audio features) is left to the ONNX liveness analysis (inference only)."""
    ref = hf.parse_reference(name)
    seq = hf._seq_len(ref, shape, None)
    module, config = hf.build_model(ref)
    spec = hf.input_spec(ref, config, seq)
    if any(dtype != "int64" for _, _, dtype in spec):
        return ModelSource(reference, onnx=reference, input_shape=(seq,))
    return _token_source(reference, module, [n for n, _, _ in spec], config.model_type, seq, reference)


def _token_source(label: str, module, names: list[str], model_type: str, seq: int, export) -> ModelSource:
    """A meta-device ``transformers`` ``module`` whose id inputs ``names`` all read the one tensor
    the simulator passes, its first output trained with the token-level loss."""

    forward = hf._forward_with(names, model_type in hf._NEEDS_MASK)

    def one_input(self, ids):
        return forward(self, *[ids] * len(names))

    module.forward = types.MethodType(one_input, module)
    return ModelSource(label, lambda: copy.deepcopy(module), (int(seq),), export=export, input_dtype="int64",
                       loss="tokens")


def _hf_module_source(model, shape) -> ModelSource | None:
    """A ``transformers`` model object that takes token ids, as :func:`_hf_source` treats ``hf:NAME``
    (``shape``: ``(tokens,)``); ``None`` for any other module (speech models included)."""

    if not hf.is_hf_module(model):
        return None
    params = inspect.signature(type(model).forward).parameters
    if "input_ids" not in params:
        return None
    names = ["input_ids"]
    if "decoder_input_ids" in params and getattr(model.config, "is_encoder_decoder", False):
        names.append("decoder_input_ids")
    if shape is not None and len(shape) != 1:
        raise ModelLoadError(f"{type(model).__name__} takes token ids: one dimension besides the batch (the "
                             f"sequence length), got input shape {'x'.join(map(str, shape))}",
                             "pass input_shape=(tokens,)")
    seq = shape[0] if shape is not None else hf.DEFAULT_SEQ_LEN
    meta = _meta_copy(model)  # a deep copy: the user's model and config stay as they are
    meta.config.use_cache = False
    return _token_source(type(model).__name__, meta, names, meta.config.model_type, seq, model)


def _on_cpu(module) -> bool:
    return any(t.device.type != "meta" for t in (*module.parameters(), *module.buffers()))


def _meta_copy(module):
    """A copy of ``module`` whose parameters and buffers are on the meta device (no weight copied)."""
    import torch  # deferred: heavy, loaded on first use

    memo = {}
    for p in module.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(module, memo)


def _config(phase, optimizer, precision, foreach) -> StepConfig:
    return StepConfig(phase=phase, optimizer=optimizer or "adamw", precision=precision, foreach=foreach).validate()


def _capacity(device, capacity_gib) -> tuple[str | None, int | None, str | None]:
    """``(device name, capacity bytes, architecture)``."""
    spec = device_spec(device) if device is not None else None
    if spec is not None and spec.kind != "gpu":
        raise MemoryConfigError(f"{spec.name} is a {spec.kind}, not a GPU", "pass a GPU from 'perfseer devices'")
    if capacity_gib is not None:
        if capacity_gib <= 0:
            raise MemoryConfigError(f"capacity must be > 0 GiB, got {capacity_gib}", "pass a positive --capacity-gib")
        return (spec.name if spec else None), int(capacity_gib * GIB), (spec.architecture if spec else None)
    if spec is None:
        return None, None, None
    if not spec.memory_gib:
        raise MemoryConfigError(f"the registry gives no memory size for {spec.name}", "pass --capacity-gib")
    return spec.name, int(spec.memory_gib * GIB), spec.architecture


def trace_model(src: ModelSource, batch: int, config: StepConfig):
    import torch  # deferred: heavy, loaded on first use

    with _time_limit(src.label):
        return trace_step(src.build(), src.input_shape, batch, config, input_dtype=getattr(torch, src.input_dtype),
                          loss=src.loss)


#: Seconds one simulated step may take before it counts as failed (and the fallback answers);
#: unset or 0: no limit.  Applies in the main thread of a POSIX process (it uses SIGALRM).
SIM_TIMEOUT_ENV = "PERFSEER_SIM_TIMEOUT"


@contextlib.contextmanager
def _time_limit(label: str):
    try:
        limit = float(os.environ.get(SIM_TIMEOUT_ENV) or 0)
    except ValueError:
        raise MemoryConfigError(f"{SIM_TIMEOUT_ENV}={os.environ[SIM_TIMEOUT_ENV]!r} is not a number of seconds",
                                f"set {SIM_TIMEOUT_ENV} to e.g. 60, or unset it") from None
    if limit <= 0:
        yield
        return

    def expired():
        return SimulationError(f"the simulation of {label} ran past {limit:g} s ({SIM_TIMEOUT_ENV})",
                               f"raise {SIM_TIMEOUT_ENV} for a simulated answer")

    with deadline(limit, expired):
        yield


def memory(model, batch: int = 1, phase: str = "train", optimizer: str | None = "adamw", precision: str = "fp32",
           device: str | None = None, input_shape=None, context_mib: float | None = None,
           capacity_gib: float | None = None, foreach: bool | None = None, mig: bool = False,
           _src: ModelSource | None = None) -> MemoryEstimate:
    """Peak GPU memory of one training or inference step on one GPU, with its breakdown: what
    :func:`perfseer.memory.front.memory` (``perfseer.memory(...)``) answers without the
    several-GPU arguments; the other arguments are its.

    Returns:
        a :class:`~perfseer.memory.breakdown.MemoryEstimate`; ``.to_dict()`` is its JSON.

    Raises:
        SimulationError: the step cannot run on fake tensors and no fallback applies (training).
    """
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise MemoryConfigError(f"batch size must be a positive integer, got {batch!r}", "pass batch=N with N >= 1")
    config = _config(phase, optimizer, precision, foreach)
    device_name, capacity, arch = _capacity(device, capacity_gib)
    over = overheads_for(arch, context_mib)
    src = _src or resolve_model(model, input_shape)
    notes: list[str] = []
    try:
        trace, method = simulate(src, batch, config, notes)
    except SimulationError as e:  # the learned fallback (perfseer.memory.learned), with the reason

        est = learned_estimate(src, batch, config, device_name, capacity, over, notes, e.problem)
        if mig:
            spec = device_spec(device) if device is not None else None
            own = spec is not None and (spec.mig_profiles or spec.parent)
            est.mig = learned_mig(est, [spec.parent or spec.name] if own else None, context_mib)
        return _sane(est)
    est = estimate_from_trace(trace, src.label, batch, config, device_name, capacity, over, notes, method)
    if mig:
        spec = device_spec(device) if device is not None else None
        own = spec is not None and (spec.mig_profiles or spec.parent)
        est.mig = mig_advice(trace, [spec.parent or spec.name] if own else None, context_mib)
    return _sane(est)


def _sane(est: MemoryEstimate) -> MemoryEstimate:
    """``est``, if it is a plausible answer (:func:`perfseer.trust.bounds.check_memory`: finite,
    positive, within the device's and the per-sample ceilings); else the refusal is raised."""
    check_memory(est.total, est.breakdown, est.batch, est.capacity, str(est.model)[:200])
    return est


def simulate(src: ModelSource, batch: int, config: StepConfig, notes: list[str]):
    """``(trace, method)``: the simulated step, or the ONNX liveness trace for an ONNX model or
    an inference whose simulation failed (the reason is appended to ``notes``)."""
    failed = None
    if src.build is not None:
        try:
            return trace_model(src, batch, config), "simulation"
        except SimulationError as e:
            if config.phase != "infer" or src.export is None or INFER_FALLBACK != "onnx-liveness":
                raise
            failed = e.problem
            notes.append(f"the simulator could not run ({e.problem}); inference memory from the ONNX graph's "
                         "liveness")
            src = ModelSource(src.label, onnx=src.export, input_shape=src.input_shape)
    if config.phase != "infer":
        raise MemoryConfigError(f"{src.label}: training memory needs the PyTorch model (an ONNX graph has no "
                                "backward pass or optimizer)",
                                "pass --phase infer, or the timm:/torchvision: reference or nn.Module")

    if config.precision != "fp32":
        notes.append("ONNX liveness uses the graph's own dtypes; precision is not applied")
    notes.append("ONNX liveness: operators are not fused or run in place, so activations are an upper bound")
    if failed is None:
        return liveness_trace(src.onnx, batch, src.input_shape), "onnx-liveness"
    try:
        return liveness_trace(src.onnx, batch, src.input_shape), "onnx-liveness"
    except PerfseerError as e:  # both ways failed: say why each did
        raise SimulationError(f"{src.label}: the simulator could not run ({failed}), and the ONNX graph the "
                              f"fallback needs could not be extracted either ({e.problem})",
                              "simulate a variant of the model without the data-dependent step, or export it to "
                              "ONNX with static shapes and pass the .onnx file") from e


def estimate_from_trace(trace, label, batch, config: StepConfig, device_name, capacity, over: Overheads,
                        notes=None, method="simulation") -> MemoryEstimate:
    r = analyse(trace, over)
    fits = None if capacity is None else fits_in(trace, over, capacity)
    return MemoryEstimate(
        model=label, batch=batch, phase=config.phase,
        optimizer=config.optimizer if config.phase == "train" else None, precision=config.precision,
        device=device_name, method=method, peak_tensor_bytes=r.peak_tensor_bytes, peak_allocated=r.peak_allocated,
        peak_reserved=r.peak_reserved, context=over.context, total=r.peak_reserved + over.context,
        breakdown=r.breakdown, capacity=capacity, fits=fits, notes=list(notes or []),
        category_peaks=r.category_peaks)


def max_batch_for(model, device: str | None = None, phase: str = "train", optimizer: str | None = "adamw",
                  precision: str = "fp32", input_shape=None, context_mib: float | None = None,
                  capacity_gib: float | None = None, foreach: bool | None = None, _src: ModelSource | None = None):
    """The largest batch whose step fits the device (see :mod:`perfseer.memory.fit`).

    Returns:
        a :class:`~perfseer.memory.fit.MaxBatch` (``.batch`` 0: not even one sample fits).
    """

    config = _config(phase, optimizer, precision, foreach)
    device_name, capacity, arch = _capacity(device, capacity_gib)
    if capacity is None:
        raise MemoryConfigError("the largest batch needs a device", "pass --device NAME or --capacity-gib N")
    src = _src or resolve_model(model, input_shape)
    if src.build is None:
        raise MemoryConfigError(f"{src.label}: the largest batch is searched with the simulator, which needs a "
                                "PyTorch model", "pass the timm:/torchvision: reference or an nn.Module")
    over = overheads_for(arch, context_mib)
    try:
        return max_batch(lambda b: trace_model(src, b, config), over, capacity)
    except SimulationError as e:  # the learned fallback's search (perfseer.memory.learned)

        return learned_max_batch(src, config, capacity, over, e.problem)


def _precision_of(setting: str) -> str:
    """Precision of a measurement-table device string (``rtx3090/amp-nchw-pt240`` -> ``amp-fp16``)."""
    s = setting.partition("/")[2].lower()
    for key, prec in (("amp_bf16", "amp-bf16"), ("amp-bf16", "amp-bf16"), ("amp", "amp-fp16"), ("bf16", "bf16"),
                      ("fp16", "fp16")):
        if s.startswith(key):
            return prec
    return "fp32"


def memory_rows(model, rows: list[dict], input_shape=None, optimizer: str = "adamw") -> tuple[list[dict], list[str]]:
    """Simulated memory beside ``perfseer predict``'s rows: one ``memory_sim`` row (MiB) per batch,
    device and phase whose device is a GPU of the registry.  Returns ``(rows, warnings)``; a model
    or device the simulator cannot handle gives a warning, not an error; an estimate refused as
    absurd (:class:`~perfseer.errors.AbsurdAnswerError`) a refused row (``value`` ``None``, ``reason``)."""
    out, warns, seen = [], [], set()
    src = None
    for r in rows:
        key = (r["batch_size"], r["device"], r["phase"])
        if key in seen:
            continue
        seen.add(key)
        try:
            spec = device_spec(r["device"])
            if spec.kind != "gpu":
                continue
            src = src or resolve_model(model, input_shape)
            est = memory(model, batch=r["batch_size"], phase=r["phase"], optimizer=optimizer,
                         precision=_precision_of(r["device"]), device=spec.name, _src=src)
        except AbsurdAnswerError as e:  # a value, refused: shown as such in its place
            out.append({"batch_size": r["batch_size"], "device": r["device"], "phase": r["phase"],
                        "metric": "memory_sim", "value": None, "unit": "MiB", "interval": None, "reason": str(e)})
            continue
        except PerfseerError as e:
            warns.append(f"memory for {r['device']} {r['phase']} batch {r['batch_size']}: {e}")
            continue
        out.append({"batch_size": r["batch_size"], "device": r["device"], "phase": r["phase"], "metric": "memory_sim",
                    "value": est.total / (1 << 20), "unit": "MiB", "method": est.method, "basis": est.basis,
                    "interval": [v / (1 << 20) for v in est.interval] if est.interval else None, "fits": est.fits,
                    "precision": est.precision, "optimizer": est.optimizer})
    return out, warns
