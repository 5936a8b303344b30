"""Deprecated: runnable models for measurement moved to :mod:`perfseer.sources.runnable`.

Every name still resolves here, with a :class:`DeprecationWarning` naming the new module.
"""

from __future__ import annotations

import warnings

from perfseer.sources import runnable as _new


def __getattr__(name: str):
    value = getattr(_new, name)  # AttributeError for a name the new module lacks too
    warnings.warn(f"perfseer.profiling.models.{name} moved to perfseer.sources.runnable.{name}; import it from "
                  "there", DeprecationWarning, stacklevel=2)
    return value
