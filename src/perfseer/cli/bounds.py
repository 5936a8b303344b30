"""Limits on command-line values, checked before any work starts, and output that is always valid.

perfseer runs as a service too (a scheduler calls it with users' arguments), so every number a
user can give has an upper bound here, a predictor name cannot point outside ``--out``, and
``--json`` output never holds a bare ``NaN`` or ``Infinity`` (they are written as ``null``).
"""

from __future__ import annotations

import argparse
import json
import math
import re

from perfseer.atomic import atomic_write_text, tmp_sibling
from perfseer.errors import PerfseerError
from perfseer.graph.validate import MAX_DIM, MAX_INPUT_ELEMENTS
from perfseer.shapes import check_shape  # noqa: F401 - its old home

MAX_BATCH = 1 << 16  # samples per step a prediction or measurement may bind (65,536)
MAX_HIDDEN = 4096  # hidden width of a predictor network
MAX_GRAPHS_PER_STEP = 4096  # training graphs per optimizer step
MAX_SPACE = 1_000_000  # networks sampled from the model space by one `collect run`
__all__ = ["MAX_BATCH", "MAX_DIM", "MAX_GRAPHS_PER_STEP", "MAX_HIDDEN", "MAX_INPUT_ELEMENTS", "MAX_SPACE",
           "atomic_write_text", "bounded_int", "check_name", "check_shape", "dumps", "tmp_sibling"]
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def bounded_int(low: int, high: int):
    """An argparse type: an integer in ``[low, high]``."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low} to {high}, got {v}")
        return v
    return parse


def check_name(name: str, what: str = "--name") -> str:
    """A file stem for a predictor: letters, digits, ``.``, ``_``, ``-``; no path, at most 128."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", "..") or ".." in name:
        raise PerfseerError(f"{what} {name!r} is not a plain file name (it could write outside the output folder)",
                            "use letters, digits, '.', '_' and '-' only, starting with a letter or digit "
                            "(at most 128 characters)")
    return name


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", 1) == 0:  # numpy scalars
        return _finite(obj.item())
    return obj


def dumps(obj, **kwargs) -> str:
    """``json.dumps`` that writes non-finite numbers as ``null`` (strict JSON has no NaN)."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)
