"""PyTorch ``nn.Module`` -> ONNX skeleton, without allocating or copying the model's weights.

The module is exported by ``torch.onnx.export(dynamo=True)`` on the ``meta`` device: a twin of the
module whose parameters and buffers are meta tensors (no storage) is traced with a meta input, so
a ViT-L-size model exports in the memory its graph needs.  The batch dimension is exported as a
static *sentinel* size (:data:`BATCH_SENTINEL`); the extractor recognises every dimension that is a
multiple of it as batch-proportional, which is what lets a PerfGraph re-bind to any batch size.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import io
import json
import logging
import math
import os
import re
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Sequence

from perfseer.deadline import deadline
from perfseer.errors import ExportTimeoutError, ModelLoadError, ShapeError, UnsupportedModelError
from perfseer.graph import detection
from perfseer.graph.onnx_io import NOT_EXPORTED, Skeleton

# A prime no real layer width is a multiple of: dims divisible by it scale with the batch.
BATCH_SENTINEL = 7919
META_SENTINEL = "perfseer.batch_sentinel"
META_BUFFERS = "perfseer.buffers"  # JSON list of initializers that are not trainable parameters
META_SOURCE = "perfseer.source"
META_FIXED_BATCH = "perfseer.fixed_batch"  # set when the batch is baked into the export (detectors)
# JSON {"sites": [[p, [dims at the sentinel batch]], ...], "fused": n}: the dropouts a training-mode
# forward applies (:func:`training_dropouts`); {"error": ...} when it failed, absent for detectors
META_DROPOUT = "perfseer.dropout"
# Seconds an export may take before it is abandoned with ExportTimeoutError; progress is printed
# to stderr every PROGRESS_EVERY_S seconds once an export has run that long.
EXPORT_TIME_LIMIT_S = 600.0
PROGRESS_EVERY_S = 15.0


def export_time_limit() -> float:
    """The export time limit: ``PERFSEER_EXPORT_TIMEOUT`` (seconds) or :data:`EXPORT_TIME_LIMIT_S`."""
    text = os.environ.get("PERFSEER_EXPORT_TIMEOUT", "")
    try:
        value = float(text) if text else EXPORT_TIME_LIMIT_S
    except ValueError:
        value = EXPORT_TIME_LIMIT_S
    return value if value > 0 else EXPORT_TIME_LIMIT_S


@contextlib.contextmanager
def time_limit(source: str, seconds: float | None = None):
    """Bound an export in time and report progress: no export hangs silently.

    In the main thread the exporter is interrupted after ``seconds`` (:func:`perfseer.deadline.deadline`,
    which never interrupts torch's own cleanup) and :class:`ExportTimeoutError` is raised; in
    other threads only the progress lines are printed.
    """
    seconds = export_time_limit() if seconds is None else seconds
    start = time.monotonic()
    done = threading.Event()

    def heartbeat():
        while not done.wait(PROGRESS_EVERY_S):
            print(f"perfseer: still exporting {source} ({time.monotonic() - start:.0f} s, limit {seconds:.0f} s; "
                  "PERFSEER_EXPORT_TIMEOUT changes it)", file=sys.stderr, flush=True)

    def expired():
        return ExportTimeoutError(
            f"exporting {source} did not finish within {seconds:.0f} s",
            "set PERFSEER_EXPORT_TIMEOUT=SECONDS to allow longer, use a smaller --input-shape, "
            "or export to ONNX yourself and pass the .onnx file",
        )

    thread = threading.Thread(target=heartbeat, daemon=True)
    thread.start()
    try:
        with deadline(seconds, expired):
            yield
    finally:
        done.set()


def meta_twin(module):
    """A deep copy of ``module`` whose parameters and buffers live on the meta device.

    The copy never touches the original's storage: every parameter and buffer is pre-seeded in
    ``deepcopy``'s memo with an empty meta tensor of the same shape and type.
    """
    import torch  # deferred: heavy, loaded on first use

    memo: dict[int, object] = {}
    for p in module.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(module, memo)


def _normalise_shapes(input_shape) -> list[tuple[int, ...]]:
    if input_shape is None:
        raise ShapeError("a PyTorch module needs the shape of its input",
                         "pass input_shape=(3, 224, 224) (Python) or --input-shape 3x224x224 (CLI)")
    shapes = [input_shape] if input_shape and isinstance(input_shape[0], int) else list(input_shape)
    out = []
    for s in shapes:
        s = tuple(int(d) for d in s)
        if any(d <= 0 for d in s):
            raise ShapeError(f"input shape {s} has a zero or negative dimension",
                             "give every dimension (without the batch) as a positive integer")
        out.append(s)
    return out


@contextlib.contextmanager
def _quiet():
    """The exporter logs progress and warnings on every call; keep the user's terminal clean.

    ``torch.export`` also logs its failures at ERROR level ("always_classified is unsupported.");
    perfseer raises each one as its own error naming the problem, so those lines are dropped too.
    """
    quiet = {"torch.onnx": logging.ERROR, "torch.export": logging.CRITICAL, "torch._dynamo": logging.ERROR,
             "onnxscript": logging.ERROR}
    loggers = [logging.getLogger(n) for n in quiet]
    levels = [lg.level for lg in loggers]
    for lg, level in zip(loggers, quiet.values()):
        lg.setLevel(level)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def skeleton_from_module(
    module,
    input_shape: Sequence[int] | Sequence[Sequence[int]],
    input_dtypes: Sequence[str] | None = None,
    source: str | None = None,
    on_meta: bool = False,
    input_names: Sequence[str] | None = None,
    opset: int | None = None,
    boxes: int | None = None,
) -> Skeleton:
    """Export ``module`` to an ONNX :class:`Skeleton` with a sentinel batch dimension.

    Args:
        module: the model; it is not modified and its weights are not copied.
        input_shape: the shape of one sample, without the batch (``(3, 224, 224)``), or a list of
            such shapes for a module with several inputs.
        input_dtypes: torch dtype names per input (default ``float32``; e.g. ``int64`` for token ids).
        source: a name for messages and metadata.
        on_meta: the module already lives on the meta device.
        input_names: names of the graph inputs (default: the exporter's, ``args_0``...).
        opset: the ONNX opset to export at (default: the exporter's).
        boxes: for a torchvision detector, the number of boxes each data-dependent selection keeps
            (:mod:`perfseer.graph.detection`; default :data:`~perfseer.graph.detection.DEFAULT_BOXES`).
            Detectors loop over the images of a batch, so they are exported at batch 1, fixed.
    """
    import onnx  # deferred: heavy, loaded on first use
    import onnx_ir as ir  # deferred: loaded on first use
    import torch  # deferred: heavy, loaded on first use

    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(f"expected a torch.nn.Module, got {type(module).__name__}",
                             "pass the model object, an ONNX file, or a timm:/torchvision: reference")
    shapes = _normalise_shapes(input_shape)
    dtypes = list(input_dtypes or ["float32"] * len(shapes))
    if len(dtypes) != len(shapes):
        raise ShapeError(f"{len(shapes)} input shapes but {len(dtypes)} input dtypes",
                         "give one dtype per input")
    source = source or type(module).__name__
    twin = module if on_meta else meta_twin(module)
    twin.eval()

    detector = detection.is_detection_model(twin)
    batch = 1 if detector else BATCH_SENTINEL
    args = tuple(torch.empty((batch, *s), dtype=getattr(torch, d), device="meta")
                 for s, d in zip(shapes, dtypes))
    # Every name of a tied parameter (GPT-2's lm_head.weight is transformer.wte.weight): the
    # exporter names the one initializer after any of them.
    param_names = {n for n, _ in twin.named_parameters(remove_duplicate=False)}
    extra = {"input_names": list(input_names)} if input_names else {}
    if opset is not None:
        extra["opset_version"] = opset
    static = contextlib.nullcontext()
    if detector:
        extra["custom_translation_table"] = detection.translation_table()
        static = detection.static_detection(boxes or detection.DEFAULT_BOXES)
    try:
        with time_limit(source), _quiet(), torch.no_grad(), static:
            program = torch.onnx.export(twin, args, dynamo=True, optimize=False, verbose=False, **extra)
    except ExportTimeoutError:
        raise
    except Exception as e:  # the exporter raises many unrelated types; report them as one
        mismatch = _channel_mismatch(e, shapes)
        if mismatch is not None:
            raise mismatch from e
        raise UnsupportedModelError(
            f"torch.onnx.export could not export {source}: {root_cause(e)}",
            "export it to ONNX yourself (torch.onnx.export) and pass the .onnx file",
        ) from e
    dropout = None if detector else training_dropouts(twin, args, source)
    graph = program.model.graph
    buffers, stripped = [], set()
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if name not in param_names:
            buffers.append(name)
        keep = tensor is not None and math.prod(tensor.shape.numpy()) <= 4096 and _has_data(tensor)
        if not keep:
            nbytes = math.prod(value.shape.numpy()) * value.dtype.itemsize
            value.const_value = ir.ExternalTensor(NOT_EXPORTED, 0, int(nbytes), value.dtype,
                                                  shape=value.shape, name=name, base_dir="")
            stripped.add(name)
    proto = ir.serde.serialize_model(program.model)
    # Stack traces and FX names on every node triple the file and slow every pass over it;
    # value infos are re-derived by the extractor's own shape inference.
    _readable_names(proto.graph)
    for node in proto.graph.node:
        del node.metadata_props[:]
    del proto.graph.value_info[:]
    meta = [(META_BUFFERS, json.dumps(buffers)), (META_SOURCE, source)]
    meta.append((META_FIXED_BATCH, "1") if detector else (META_SENTINEL, str(BATCH_SENTINEL)))
    if dropout is not None:
        meta.append((META_DROPOUT, json.dumps(dropout)))
    for key, val in meta:
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, val
    assert isinstance(proto, onnx.ModelProto)
    return Skeleton(proto, stripped, source, input_shape_applied=True)


def training_dropouts(module, args, source: str = "") -> dict | None:
    """The dropouts one training-mode forward of ``module`` (on the meta device) applies.

    The export is in eval mode, where dropout is the identity and leaves no ONNX node; a training
    step runs each active one as kernels (mask and scale forward, a multiply backward).  Every
    ``torch.nn.functional`` dropout call (``nn.Dropout`` modules call it too) with ``training`` on
    and ``0 < p < 1`` is a site: ``[p, shape of its input]`` (at the export's sentinel batch).  A
    dropout with ``p = 0`` launches nothing in PyTorch and is left out.  Dropout inside
    ``scaled_dot_product_attention`` (``dropout_p``) runs inside the fused attention kernel: only
    counted (``fused``).  ``nn.MultiheadAttention`` with ``need_weights`` (its default) drops the
    attention weights as a separate kernel: a site of ``(batch x heads, target, source)``.

    Returns ``{"sites": [...], "fused": n}``, or ``{"error": why}`` if the training-mode forward
    fails (the sites are then unknown and a training step gets none).  The module's training flags are restored; its parameters are meta
    tensors (the inputs fake ones), so nothing is computed.
    """

    import torch  # deferred: heavy, loaded on first use
    import torch.nn.functional as F  # deferred: heavy, loaded on first use
    from torch.overrides import TorchFunctionMode  # deferred: heavy, loaded on first use

    drops = {F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout}
    signatures = {f: inspect.signature(f) for f in drops | {F.multi_head_attention_forward}}
    found: dict = {"sites": [], "fused": 0}

    class _Record(TorchFunctionMode):
        def __torch_function__(self, func, types, fargs=(), kwargs=None):
            kwargs = kwargs or {}
            if func in drops:
                a = signatures[func].bind(*fargs, **kwargs).arguments
                p, training = float(a.get("p", 0.5)), bool(a.get("training", True))
                if training and 0.0 < p < 1.0:
                    found["sites"].append([p, [int(d) for d in a["input"].shape]])
                return a["input"]  # the identity: the shapes downstream are unchanged
            if func is F.scaled_dot_product_attention:
                p = kwargs.get("dropout_p", fargs[4] if len(fargs) > 4 else 0.0)
                found["fused"] += int(float(p) > 0.0)
            elif func is F.multi_head_attention_forward:
                a = signatures[func].bind(*fargs, **kwargs).arguments
                if a.get("training", True) and float(a.get("dropout_p", 0.0)) > 0.0:
                    q, k = a["query"], a["key"]
                    batched = q.dim() == 3
                    tgt, src = q.shape[0], k.shape[0]
                    bsz = q.shape[1] if batched else 1
                    if a.get("need_weights", True):
                        found["sites"].append([float(a["dropout_p"]), [int(bsz * a["num_heads"]), int(tgt), int(src)]])
                    else:
                        found["fused"] += 1
            return func(*fargs, **kwargs)

    from torch._subclasses.fake_tensor import FakeTensorMode  # deferred: heavy, loaded on first use

    flags = {m: m.training for m in module.modules()}
    error = None
    try:
        module.train()
        # Under fake tensors, as in torch.export: code that reads a value when not tracing
        # (transformers' packed-sequence check) skips it; plain meta tensors as a fallback.
        for fake in (True, False):
            found["sites"], found["fused"] = [], 0
            try:
                with _quiet(), torch.no_grad(), (FakeTensorMode(allow_non_fake_inputs=True) if fake
                                                 else contextlib.nullcontext()):
                    inputs = [torch.empty(a.shape, dtype=a.dtype, device="meta") for a in args]
                    with _Record():
                        module(*inputs)
                return found
            except Exception as e:  # a model whose training forward needs more (targets...): unknown
                error = error or e
    finally:
        for m, t in flags.items():
            m.training = t
    return {"error": f"{type(error).__name__}: {_first_line(error)}"[:300]}


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def root_cause(e: BaseException) -> str:
    """The real cause of an export failure, in one line without terminal colour codes.

    The exporter wraps the cause (an unsupported operator, a data-dependent branch, a module
    changed during the forward pass) in layers whose messages are generic and coloured for a
    terminal.  This gives ``Type: message`` of the innermost exception, the message of the one
    around it when that adds something, and the deepest line of model code on the way (outside
    torch), where the model did what the exporter could not follow.
    """
    chain = [e]
    while chain[-1].__cause__ is not None and len(chain) < 20:
        chain.append(chain[-1].__cause__)
    inner = chain[-1]
    text = f"{type(inner).__name__}: {_first_line(inner)}"
    if len(chain) > 2 and _first_line(chain[-2]) not in text:
        text += f" (in: {_first_line(chain[-2])})"
    where = _model_frame(chain)
    return text + (f" at {where}" if where else "")


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(e).__name__


_FRAMEWORK_DIRS = ("torch", "onnxscript", "onnx_ir", "onnx", "perfseer", "contextlib.py", "functools.py")  # path parts


def _model_frame(chain) -> str:
    """``file.py:LINE `code``` of the deepest frame in model code (not torch, not perfseer)."""

    for exc in reversed(chain):
        frames = traceback.extract_tb(exc.__traceback__)
        for fr in reversed(frames):
            parts = fr.filename.replace(os.sep, "/").split("/")
            if any(p in _FRAMEWORK_DIRS for p in parts) or parts[-1].startswith("<"):
                continue  # torch, the exporter, perfseer, generated code (<string>)
            if "transformers" in parts and parts[-1] in ("generic.py", "output_capturing.py", "import_utils.py"):
                continue  # transformers' decorators around every forward
            code = f" `{fr.line.strip()[:120]}`" if fr.line else ""
            return f"{parts[-1]}:{fr.lineno}{code}"
    return ""


_CHANNELS = re.compile(r"weight of size \[([\d, ]+)\], expected input\[([\d, ]+)\] to have (\d+) channels, "
                       r"but got (\d+) channels")


_RANK = re.compile(r"Expected \dD \(unbatched\) or \dD \(batched\) input to conv(\d)d")


def _channel_mismatch(error: BaseException, shapes) -> ShapeError | None:
    """A convolution's channel or rank error anywhere in ``error``'s chain, as a ShapeError naming
    the mismatch."""
    seen = 0
    while error is not None and seen < 8:
        m = _CHANNELS.search(str(error))
        if m:
            return input_channel_error(shapes[0], int(m.group(3)), int(m.group(4)), f"a convolution with weight [{m.group(1)}]",
                                       weight_rank=len(m.group(1).split(",")))
        m = _RANK.search(str(error))
        if m:  # too few axes even for an unbatched call; the channel count is not in the message
            dims = int(m.group(1))
            return input_rank_error(shapes[0], f"a {dims}-D convolution", dims + 2)
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def input_rank_error(shape, where: str, weight_rank: int, channels: int | None = None) -> ShapeError:
    """The error for an input with fewer axes than a convolution of weight rank ``weight_rank``
    reads (channels and its spatial axes, the batch apart), with a shape that would do."""
    axes = ["channels"] + ["depth", "height", "width"][-(weight_rank - 2):]
    spatial = list(shape[1:] if len(shape) > 1 or (channels and shape[0] == channels) else shape) or [224]
    example = [channels or "C"] + spatial + [spatial[-1]] * (weight_rank - 2 - len(spatial))
    return ShapeError(f"input shape {'x'.join(map(str, shape))} has {len(shape)} ax{'is' if len(shape) == 1 else 'es'}, "
                      f"but {where} reads {weight_rank - 1} ({' x '.join(axes)}, the batch apart)",
                      f"give all {weight_rank - 1}, e.g. {'x'.join(map(str, example))}")


def input_channel_error(shape, expected: int, got: int, where: str, weight_rank: int | None = None) -> ShapeError:
    """The error for an input whose channel axis (axis 1, NCHW) contradicts the model's first convolution.

    ``weight_rank`` (the convolution weight's rank, when known) tells a shape with too few axes
    (``3x224`` for a 2-D convolution, which reads channels x height x width) from one whose
    channels are wrong.
    """
    if weight_rank is not None and len(shape) < weight_rank - 1:
        return input_rank_error(shape, where, weight_rank, expected)
    shown = "x".join(map(str, shape))
    channels_last = len(shape) >= 3 and shape[-1] == expected and shape[0] != expected
    fix = (f"the shape looks channels-last (HxWxC): give it channels first, "
           f"{'x'.join(map(str, (shape[-1], *shape[:-1])))}" if channels_last
           else f"give an input shape with {expected} channels first, e.g. {'x'.join(map(str, (expected, *shape[1:])))}")
    return ShapeError(f"input shape {shown} has {got} channels on axis 1 (NCHW), but {where} expects {expected}", fix)


def _readable_names(graph) -> None:
    """Name nodes after the module that ran them (``layer1.0.conv2``) instead of ``node_conv2d_6``."""
    seen: dict[str, int] = {}
    for node in graph.node:
        scopes = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.name_scopes"), None)
        if not scopes:
            continue
        try:
            parts = json.loads(scopes.replace("'", '"'))
        except json.JSONDecodeError:
            continue
        path = next((p for p in reversed(parts[:-1]) if p), "")  # scopes are cumulative module paths
        if not path:
            continue
        base = f"{path}/{node.op_type}"
        seen[base] = seen.get(base, 0) + 1
        node.name = base if seen[base] == 1 else f"{base}_{seen[base] - 1}"


def _has_data(tensor) -> bool:
    raw = getattr(tensor, "raw", None)
    device = getattr(raw, "device", None)
    return device is None or str(device) != "meta"
