"""One entry point from anything a user can hand us to an ONNX :class:`Skeleton`.

Accepted: a path to an ``.onnx`` file (external data is never read), an ``onnx.ModelProto``, a
``torch.nn.Module`` with an input shape, and the references ``timm:NAME``, ``torchvision:NAME``,
``example:NAME`` (small model graphs that ship with perfseer), ``nb201:ARCH_STR``,
``fbnet:BLOCKS`` and ``ofa:ks=..;e=..;d=..;r=..`` (NAS-space networks, :mod:`perfseer.graph.spaces`;
``ofa:`` needs the ``ofa`` extra), ``hf:NAME`` (HuggingFace transformers from their configuration,
:mod:`perfseer.graph.hf`; needs the ``hf`` extra), and ``space:CONFIG`` (a
network of the PerfSeer model space, :mod:`perfseer.profiling.space`).
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from perfseer.errors import ModelLoadError
from perfseer.graph.onnx_io import Skeleton, read_skeleton, skeleton_from_proto
from perfseer.graph.spaces import SPACES
from perfseer.graph.zoo import ZOOS

REFERENCE_KINDS = (*ZOOS, "example", *SPACES, "space", "hf")


def examples() -> list[str]:
    """Names of the example model graphs bundled with perfseer (``example:NAME``)."""
    folder = resources.files("perfseer") / "examples"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".onnx"))


def example_path(name: str) -> Path:
    path = Path(str(resources.files("perfseer") / "examples" / f"{name}.onnx"))
    if not path.exists():
        raise ModelLoadError(f"no bundled example named '{name}'",
                             f"use one of: {', '.join('example:' + e for e in examples())}")
    return path


def split_reference(model: str) -> tuple[str, str] | None:
    """``"timm:resnet50"`` -> ``("timm", "resnet50")``; ``None`` for a file path."""
    kind, sep, name = model.partition(":")
    if sep and kind in REFERENCE_KINDS and name:
        return kind, name
    return None


def load_skeleton(model, input_shape=None, input_dtypes=None, seq_len: int | None = None,
                  boxes: int | None = None) -> Skeleton:
    """Resolve ``model`` to a :class:`Skeleton`.

    Args:
        model: a path, ``onnx.ModelProto``, ``torch.nn.Module`` or reference string.
        input_shape: for modules and zoo references, the shape of one input sample without the
            batch (zoo models default to their configured resolution).
        input_dtypes: for modules, the torch dtype name of each input.
        seq_len: for ``hf:`` references, tokens per sample (:mod:`perfseer.graph.hf`).
        boxes: for torchvision detectors, the number of boxes each data-dependent selection keeps
            (:mod:`perfseer.graph.detection`).
    """
    import onnx

    if isinstance(model, onnx.ModelProto):
        return skeleton_from_proto(model)
    if isinstance(model, (str, os.PathLike)):
        ref = split_reference(str(model)) if isinstance(model, str) else None
        if ref is None:
            return read_skeleton(model)
        kind, name = ref
        if kind == "example":
            return read_skeleton(example_path(name))
        if kind == "hf":
            from perfseer.graph.hf import export_hf_model

            return export_hf_model(name, input_shape, seq_len)
        if kind == "space":
            # the collection kit's model space; imported lazily, like every builder here
            from perfseer.profiling.space import export_space

            return export_space(name, input_shape)
        if kind in SPACES:
            from perfseer.graph.spaces import export_space_model

            return export_space_model(kind, name, input_shape)
        from perfseer.graph.zoo import export_zoo_model

        return export_zoo_model(kind, name, input_shape, boxes=boxes)[0]
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a core dependency
        torch = None
    if torch is not None and isinstance(model, torch.nn.Module):
        from perfseer.graph.torch_export import skeleton_from_module

        return skeleton_from_module(model, input_shape, input_dtypes, boxes=boxes)
    raise ModelLoadError(
        f"cannot read a model from a {type(model).__name__}",
        "pass an .onnx path, an onnx.ModelProto, a torch.nn.Module with input_shape, "
        "or a reference such as timm:resnet50 / torchvision:resnet50",
    )
