"""Networks of neural-architecture-search spaces, built from their architecture encodings.

References (see :func:`perfseer.graph.load.load_skeleton`):

- ``nb201:ARCH_STR``: the NAS-Bench-201 CIFAR-10 network (:mod:`.nb201`), e.g.
  ``nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|``;
- ``fbnet:BLOCKS``: the FBNet CIFAR-100 network (:mod:`.fbnet`), the 22 block choices separated by
  single spaces, e.g. ``fbnet:k3_e1 k3_e6 k5_e1_g2 skip ...``.

Both take 3x32x32 images.  The PyTorch builders (:mod:`.nb201`, :mod:`.fbnet`) define the networks;
the references emit their graphs directly as ONNX (:mod:`.nb201_onnx`, :mod:`.fbnet_onnx`,
milliseconds instead of seconds of ``torch.onnx`` export), identical to the builders' exports.
"""

from __future__ import annotations

SPACES = ("nb201", "fbnet")
_DEFAULT_INPUT = (3, 32, 32)


def build_space_model(space: str, arch: str, for_graph: bool = False):
    """The ``torch.nn.Module`` of ``arch`` in ``space`` (``"nb201"`` or ``"fbnet"``), random weights.

    Args:
        for_graph: build the module whose export is the reference's graph: NAS-Bench-201 networks
            then also return the nodes that no edge reads, which the measured networks compute.

    Raises:
        ModelLoadError: unknown space or malformed architecture.
    """
    if space == "nb201":
        from perfseer.graph.spaces.nb201 import build_nb201

        return build_nb201(arch, keep_unused=for_graph)
    if space == "fbnet":
        from perfseer.graph.spaces.fbnet import build_fbnet

        return build_fbnet(arch)
    from perfseer.errors import ModelLoadError

    raise ModelLoadError(f"unknown architecture space {space!r}", f"use one of: {', '.join(SPACES)}")


def export_space_model(space: str, arch: str, input_shape=None):
    """The ONNX :class:`~perfseer.graph.onnx_io.Skeleton` of ``arch``: emitted directly for both spaces
    (the graph their PyTorch builders export); other spaces would be built on the meta device and exported.

    Args:
        input_shape: one sample without the batch (default ``(3, 32, 32)``).
    """
    if space == "nb201":
        # Emitted directly as ONNX (milliseconds), the same graph the PyTorch builder exports.
        from perfseer.graph.spaces.nb201_onnx import nb201_skeleton

        return nb201_skeleton(arch, tuple(input_shape or _DEFAULT_INPUT))
    if space == "fbnet":
        # Likewise (:mod:`.fbnet_onnx`): the graph of the PyTorch builder's export.
        from perfseer.graph.spaces.fbnet_onnx import fbnet_skeleton

        return fbnet_skeleton(arch, tuple(input_shape or _DEFAULT_INPUT))
    import torch

    from perfseer.graph.torch_export import skeleton_from_module

    with torch.device("meta"):
        module = build_space_model(space, arch, for_graph=True)
    return skeleton_from_module(module.eval(), input_shape or _DEFAULT_INPUT, source=f"{space}:{arch}",
                                on_meta=True)


def __getattr__(name: str):
    # The builders need torch: import them only when asked for.
    if name in ("build_nb201", "parse_nb201"):
        from perfseer.graph.spaces import nb201

        return getattr(nb201, name)
    if name in ("build_fbnet", "parse_fbnet"):
        from perfseer.graph.spaces import fbnet

        return getattr(fbnet, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SPACES", "build_space_model", "export_space_model", "build_nb201", "parse_nb201", "build_fbnet",
           "parse_fbnet"]
