"""From anything a user hands us to a :class:`~perfseer.features.perfgraph.PerfGraph`: resolve the
reference, extract the graph, build the features (``perfseer.extract``)."""

from __future__ import annotations

import re

from perfseer.errors import ShapeError
from perfseer.features.perfgraph import PerfGraph, build_perfgraph
from perfseer.graph.detection import DETECTION_DIM
from perfseer.graph.extract import extract_graph
from perfseer.sources.load import load_skeleton


def extract(model, batch: int | None = None, input_shape=None, dims: dict[str, int] | None = None,
            input_dtypes=None, seq_len: int | None = None, weight_work: bool | None = None) -> PerfGraph:
    """Turn a model into its :class:`~perfseer.features.perfgraph.PerfGraph`.

    Args:
        model: an ``.onnx`` path (external weights are never read), an ``onnx.ModelProto``, a
            ``torch.nn.Module`` (with ``input_shape``), or a reference: ``"timm:NAME"`` (append
            ``@reparam`` for the fused inference form), ``"torchvision:NAME"``, ``"nb201:ARCH_STR"``,
            ``"fbnet:BLOCKS"``, ``"example:NAME"`` or ``"hf:NAME"`` (a HuggingFace transformer
            from its configuration, see :mod:`perfseer.sources.hf`).
        batch: the batch size to bind (default 1).
        input_shape: one sample's shape without the batch, e.g. ``(3, 224, 224)``; required for a
            module, optional otherwise (overrides the first input's shape).
        dims: values of other symbolic input dimensions, e.g. ``{"seq": 128}``; for a torchvision
            detector, ``{"boxes": N}`` states how many boxes its data-dependent selections keep
            (default 1000; see ``docs/concepts/perfgraph.md``).
        input_dtypes: for a module, the torch dtype name of each input (default ``float32``).
        seq_len: tokens per sample: the sequence length an ``"hf:NAME"`` model is built at
            (default 128), or, for an ONNX model, the value of its symbolic sequence dimensions
            (input dimensions whose name contains ``seq``, e.g. ``sequence_length``).
        weight_work: keep the work a model does on its own weights at every forward (weight
            standardisation, bias-table gathers) as device operators (``True``) or fold it
            (``False``); default ``PERFSEER_WEIGHT_WORK`` (off).  A predictor extracts the way its
            training graphs were (:attr:`perfseer.runtime.predictor.Predictor.weight_work`).

    Example:
        >>> pg = perfseer.extract("example:resnet18", batch=8)
        >>> pg.summary()["macs"]  # doctest: +SKIP
    """

    boxes = (dims or {}).get(DETECTION_DIM)
    is_hf = _is_hf(model)
    skel = load_skeleton(model, input_shape=input_shape, input_dtypes=input_dtypes,
                         seq_len=seq_len if is_hf else None, boxes=boxes)
    return extract_skeleton(skel, batch, input_shape, dims, seq_len, weight_work, is_hf)


def _is_hf(model) -> bool:
    """An ``hf:`` name or a transformers model (its sequence length is set at export)."""
    return model.startswith("hf:") if isinstance(model, str) else type(model).__module__.startswith("transformers.")


def extract_skeleton(skel, batch: int | None = None, input_shape=None, dims: dict[str, int] | None = None,
                     seq_len: int | None = None, weight_work: bool | None = None, is_hf: bool = False) -> PerfGraph:
    """:func:`extract` of a loaded (or cached) skeleton, which it consumes (``is_hf``: exported
    at ``seq_len`` already)."""
    if seq_len is not None and not is_hf:
        dims = _bind_seq_len(skel, seq_len, dims)
    graph = extract_graph(skel, batch=batch, input_shape=None if skel.input_shape_applied else input_shape,
                          dims=dims, weight_work=weight_work)
    return build_perfgraph(graph)


_SEQ_DIM = re.compile(r"seq", re.IGNORECASE)
_NOT_SEQ_DIM = re.compile(r"past|total|cache|batch", re.IGNORECASE)


def _bind_seq_len(skel, seq_len: int, dims: dict[str, int] | None) -> dict[str, int]:
    """``dims`` plus ``seq_len`` for every symbolic sequence dimension of the inputs (a name with
    ``seq`` in it, not a cache's ``past_sequence_length``) that ``dims`` does not bind."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ShapeError(f"sequence length must be a positive integer, got {seq_len!r}", "pass --seq-len N with N >= 1")
    out = dict(dims or {})
    symbolic = [d.dim_param for vi in skel.model.graph.input for d in vi.type.tensor_type.shape.dim[1:]
                if d.dim_param]
    seq = [n for n in dict.fromkeys(symbolic) if _SEQ_DIM.search(n) and not _NOT_SEQ_DIM.search(n)]
    if not seq:
        raise ShapeError(
            f"--seq-len applies to hf: references and to models with a symbolic sequence dimension; "
            f"{skel.source} has none (symbolic input dimensions: {', '.join(dict.fromkeys(symbolic)) or 'none'})",
            "bind a dimension by name with --dim NAME=VALUE, or set the shape with --input-shape")
    for name in seq:
        out.setdefault(name, seq_len)
    return out
