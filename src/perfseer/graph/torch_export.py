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
import io
import json
import logging
import math
import re
import warnings
from collections.abc import Sequence

from perfseer.errors import ModelLoadError, ShapeError, UnsupportedModelError
from perfseer.graph.onnx_io import NOT_EXPORTED, Skeleton

# A prime no real layer width is a multiple of: dims divisible by it scale with the batch.
BATCH_SENTINEL = 7919
META_SENTINEL = "perfseer.batch_sentinel"
META_BUFFERS = "perfseer.buffers"  # JSON list of initializers that are not trainable parameters
META_SOURCE = "perfseer.source"


def meta_twin(module):
    """A deep copy of ``module`` whose parameters and buffers live on the meta device.

    The copy never touches the original's storage: every parameter and buffer is pre-seeded in
    ``deepcopy``'s memo with an empty meta tensor of the same shape and type.
    """
    import torch

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
    """The exporter logs progress and warnings on every call; keep the user's terminal clean."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
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
    """
    import onnx
    import onnx_ir as ir
    import torch

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
    args = tuple(torch.empty((BATCH_SENTINEL, *s), dtype=getattr(torch, d), device="meta")
                 for s, d in zip(shapes, dtypes))
    # Every name of a tied parameter (GPT-2's lm_head.weight is transformer.wte.weight): the
    # exporter names the one initializer after any of them.
    param_names = {n for n, _ in twin.named_parameters(remove_duplicate=False)}
    options = {"input_names": list(input_names)} if input_names else {}
    if opset is not None:
        options["opset_version"] = opset
    try:
        with _quiet(), torch.no_grad():
            program = torch.onnx.export(twin, args, dynamo=True, optimize=False, verbose=False, **options)
    except Exception as e:  # the exporter raises many unrelated types; report them as one
        raise UnsupportedModelError(
            f"torch.onnx.export could not export {source}: {root_cause(e)}",
            "export it to ONNX yourself (torch.onnx.export) and pass the .onnx file",
        ) from e
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
    for key, val in ((META_SENTINEL, str(BATCH_SENTINEL)), (META_BUFFERS, json.dumps(buffers)),
                     (META_SOURCE, source)):
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, val
    assert isinstance(proto, onnx.ModelProto)
    return Skeleton(proto, stripped, source, input_shape_applied=True)


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
    import os
    import traceback

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
