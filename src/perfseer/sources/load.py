"""One entry point from anything a user can hand us to an ONNX :class:`Skeleton`.

Accepted: a path to an ``.onnx`` file (external data is never read), an ``onnx.ModelProto``, a
``torch.nn.Module`` with an input shape, and the references ``timm:NAME``, ``torchvision:NAME``,
``example:NAME`` (small model graphs that ship with perfseer), ``nb201:ARCH_STR``,
``fbnet:BLOCKS`` and ``ofa:ks=..;e=..;d=..;r=..`` (NAS-space networks, :mod:`perfseer.sources.nas`;
``ofa:`` needs the ``ofa`` extra), ``hf:NAME`` (HuggingFace transformers from their configuration,
:mod:`perfseer.sources.hf`; needs the ``hf`` extra), and ``space:CONFIG`` (a
network of the PerfSeer model space, :mod:`perfseer.sources.space`).  A reference is exported
by its scheme in the table of :mod:`perfseer.sources.schemes`.
"""

from __future__ import annotations

import os

from perfseer.errors import ModelLoadError
from perfseer.graph.onnx_io import Skeleton, read_skeleton, skeleton_from_proto
from perfseer.graph.torch_export import skeleton_from_module
from perfseer.sources.hf import export_hf_module, is_hf_module
from perfseer.sources.schemes import NAMES, SCHEMES, example_path, examples, split_reference

#: The reference schemes (the names of :data:`perfseer.sources.schemes.SCHEMES`).
REFERENCE_KINDS = NAMES

__all__ = ["REFERENCE_KINDS", "example_path", "examples", "load_skeleton", "split_reference"]


def load_skeleton(model, input_shape=None, input_dtypes=None, seq_len: int | None = None,
                  boxes: int | None = None) -> Skeleton:
    """Resolve ``model`` to a :class:`Skeleton`.

    Args:
        model: a path, ``onnx.ModelProto``, ``torch.nn.Module`` or reference string.
        input_shape: for modules and zoo references, the shape of one input sample without the
            batch (zoo models default to their configured resolution).
        input_dtypes: for modules, the torch dtype name of each input.
        seq_len: for ``hf:`` references, tokens per sample (:mod:`perfseer.sources.hf`).
        boxes: for torchvision detectors, the number of boxes each data-dependent selection keeps
            (:mod:`perfseer.graph.detection`).
    """
    import onnx  # deferred for CLI start-up

    if isinstance(model, onnx.ModelProto):
        return skeleton_from_proto(model)
    if isinstance(model, (str, os.PathLike)):
        ref = split_reference(str(model)) if isinstance(model, str) else None
        if ref is None:
            return read_skeleton(model)
        kind, name = ref
        return SCHEMES[kind].export(name, input_shape, seq_len=seq_len, boxes=boxes)
    try:
        import torch  # deferred: heavy, loaded on first use
    except ImportError:  # pragma: no cover - torch is a core dependency
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        if is_hf_module(model):  # caches off, inputs by name
            return export_hf_module(model, input_shape, seq_len)

        return skeleton_from_module(model, input_shape, input_dtypes, boxes=boxes)
    raise ModelLoadError(
        f"cannot read a model from a {type(model).__name__}",
        "pass an .onnx path, an onnx.ModelProto, a torch.nn.Module with input_shape, "
        "or a reference such as timm:resnet50 / torchvision:resnet50",
    )
