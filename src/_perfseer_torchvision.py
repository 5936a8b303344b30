"""Keep ``import torchvision`` working where its compiled extension cannot load.

The PyPI torchvision wheel is a CUDA build (``0.28.0+cu130``).  Next to a CPU-only torch its
``_C`` extension fails to load (it links ``libtorch_cuda.so``), and ``import torchvision`` then
dies registering a fake kernel for ``torchvision::nms``, an operator that was never defined:
``RuntimeError: operator torchvision::nms does not exist``.  Installing ``perfseer[zoo]`` puts
exactly that pair on a CPU machine, so it would break ``import torchvision`` / ``import timm`` in
the user's own code.

This top-level module is registered as a ``torch.backends`` entry point (see ``pyproject.toml``):
torch calls :func:`define_missing_ops` at the end of ``import torch``, before anything can import
torchvision.  It only acts on that broken pair (a CUDA-tagged torchvision next to a torch without
CUDA) and then declares the schemas of the operators torchvision's import registers kernels for;
the compiled ops themselves stay unavailable (``torchvision.ops.nms`` raises torchvision's own
"Couldn't load custom C++ ops" error), which is the truth.  It lives outside the ``perfseer``
package because ``perfseer/__init__`` imports torch, which is still being imported at that point.

Torch skips entry points when ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``; then
``import _perfseer_torchvision, torch; _perfseer_torchvision.define_missing_ops()`` before
``import torchvision`` does the same.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# Operators whose fake (meta) kernels torchvision registers unconditionally on import.
_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARY = None  # kept alive: a torch.library.Library removes its definitions when collected


def _cuda_tagged_torchvision() -> bool:
    """Whether the installed torchvision is a CUDA build, read from its ``version.py`` (not imported)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return False
    try:
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("__version__"):
            return "+cu" in line or "+rocm" in line
    return False


def _nms_defined(torch) -> bool:
    try:
        torch.ops.torchvision.nms  # noqa: B018 - raises when the operator was never defined
        return True
    except Exception:  # noqa: BLE001 - AttributeError or RuntimeError, by torch version
        return False


def needs_definitions() -> bool:
    """True for a CUDA-built torchvision next to a torch without CUDA, whose ops are not defined.

    ``import torchvision`` imports torch first, so torchvision may already be (partly) imported here.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    version = getattr(torch, "version", None)
    if version is None or getattr(version, "cuda", None) is not None or getattr(version, "hip", None):
        return False
    return _cuda_tagged_torchvision() and not _nms_defined(torch)


def define_missing_ops() -> None:
    """Declare ``torchvision::nms``/``qnms`` when torchvision's compiled library cannot define them.

    Never raises: torch turns an exception here into a failed ``import torch``.
    """
    global _LIBRARY
    try:
        if _LIBRARY is not None or not needs_definitions():
            return
        import torch.library

        lib = torch.library.Library("torchvision", "DEF")
        for schema in _SCHEMAS.values():
            lib.define(schema)
        _LIBRARY = lib
    except Exception:  # noqa: BLE001 - an import hook must not break `import torch`
        return
