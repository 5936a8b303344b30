"""Model-zoo references: ``timm:NAME`` and ``torchvision:NAME`` (the optional ``zoo`` extra).

Models are built with random initialisation on the meta device (no weights allocated, nothing
downloaded) and exported through :mod:`perfseer.graph.torch_export`.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path

from perfseer.errors import MissingDependencyError, ModelLoadError, UnsupportedModelError

ZOOS = ("timm", "torchvision")
_DEFAULT_INPUT = (3, 224, 224)


def _prepare_torchvision() -> None:
    """Make torchvision importable when its compiled extension cannot load.

    The PyPI torchvision wheel is a CUDA build.  On a CPU-only torch its ``_C`` extension fails to
    load, and ``import torchvision`` then fails while registering fake kernels for operators that
    were never defined.  Defining the schemas of those operators first lets the import succeed;
    the installed ``torch.backends`` entry point (:mod:`_perfseer_torchvision`) does this at
    ``import torch`` for the user's own code too.  The compiled detection ops (``nms``,
    ``roi_align``) stay unusable; perfseer exports detectors through its own stand-ins
    (:mod:`perfseer.graph.detection`).
    """
    import torch  # deferred: heavy, loaded on first use

    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is None:
        return
    try:
        torch.ops.torchvision.nms  # a working build (or the entry point) registers it  # noqa: B018
        return
    except (AttributeError, RuntimeError):
        pass
    spec = importlib.util.find_spec("torchvision")
    for lib in Path(spec.origin).parent.glob("_C*.so"):
        try:
            torch.ops.load_library(str(lib))
            torch.ops.torchvision.nms  # noqa: B018
            return
        except (OSError, RuntimeError, AttributeError):
            break
    global _TV_LIB
    _TV_LIB = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _TV_LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")


_TV_LIB = None


def import_zoo(zoo: str):
    if zoo not in ZOOS:
        raise ModelLoadError(f"unknown model zoo '{zoo}'", f"use one of: {', '.join(ZOOS)}")
    if importlib.util.find_spec(zoo) is None:
        raise MissingDependencyError(zoo, "zoo", f"the {zoo}: model reference")
    _prepare_torchvision()
    if zoo == "timm":
        import timm  # deferred: an optional extra

        return timm
    import torchvision.models  # deferred: an optional extra

    return torchvision.models


REPARAM_SUFFIX = "@reparam"


def did_you_mean(name: str, names, listing: str = "", n: int = 5) -> str:
    """The fix for a mistyped model name: the closest names of ``names`` (edit distance first, then
    names containing it), or where to list them (``listing``, e.g. ``timm.list_models()``).

    >>> did_you_mean("resnt50", ["resnet50", "resnet50d", "vit_base_patch16_224"])
    'did you mean resnet50, resnet50d?'
    """
    names = list(names)
    close = difflib.get_close_matches(name, names, n=n, cutoff=0.75)
    close += [m for m in names if name and name in m and m not in close][: n - len(close)]
    if not close:
        close = difflib.get_close_matches(name, names, n=n, cutoff=0.5)
    return f"did you mean {', '.join(close)}?" if close else f"check the name{' (' + listing + ' lists them)' if listing else ''}"


def build_zoo_model(zoo: str, name: str, meta: bool = True, reparam: bool = False):
    """Instantiate ``name`` from ``zoo`` (random weights) and its default input shape.

    Args:
        reparam: timm only: fuse re-parameterisable branches (RepVGG, MobileOne, FastViT...) into
            their inference form, as ``timm.utils.reparameterize_model`` does for deployment and
            timm's own benchmark does.  The suffix ``@reparam`` on a name asks for it.

    Returns ``(module, input_shape, on_meta)``.
    """
    import torch  # deferred: heavy, loaded on first use

    if name.endswith(REPARAM_SUFFIX):
        name, reparam = name[: -len(REPARAM_SUFFIX)], True
    lib = import_zoo(zoo)
    if zoo == "timm":
        if not lib.is_model(name):
            raise ModelLoadError(f"timm has no model named '{name}'",
                                 did_you_mean(name, lib.list_models(), "timm.list_models()"))
        create = lambda: lib.create_model(name, pretrained=False)  # noqa: E731
    else:
        names = [n for family in TORCHVISION_FAMILIES for n in lib.list_models(module=_tv_module(lib, family))]
        if name not in names:
            raise ModelLoadError(f"torchvision has no classification, detection or segmentation model named "
                                 f"'{name}'", did_you_mean(name, names, "torchvision.models.list_models()"))
        kwargs = {"weights": None}
        if name not in lib.list_models(module=lib):  # detection/segmentation: no ImageNet backbone download
            kwargs["weights_backbone"] = None
        create = lambda: lib.get_model(name, **kwargs)  # noqa: E731
    module = None
    if meta:
        try:
            with torch.device("meta"):
                module = create()
        except Exception:  # some constructors compute on their tensors; build on CPU instead
            module = None
    if module is not None and reparam and zoo == "timm":
        try:
            module = _reparameterize(module.eval())
        except Exception:  # some fusions create CPU tensors: fuse a real model instead
            module = None
    on_meta = module is not None
    if module is None:
        module = create()
        if reparam and zoo == "timm":
            module = _reparameterize(module.eval())
    return module.eval(), default_input_shape(zoo, name, module), on_meta


def _reparameterize(module):
    from timm.utils.model import reparameterize_model  # deferred: an optional extra

    return reparameterize_model(module)


def _tv_module(lib, family: str):
    import importlib

    return lib if family == "classification" else importlib.import_module(f"torchvision.models.{family}")


# torchvision families a `torchvision:NAME` reference may name (video and optical flow models take
# other inputs; the quantized family needs the compiled quantized kernels).
TORCHVISION_FAMILIES = ("classification", "detection", "segmentation")


def default_input_shape(zoo: str, name: str, module) -> tuple[int, ...]:
    """The input a zoo model is exported at when none is given.

    Detectors: the size their own transform resizes to (R-CNNs, RetinaNet and FCOS: ``min_size``
    800, so a square 800x800 image; SSD 300, SSDlite 320); segmentation models: 520x520, the
    resolution of torchvision's reference evaluation.
    """
    if zoo == "timm":
        cfg = getattr(module, "pretrained_cfg", None) or {}
        return tuple(cfg.get("input_size", _DEFAULT_INPUT))
    if name == "inception_v3":
        return (3, 299, 299)
    transform = getattr(module, "transform", None)
    min_size = getattr(transform, "min_size", None)
    if min_size:
        # a tuple lists training scales; evaluation resizes to the last one
        side = int(min_size[-1] if isinstance(min_size, (tuple, list)) else min_size)
        return (3, side, side)
    if type(module).__module__.startswith("torchvision.models.segmentation"):
        return (3, 520, 520)
    return _DEFAULT_INPUT


def export_zoo_model(zoo: str, name: str, input_shape=None, reparam: bool = False, boxes: int | None = None):
    """Build and export a zoo model: ``(skeleton, module)``.

    timm models whose fused attention (``F.scaled_dot_product_attention``) the ONNX exporter
    cannot translate (5-D query/key/value, as in Hiera) are exported again with timm's explicit
    attention, which computes the same matmuls and softmax.
    """
    from perfseer.graph.torch_export import skeleton_from_module  # deferred: loads onnx

    def attempt():
        module, default_shape, on_meta = build_zoo_model(zoo, name, reparam=reparam)
        skel = skeleton_from_module(module, input_shape or default_shape, source=f"{zoo}:{name}", on_meta=on_meta,
                                    boxes=boxes)
        return skel, module

    try:
        return attempt()
    except UnsupportedModelError as e:
        if zoo != "timm" or "scaled_dot_product_attention" not in str(e.__cause__ or e):
            raise
    from timm.layers import config  # deferred: an optional extra

    previous = config.use_fused_attn()
    config.set_fused_attn(False)
    try:
        return attempt()
    finally:
        config.set_fused_attn(previous)
