"""Networks of neural-architecture-search spaces, built from their architecture encodings.

References (the table of :mod:`perfseer.sources.schemes`):

- ``nb201:ARCH_STR``: the NAS-Bench-201 CIFAR-10 network (:mod:`.nb201`), e.g.
  ``nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|``;
- ``fbnet:BLOCKS``: the FBNet CIFAR-100 network (:mod:`.fbnet`), the 22 block choices separated by
  single spaces, e.g. ``fbnet:k3_e1 k3_e6 k5_e1_g2 skip ...``;
- ``ofa:ks=K1,...,K20;e=E1,...,E20;d=D1,...,D5;r=R``: a Once-for-All MobileNetV3 (width 1.2)
  ImageNet sub-network (:mod:`.ofa`), built by the ``ofa`` package (the ``ofa`` extra), input 3xRxR.

The first two take 3x32x32 images.  The PyTorch builders (:mod:`.nb201`, :mod:`.fbnet`) define
the networks; the references emit their graphs directly as ONNX (:mod:`.nb201_onnx`,
:mod:`.fbnet_onnx`, milliseconds instead of seconds of ``torch.onnx`` export), identical to the
builders' exports.  ``ofa:`` sub-networks are exported by ``torch.onnx`` (seconds each).
"""

from __future__ import annotations

from perfseer.errors import ModelLoadError
from perfseer.sources.nas import ofa
from perfseer.sources.nas.ofa import build_ofa, ofa_skeleton

SPACES = ("nb201", "fbnet", "ofa")
DEFAULT_INPUT = (3, 32, 32)  # nb201 and fbnet: CIFAR images


def build_space_model(space: str, arch: str, for_graph: bool = False):
    """The ``torch.nn.Module`` of ``arch`` in ``space`` (``"nb201"``, ``"fbnet"`` or ``"ofa"``), random
    weights, built on the current default device.

    Args:
        for_graph: build the module whose export is the reference's graph: NAS-Bench-201 networks
            then also return the nodes that no edge reads, which the measured networks compute.

    Raises:
        ModelLoadError: unknown space or malformed architecture.
    """
    if space == "nb201":
        from perfseer.sources.nas.nb201 import build_nb201  # deferred: loads torch

        return build_nb201(arch, keep_unused=for_graph)
    if space == "fbnet":
        from perfseer.sources.nas.fbnet import build_fbnet  # deferred: loads torch

        return build_fbnet(arch)
    if space == "ofa":
        import torch  # deferred: heavy, loaded on first use

        return build_ofa(arch, device=str(torch.get_default_device()))

    raise ModelLoadError(f"unknown architecture space {space!r}", f"use one of: {', '.join(SPACES)}")


def export_space_model(space: str, arch: str, input_shape=None):
    """The ONNX :class:`~perfseer.graph.onnx_io.Skeleton` of ``arch``: emitted directly for ``nb201``
    and ``fbnet`` (the graph their PyTorch builders export); ``ofa`` sub-networks are built on the meta
    device by the ``ofa`` package and exported by ``torch.onnx``.

    Args:
        input_shape: one sample without the batch (default ``(3, 32, 32)``; ``(3, r, r)`` for ``ofa``).
    """
    if space == "nb201":
        # Emitted directly as ONNX (milliseconds), the same graph the PyTorch builder exports.
        from perfseer.sources.nas.nb201_onnx import nb201_skeleton  # deferred: loads torch, onnx

        return nb201_skeleton(arch, tuple(input_shape or DEFAULT_INPUT))
    if space == "fbnet":
        # Likewise (:mod:`.fbnet_onnx`): the graph of the PyTorch builder's export.
        from perfseer.sources.nas.fbnet_onnx import fbnet_skeleton  # deferred: loads torch, onnx

        return fbnet_skeleton(arch, tuple(input_shape or DEFAULT_INPUT))
    if space == "ofa":
        # the package builds the sub-network (super-network cached per process), then torch.onnx

        return ofa_skeleton(arch, input_shape)
    import torch  # deferred: heavy, loaded on first use

    from perfseer.graph.torch_export import skeleton_from_module  # deferred: loads onnx

    with torch.device("meta"):
        module = build_space_model(space, arch, for_graph=True)
    return skeleton_from_module(module.eval(), input_shape or DEFAULT_INPUT, source=f"{space}:{arch}",
                                on_meta=True)


def __getattr__(name: str):
    # The builders need torch: import them only when asked for.
    if name in ("build_nb201", "parse_nb201"):
        from perfseer.sources.nas import nb201  # deferred: loads torch

        return getattr(nb201, name)
    if name in ("build_fbnet", "parse_fbnet"):
        from perfseer.sources.nas import fbnet  # deferred: loads torch

        return getattr(fbnet, name)
    if name in ("build_ofa", "parse_ofa"):
        return getattr(ofa, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SPACES", "DEFAULT_INPUT", "build_space_model", "export_space_model", "build_nb201", "parse_nb201", "build_fbnet",
           "parse_fbnet", "build_ofa", "parse_ofa"]
