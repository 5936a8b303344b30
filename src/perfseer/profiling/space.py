"""Deprecated: the PerfSeer model space moved to :mod:`perfseer.sources.space`.

Every name still resolves here, with a :class:`DeprecationWarning` naming the new module.
"""

from __future__ import annotations

import warnings

from perfseer.sources import space as _new


def __getattr__(name: str):
    value = getattr(_new, name)  # AttributeError for a name the new module lacks too
    warnings.warn(f"perfseer.profiling.space.{name} moved to perfseer.sources.space.{name}; import it from there",
                  DeprecationWarning, stacklevel=2)
    return value
