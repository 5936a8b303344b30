"""The Python API of the representation stage."""

from __future__ import annotations

from perfseer.features.perfgraph import PerfGraph, build_perfgraph
from perfseer.graph.extract import extract_graph
from perfseer.graph.load import load_skeleton


def extract(model, batch: int | None = None, input_shape=None, dims: dict[str, int] | None = None,
            input_dtypes=None) -> PerfGraph:
    """Turn a model into its :class:`~perfseer.features.perfgraph.PerfGraph`.

    Args:
        model: an ``.onnx`` path (external weights are never read), an ``onnx.ModelProto``, a
            ``torch.nn.Module`` (with ``input_shape``), or a reference: ``"timm:NAME"`` (append
            ``@reparam`` for the fused inference form), ``"torchvision:NAME"``, ``"nb201:ARCH_STR"``,
            ``"fbnet:BLOCKS"`` or ``"example:NAME"``.
        batch: the batch size to bind (default 1).
        input_shape: one sample's shape without the batch, e.g. ``(3, 224, 224)``; required for a
            module, optional otherwise (overrides the first input's shape).
        dims: values of other symbolic input dimensions, e.g. ``{"seq": 128}``; for a torchvision
            detector, ``{"boxes": N}`` states how many boxes its data-dependent selections keep
            (default 1000; see ``docs/models.md``).
        input_dtypes: for a module, the torch dtype name of each input (default ``float32``).

    Example:
        >>> pg = perfseer.extract("example:resnet18", batch=8)
        >>> pg.summary()["macs"]  # doctest: +SKIP
    """
    from perfseer.graph.detection import DETECTION_DIM

    boxes = (dims or {}).get(DETECTION_DIM)
    skel = load_skeleton(model, input_shape=input_shape, input_dtypes=input_dtypes, boxes=boxes)
    graph = extract_graph(skel, batch=batch, input_shape=None if skel.input_shape_applied else input_shape,
                          dims=dims)
    return build_perfgraph(graph)
