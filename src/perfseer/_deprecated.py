"""Old module paths kept importable for one release: each name warns once where it is used and
points to its new home (the runtime/fitting split of 2026-11, docs/history.md)."""

from __future__ import annotations

import importlib
import warnings


def forward(old: str, names: dict[str, str], modules: dict[str, str] | None = None):
    """A module ``__getattr__`` for ``old`` that imports each of ``names`` (name -> its new module)
    and each moved submodule of ``modules`` (old name -> new module path) from its new home, with a
    :class:`DeprecationWarning` naming it."""
    modules = modules or {}

    def __getattr__(name: str):
        if name in modules:
            new = modules[name]
            warnings.warn(f"{old}.{name} moved to {new}; import it from there ({old} will be removed)",
                          DeprecationWarning, stacklevel=2)
            return importlib.import_module(new)
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        new = names[name]
        warnings.warn(f"{old}.{name} moved to {new}.{name}; import it from there ({old} will be removed)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return __getattr__
