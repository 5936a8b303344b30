"""Limits on command-line values, checked before any work starts, and output that is always valid.

perfseer runs as a service too (a scheduler calls it with users' arguments), so every number a
user can give has an upper bound here, a predictor name cannot point outside ``--out``, and
``--json`` output never holds a bare ``NaN`` or ``Infinity`` (they are written as ``null``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from pathlib import Path

import numpy as np

from perfseer.atomic import atomic_write_text, tmp_sibling
from perfseer.errors import PerfseerError
from perfseer.graph.limits import MAX_DIM, MAX_INPUT_ELEMENTS
from perfseer.shapes import check_shape  # noqa: F401 - its old home

MAX_BATCH = 1 << 16  # samples per step a prediction or measurement may bind (65,536)
MAX_HIDDEN = 4096  # hidden width of a predictor network
MAX_GRAPHS_PER_STEP = 4096  # training graphs per optimizer step
MAX_SPACE = 1_000_000  # networks sampled from the model space by one `collect run`
MAX_DEVICE_NAME = 128  # characters of a device name in a measurement table
MAX_LATENCY_MS = 1e8  # a measured step of more than ~28 hours is a unit error or a corrupt row
MAX_METRIC = 1e12  # any other measured value (MiB, %, J) above this is corrupt
MAX_CALIBRATION_ROWS = 100_000  # calibration rows of one device (K is 5-50 in practice)
_VIRTUAL = ("/proc", "/sys", "/dev")  # kernel file systems: no output folder lives there
__all__ = ["MAX_BATCH", "MAX_CALIBRATION_ROWS", "MAX_DEVICE_NAME", "MAX_DIM", "MAX_GRAPHS_PER_STEP", "MAX_HIDDEN",
           "MAX_INPUT_ELEMENTS", "MAX_LATENCY_MS", "MAX_METRIC", "MAX_SPACE", "atomic_write_text", "bounded_int",
           "check_device_name", "check_measured", "check_name", "check_out_dir", "check_shape", "dumps",
           "tmp_sibling"]
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


def check_out_dir(out, what: str = "--out") -> Path:
    """An output folder that can be written: a folder, or a path whose nearest existing parent is a
    writable folder; never a file, a device (``/dev/null``) or a kernel file system.  Checked
    before long work, so that a run does not fail at its end.

    Raises:
        PerfseerError: naming the path and why.
    """
    text = str(out)
    if not text or "\0" in text:
        raise PerfseerError(f"{what} is empty or holds a NUL character", "give a folder, e.g. --out predictors")
    path = Path(os.path.abspath(os.path.expanduser(text)))
    real = Path(os.path.realpath(path))
    fix = "give a folder you can write, e.g. --out predictors"
    if any(real == Path(v) or Path(v) in real.parents for v in _VIRTUAL):
        raise PerfseerError(f"{what} {text} is in a kernel file system ({real.parts[1] if len(real.parts) > 1 else real})",
                            fix)
    if path.exists():
        if not path.is_dir():
            raise PerfseerError(f"{what} {text} exists and is not a folder", fix)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PerfseerError(f"{what} {text} is not writable", fix)
        return path
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise PerfseerError(f"{what} {text} lies under {parent}, which is a file", fix)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PerfseerError(f"{what} {text} cannot be created: {parent} is not writable", fix)
    return path


def check_out_file(out, what: str = "--out", suffixes: tuple[str, ...] = ()) -> Path:
    """A file that can be written: a plain file name (with one of ``suffixes`` when given) in a
    folder :func:`check_out_dir` accepts; not an existing folder.  Checked before long work.

    Raises:
        PerfseerError: naming the path and why.
    """
    text = str(out)
    path = Path(os.path.abspath(os.path.expanduser(text))) if text and "\0" not in text else None
    if path is None or not path.name or path.name in (".", ".."):
        raise PerfseerError(f"{what} {text!r} is not a file name", "give a file, e.g. --out table.csv")
    if path.is_dir():
        raise PerfseerError(f"{what} {text} is a folder", "give a file name in it, e.g. --out table.csv")
    if suffixes and not path.name.lower().endswith(suffixes):
        raise PerfseerError(f"{what} {text} must end in {' or '.join(suffixes)}", f"e.g. --out table{suffixes[0]}")
    check_out_dir(path.parent, what)
    return path


def check_device_name(name, where: str = "the measurements") -> str:
    """A device name from a table: printable, no path step (``..``, ``\\``), at most
    :data:`MAX_DEVICE_NAME` characters (it becomes part of a file name)."""
    text = name if isinstance(name, str) else str(name)
    if (not text or len(text) > MAX_DEVICE_NAME or not text.isprintable() or ".." in text or "\\" in text
            or text.startswith("/")):
        shown = text[:40].encode("unicode_escape").decode("ascii") + ("..." if len(text) > 40 else "")
        raise PerfseerError(f"{where} name a device '{shown}' ({len(text)} characters) that is not a plain name",
                            f"device names are printable, without '..' or '\\', at most {MAX_DEVICE_NAME} "
                            "characters (e.g. rtx3090/amp-nchw-pt240)")
    return text


def check_measured(values, metric: str, device: str) -> None:
    """Measured values that are finite, positive and bounded (:data:`MAX_LATENCY_MS` for a
    latency, :data:`MAX_METRIC` otherwise).

    Raises:
        PerfseerError: how many values are bad, and an example.
    """
    v = np.asarray(values, dtype=float)
    high = MAX_LATENCY_MS if metric == "latency_ms" else MAX_METRIC
    bad = ~(np.isfinite(v) & (v > 0) & (v <= high))
    if bad.any():
        raise PerfseerError(f"{int(bad.sum())} {metric} values of {device} are not finite, not positive or above "
                            f"{high:g} (e.g. {v[bad][0]!r})", "drop or re-measure those rows")


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
