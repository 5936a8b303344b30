"""Run one training or inference step of a model under a :class:`~perfseer.memory.trace.StorageTracer`.

The step is what a user's loop runs, with PyTorch's own autograd engine and optimizers:

* **infer**: ``model.eval()`` under ``torch.inference_mode()`` (or ``no_grad``), one forward.
* **train**: ``model.train()``; forward; a loss (cross-entropy against random labels for a 2-D
  output, else the mean of each output); ``loss.backward()``; ``optimizer.step()``;
  ``optimizer.zero_grad(set_to_none=True)`` (the default since PyTorch 2.0).  Two steps run: the
  first creates the optimizer state, the second is the steady state a long run repeats.
* **precision**: ``fp32``; ``amp-fp16`` / ``amp-bf16`` (CUDA autocast, emulated by
  :class:`~perfseer.memory.autocast.CudaAutocast`, fp32 master weights; ``amp-fp16`` adds a
  gradient scaler: a scale, a growth tracker and a found-inf flag, gradients unscaled in place by
  ``_foreach_mul_`` as ``GradScaler.unscale_`` does); ``fp16`` / ``bf16``: the whole model cast.

With ``fake=True`` nothing is allocated (any batch size) and the model runs on one of two
backends:

* ``"meta"`` (the fast path): parameters, buffers, input and activations are ``meta``-device
  tensors; operators run their C++ meta kernels directly.  Tensor sizes, aliasing and lifetimes
  are those of the CPU kernels; the one operator whose kernel choice depends on the device,
  ``scaled_dot_product_attention``, runs the kernel the CPU chooses
  (:class:`~perfseer.memory.emulate.KernelChoices`); batch norm allocates its outputs directly
  (:data:`~perfseer.memory.emulate.META_KERNELS`: the meta kernels are slow Python
  decompositions).  fp32 only; models with Python-level fast
  paths that test ``x.device.type`` (``nn.MultiheadAttention``, ``nn.Transformer*Layer``, RNNs,
  timm's ``LiteMLA``) are not run on it.
* ``"fake"``: ``FakeTensorMode`` tensors that report the CPU device (slower: every operator goes
  through the fake-tensor dispatcher in Python).  Used for the models above and whenever the meta
  run raises (e.g. a model that reads a tensor's value).

Both give the same trace (tests/memory/test_step.py, and the CPU ground truth of
``benchmarks/memory_cpu_truth.py`` at tag research-2026-11 runs the default, ``"auto"``).  With ``fake=False`` the model
runs on real CPU tensors (the ground truth).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_leaves

from perfseer.errors import MemoryConfigError, PerfseerError, SimulationError
from perfseer.memory.autocast import CudaAutocast
from perfseer.memory.emulate import META_KERNELS, KernelChoices
from perfseer.memory.imports import without_dynamo
from perfseer.memory.trace import StorageTracer, Trace

PHASES = ("infer", "train")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
PRECISIONS = ("fp32", "amp-fp16", "amp-bf16", "fp16", "bf16")
_LOW = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16, "fp16": torch.float16, "bf16": torch.bfloat16}


__all__ = ["MemoryConfigError", "SimulationError", "StepConfig", "trace_step", "make_optimizer", "PHASES",
           "OPTIMIZERS", "PRECISIONS"]


@dataclass(frozen=True)
class StepConfig:
    """What one step does.  Defaults are those of a CUDA training loop."""

    phase: str = "train"          # "infer" or "train"
    optimizer: str = "adamw"      # one of OPTIMIZERS (ignored for infer)
    precision: str = "fp32"       # one of PRECISIONS
    foreach: bool | None = None   # None: CUDA's default (foreach on) for "cuda", off for "cpu"
    target: str = "cuda"          # "cuda": emulate CUDA kernels and autocast; "cpu": run as CPU does
    steps: int = 2                # training steps traced (>= 2 reaches the steady state)
    inference_mode: bool = True   # infer: inference_mode (True) or no_grad (False)

    def validate(self) -> "StepConfig":
        for name, value, choices in (("phase", self.phase, PHASES), ("optimizer", self.optimizer, OPTIMIZERS),
                                     ("precision", self.precision, PRECISIONS),
                                     ("target", self.target, ("cuda", "cpu"))):
            if value not in choices:
                raise MemoryConfigError(f"unknown {name} {value!r}", f"use one of: {', '.join(choices)}")
        if self.steps < 1:
            raise MemoryConfigError(f"steps must be >= 1, got {self.steps}", "trace at least one step")
        return self

    @property
    def use_foreach(self) -> bool:
        # torch.optim picks foreach by default when every parameter is a CUDA tensor
        # (_default_to_fused_or_foreach in torch/optim/optimizer.py)
        return self.target == "cuda" if self.foreach is None else self.foreach


def make_optimizer(name: str, params, foreach: bool):
    params = list(params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, foreach=foreach)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=foreach)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=foreach)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, foreach=foreach)
    raise MemoryConfigError(f"unknown optimizer {name!r}", f"use one of: {', '.join(OPTIMIZERS)}")


#: the training losses: ``auto`` (cross-entropy of a ``(batch, classes)`` output, the mean of any
#: other), ``tokens`` (also a token-level cross-entropy over the last axis of a ``(batch, tokens,
#: vocabulary)`` output, as a language model's loss: its fp32 log-probabilities are real memory)
LOSSES = ("auto", "tokens")


def _loss(out, batch: int, kind: str = "auto"):
    """Cross-entropy for each ``(batch, classes)`` output (and, with ``tokens``, each ``(batch,
    tokens, vocabulary)`` one), the mean of any other float output."""
    total = None
    for t in tree_leaves(out):
        if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad):
            continue
        if kind == "tokens" and t.dim() == 3 and t.shape[0] == batch:
            labels = torch.empty(t.shape[:2], dtype=torch.long, device=t.device)
            if t.device.type != "meta":
                labels = labels.random_(0, t.shape[2])
            term = F.cross_entropy(t.flatten(0, 1), labels.flatten())
        elif t.dim() == 2 and t.shape[0] == batch:
            if t.device.type == "meta":  # no values (and randint's meta kernel is a slow Python reference)
                labels = torch.empty((batch,), dtype=torch.long, device=t.device)
            else:
                labels = torch.randint(0, t.shape[1], (batch,), device=t.device)
            term = F.cross_entropy(t, labels)
        else:
            term = t.float().mean()
        total = term if total is None else total + term
    if total is None:
        raise SimulationError("the model's output has no floating-point tensor that requires grad",
                              "train a model whose forward returns its logits or loss")
    return total


def _make_input(batch: int, input_shape, dtype: torch.dtype, meta: bool = False):
    if meta:  # no values (and randn's meta kernel is a slow Python reference)
        return torch.empty(batch, *input_shape, dtype=dtype, device="meta")
    if dtype.is_floating_point:
        return torch.randn(batch, *input_shape, dtype=dtype)
    return torch.randint(0, 100, (batch, *input_shape), dtype=dtype)


#: module types whose forward tests ``x.device.type`` (a fast path the CPU takes and ``meta`` does not)
_DEVICE_DEPENDENT = ("MultiheadAttention", "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
                     "RNNBase", "LiteMLA")
BACKENDS = ("auto", "meta", "fake")


def meta_backend_ok(module: torch.nn.Module) -> bool:
    """Whether ``module`` can run on the meta backend (no device-dependent Python fast path)."""
    for m in module.modules():
        if any(c.__name__ in _DEVICE_DEPENDENT for c in type(m).__mro__):
            return False
    return True


def trace_step(module: torch.nn.Module, input_shape, batch: int, config: StepConfig, fake: bool = True,
               input_dtype: torch.dtype = torch.float32, backend: str = "auto", loss: str = "auto") -> Trace:
    """Run ``config``'s step of ``module`` on a batch of ``batch`` samples of ``input_shape`` and
    return its :class:`Trace`.

    ``module`` may live on the meta device (built without weights) when ``fake`` is true; it is
    materialised on fake CPU tensors inside the trace.  It is modified (moved, mode set), so pass
    a fresh one per call.

    Raises:
        SimulationError: the step cannot run (the message carries PyTorch's reason).
    """
    config.validate()
    if batch < 1:
        raise MemoryConfigError(f"batch size must be >= 1, got {batch}", "pass a positive batch size")
    low = _LOW.get(config.precision)
    pure = config.precision in ("fp16", "bf16")
    if pure:
        module = module.to(low)
        if input_dtype.is_floating_point:
            input_dtype = low
    if backend not in BACKENDS:
        raise MemoryConfigError(f"unknown backend {backend!r}", f"use one of: {', '.join(BACKENDS)}")
    if loss not in LOSSES:
        raise MemoryConfigError(f"unknown loss {loss!r}", f"use one of: {', '.join(LOSSES)}")
    amp = low if not pure else None
    # meta: fp32 only (the meta kernels of batch norm keep fp32 statistics for fp16/bf16 inputs,
    # the fake backend's decompositions the input's dtype)
    if fake and backend != "fake" and (backend == "meta" or (config.precision == "fp32" and meta_backend_ok(module))):
        # what the meta run changes in the module (parameter and buffer slots, train/eval), kept
        # to give the fake run the module as it was if the meta run fails
        saved = [(m, dict(m._parameters), dict(m._buffers), m.training) for m in module.modules()]

        tracer = StorageTracer(kernels=META_KERNELS)
        try:
            with without_dynamo(), tracer:
                _run(module, input_shape, batch, config, "meta", input_dtype, amp, tracer, loss)
            trace = tracer.close()
            trace.backend = "meta"
            return trace
        except PerfseerError:
            raise
        except Exception:  # noqa: BLE001 - e.g. a model that reads a value: the fake backend can
            tracer.close()
            if backend == "meta":
                raise
            for m, params, buffers, training in saved:
                m._parameters.clear()
                m._parameters.update(params)
                m._buffers.clear()
                m._buffers.update(buffers)
                m.training = training
    tracer = StorageTracer()
    fake_mode = _fake_mode() if fake else contextlib.nullcontext()
    try:
        with fake_mode, tracer:
            _run(module, input_shape, batch, config, "fake" if fake else "real", input_dtype, amp, tracer, loss)
    except PerfseerError:
        raise
    except Exception as e:  # the model failed on fake tensors: report why, never a traceback
        raise SimulationError(f"the {config.phase} step could not be simulated: {type(e).__name__}: "
                              f"{str(e).splitlines()[0][:300] if str(e) else ''}",
                              "for inference, perfseer memory falls back to the ONNX graph's liveness "
                              "(--phase infer); training memory of this model cannot be simulated yet") from e
    trace = tracer.close()
    trace.backend = "fake" if fake else "real"
    return trace


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode  # deferred: heavy, loaded on first use

    # allow_non_fake_inputs: tensors a model keeps as plain attributes are converted on use
    return FakeTensorMode(allow_non_fake_inputs=True)


def _materialize(module, device=None) -> None:
    """Give ``module`` fresh (fake CPU, or meta) parameters and buffers, allocated by factory calls
    (so the tracer records them, in the same order on either backend).

    Faster than ``module.to_empty()``, whose ``empty_like`` of each meta tensor makes the fake mode
    convert that tensor first.  Tied parameters stay tied.
    """
    made: dict[int, torch.Tensor] = {}
    for m in module.modules():
        for slots, is_param in ((m._parameters, True), (m._buffers, False)):
            for name, t in list(slots.items()):
                if t is None:
                    continue
                new = made.get(id(t))
                if new is None:
                    new = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device=device)
                    if is_param:
                        new = torch.nn.Parameter(new, requires_grad=t.requires_grad)
                    made[id(t)] = new
                slots[name] = new


def _run(module, input_shape, batch, config, backend, input_dtype, amp_dtype, tracer: StorageTracer,
         loss_kind: str = "auto") -> None:
    # meta: every tensor the step makes without naming a device is a meta tensor too, except in
    # optimizer.step() (Adam's step counters are host tensors whose value is read, as on a GPU)
    on_meta = torch.device("meta") if backend == "meta" else contextlib.nullcontext()
    if backend == "real":
        tracer.register(list(module.parameters()) + list(module.buffers()), "weights")
    else:
        _materialize(module, "meta" if backend == "meta" else None)
        tracer.tag(list(module.parameters()) + list(module.buffers()), "weights")
    x = _make_input(batch, input_shape, input_dtype, meta=backend == "meta")
    tracer.tag([x], "input")
    kernels = KernelChoices(cuda=config.target == "cuda")

    def autocast():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return CudaAutocast(amp_dtype, on_cast=lambda t: tracer.tag([t], "weight_casts"))

    if config.phase == "infer":
        module.eval()
        grad_off = torch.inference_mode() if config.inference_mode else torch.no_grad()
        with grad_off, kernels, on_meta:
            for step in range(2):
                tracer.phase = "forward"
                tracer.mark(f"step{step}.forward")
                with autocast():
                    out = module(x)
                del out
        return

    module.train()
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise SimulationError("the model has no parameter that requires grad", "use --phase infer")
    opt = make_optimizer(config.optimizer, params, config.use_foreach)
    scaler = None
    if config.precision == "amp-fp16":
        # GradScaler's state (torch/amp/grad_scaler.py): the scale and the growth tracker
        with on_meta:
            scaler = (torch.full((), 2.0 ** 16), torch.full((), 0, dtype=torch.int32))
    with kernels:
        for step in range(config.steps):
            tracer.phase = "forward"
            tracer.mark(f"step{step}.forward")
            with autocast(), on_meta:
                out = module(x)
                loss = _loss(out, batch, loss_kind)
            del out
            tracer.phase = "backward"
            tracer.mark(f"step{step}.backward")
            with on_meta:
                if scaler is not None:
                    (loss * scaler[0]).backward()
                else:
                    loss.backward()
            del loss
            tracer.tag([p.grad for p in params], "gradients")
            tracer.phase = "optimizer"
            tracer.mark(f"step{step}.optimizer")
            if scaler is not None:
                with on_meta:
                    inv = scaler[0].double().reciprocal().float()
                    found_inf = torch.full((), 0.0)
                    torch._foreach_mul_([p.grad for p in params if p.grad is not None], inv)
                del inv, found_inf
            opt.step()
            for state in opt.state.values():
                for k, v in state.items():
                    # Adam's step counters live on the host unless capturable/fused (torch/optim/adam.py)
                    tracer.tag([v], "optimizer_state", host=(k == "step"))
            opt.zero_grad(set_to_none=True)
        tracer.phase = "optimizer"
        tracer.mark("end")
