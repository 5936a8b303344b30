"""Measurement backends, chosen by registered name.

=============  ==================================================  ===========  ===============
name           what runs                                           phases       precisions
=============  ==================================================  ===========  ===============
``torch-cpu``  PyTorch eager on the CPU (:mod:`.torch_cpu`)         infer train  fp32 amp_bf16
``ort-cpu``    ONNX Runtime, CPU provider (:mod:`.ort_cpu`)         infer        fp32
``torch-cuda`` PyTorch eager on an NVIDIA GPU (:mod:`.torch_cuda`)  infer train  fp32 amp_fp16 amp_bf16
=============  ==================================================  ===========  ===============

Each module's docstring says exactly what its latency, memory, utilisation and energy mean.
Another backend can be named as ``package.module:Class`` (a :class:`~.base.Backend` subclass).
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from importlib.machinery import PathFinder
from pathlib import Path

from perfseer.profiling.backends.base import Backend
from perfseer.profiling.jobs import OPTIMIZERS, CollectError

BACKENDS = {
    "torch-cpu": "perfseer.profiling.backends.torch_cpu:TorchCpuBackend",
    "ort-cpu": "perfseer.profiling.backends.ort_cpu:OrtCpuBackend",
    "torch-cuda": "perfseer.profiling.backends.torch_cuda:TorchCudaBackend",
}


def setting_kind(setting: str) -> str | None:
    """The device kind (``cpu`` / ``gpu``) of a registered backend whose device-column setting
    this is (:meth:`.base.Backend.setting`, plus the optimizer suffix of
    :func:`perfseer.profiling.jobs.device_name`): ``torch-t4`` and ``ort-t2`` are CPU backends,
    ``torch-cuda-adamw`` a GPU; ``None`` for any other text."""

    suffix = rf"(-t\d+)?(-({'|'.join(OPTIMIZERS)}))?"
    return next((cls.kind for cls in map(backend_class, BACKENDS)
                 if re.fullmatch(re.escape(cls.short) + suffix, setting)), None)


def backend_class(name: str) -> type[Backend]:
    """The class of a registered backend name, or of ``package.module:Class``."""
    spec = BACKENDS.get(name)
    if spec is None:
        if ":" not in name:
            raise CollectError(f"unknown backend {name!r}",
                               f"use one of: {', '.join(BACKENDS)} (or package.module:Class)")
        spec = name
    module_name, _, cls_name = spec.partition(":")
    if name not in BACKENDS:
        _check_declared(name, module_name, cls_name)
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as e:
        raise CollectError(f"cannot load backend {name!r}: {type(e).__name__}: {e}",
                           f"use one of: {', '.join(BACKENDS)}, or an importable package.module:Class") from e
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise CollectError(f"backend {name!r} is not a perfseer Backend class",
                           "name a subclass of perfseer.profiling.backends.base.Backend")
    return cls


def _source_of(module_name: str) -> str | None:
    """The source file of ``module_name`` found on ``sys.path`` without importing it (nor its
    parent packages), or ``None``."""
    path = sys.path
    origin = None
    for part in module_name.split("."):
        found = PathFinder.find_spec(part, path)
        if found is None:
            return None
        origin = found.origin
        path = list(found.submodule_search_locations or [])
    return origin if origin and origin.endswith(".py") else None


def _check_declared(name: str, module_name: str, cls_name: str) -> None:
    """Refuse ``package.module:Class`` before importing anything unless the module's source
    defines ``class Class(...)`` with a base named like a perfseer ``Backend``: naming a module
    must not run it when it is not a backend."""
    fix = (f"use one of: {', '.join(BACKENDS)}, or package.module:Class naming a subclass of "
           "perfseer.profiling.backends.base.Backend")
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module_name) or not cls_name.isidentifier():
        raise CollectError(f"backend {name!r} is not a registered name nor package.module:Class", fix)
    source = _source_of(module_name)
    if source is None:
        raise CollectError(f"cannot load backend {name!r}: no Python source for module {module_name!r} on the path", fix)
    try:
        tree = ast.parse(Path(source).read_text())
    except (OSError, SyntaxError, ValueError) as e:
        raise CollectError(f"cannot load backend {name!r}: its module {module_name} cannot be read ({e})", fix) from e
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
            if any(b.endswith("Backend") for b in bases):
                return
    raise CollectError(f"backend {name!r}: {module_name} defines no class {cls_name} derived from a Backend "
                       "(checked without importing it)", fix)


def create_backend(name: str, **options) -> Backend:
    """An instance of backend ``name`` with JSON-able ``options`` (threads, protocol, ...)."""
    return backend_class(name)(**options)


__all__ = ["BACKENDS", "Backend", "backend_class", "create_backend"]
