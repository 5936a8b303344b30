"""Model references -> runnable models (random weights) for the measurement backends.

The graph stage exports models without weights (:mod:`perfseer.sources.load`); measuring needs the
real thing.  PyTorch backends take a ``torch.nn.Module``: ``space:CONFIG`` (or the config dict),
``nb201:``, ``fbnet:``, ``timm:`` and ``torchvision:`` references are built with random
initialisation (no download).  ONNX Runtime takes ONNX with weights: an ``.onnx`` path is used as
it is, and the PyTorch-buildable references are exported with a dynamic batch axis.
``example:`` graphs ship without weights and cannot be measured.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Mapping

from perfseer.errors import ModelLoadError
from perfseer.sources.schemes import SCHEMES, scheme_word, split_reference
from perfseer.sources.space import build_space_model

#: The schemes the measurement backends can build with random weights, in table order.
TORCH_SCHEMES = tuple(name for name, s in SCHEMES.items() if s.measurable)


def scheme_of(model) -> str | None:
    """``"space"`` for a model-space config dict, the scheme word of anything shaped like a
    reference (known or not: an unknown one fails in :func:`build_module` with the choices), else
    ``None`` (a path or a module)."""
    if isinstance(model, Mapping):
        return "space"
    return scheme_word(model)


def build_module(model):
    """A ``torch.nn.Module`` (random weights, CPU, eval mode) for a reference, config or module.

    Built on the current default device (inside ``with torch.device("meta")`` no weight is
    allocated).

    Raises:
        ModelLoadError: unknown or malformed reference, or one with no PyTorch definition.
    """
    import torch  # deferred for CLI start-up

    if isinstance(model, torch.nn.Module):
        return model
    if isinstance(model, Mapping):
        return build_space_model(model)
    scheme = scheme_of(model)
    if scheme in TORCH_SCHEMES:
        # meta=False: built on the default device (CPU for measurement, meta for the simulator)
        return SCHEMES[scheme].build(split_reference(model)[1], meta=False)[0]
    if scheme == "example" or (isinstance(model, (str, os.PathLike)) and str(model).lower().endswith(".onnx")):
        raise ModelLoadError(f"{str(model)[:80]} is an ONNX graph, not a PyTorch model",
                             "measure it with --backend ort-cpu (example: graphs have no weights: "
                             "measure the torchvision: model instead)")
    raise ModelLoadError(f"cannot build a model from {str(model)[:80]!r}",
                         f"give a reference with one of the schemes {', '.join(TORCH_SCHEMES)}, or an .onnx file")


def weight_bytes(module) -> int:
    """Bytes of a module's parameters and buffers."""
    return sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))


def export_onnx(model, input_shape, path: str) -> None:
    """Export a PyTorch-buildable reference to an ONNX file with weights and a dynamic batch axis.

    Uses the TorchScript exporter first (a fraction of a second for the model space), then the
    dynamo exporter for models it cannot trace.  The file's input must keep a symbolic batch axis
    (every batch size is run on the one file); an export that fixed it raises
    :class:`~perfseer.errors.ModelLoadError` naming both exporters' outcomes.  Written atomically
    (a temporary file, renamed).
    """
    import onnx  # deferred: heavy, loaded on first use
    import torch  # deferred: heavy, loaded on first use

    module = build_module(model).eval()
    x = torch.randn(2, *input_shape)
    tmp = f"{path}.{os.getpid()}.tmp"
    first_error = None
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        try:
            buf = io.BytesIO()
            torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
            data = buf.getvalue()
        except Exception as e:  # noqa: BLE001 - fall back to the other exporter, whatever went wrong
            first_error = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            program = torch.onnx.export(module, (x,), dynamo=True, verbose=False,
                                        dynamic_shapes=({0: torch.export.Dim("batch")},))
            data = program.model_proto.SerializeToString()
    batch_dim = onnx.load_model_from_string(data).graph.input[0].type.tensor_type.shape.dim[0]
    if not batch_dim.dim_param:
        exporter = f"the dynamo exporter (the TorchScript exporter failed: {first_error})" if first_error \
            else "the TorchScript exporter"
        raise ModelLoadError(f"{model}: {exporter} fixed the batch axis at {batch_dim.dim_value} instead of "
                             "keeping it symbolic", "measure it with a PyTorch backend (torch-cpu / torch-cuda), "
                             "or export it yourself with a dynamic batch axis and measure the .onnx file")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
