"""Prompt and output lengths of a request stream: a number, ``MEAN:SD`` or a histogram file.

- ``"512"`` or ``512``: every request that long;
- ``"200:150"``: a normal distribution of that mean and standard deviation, rounded and clipped to
  ``[1, 4 x mean + 1]`` (a long tail is the histogram's job);
- a path: a histogram, CSV with a ``length,count`` header (or one length per line) or JSON
  ``{"lengths": [...], "counts": [...]}``; lengths are drawn with the counts as weights.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfseer.errors import PerfseerError

MAX_LEN = 1 << 22
MAX_BINS = 1 << 16


class LengthsError(PerfseerError):
    """A length specification that cannot be read."""


@dataclass(frozen=True)
class Lengths:
    """A distribution of lengths (``kind``: ``fixed``, ``normal`` or ``histogram``)."""

    kind: str
    mean: float
    sd: float = 0.0
    values: tuple = ()
    weights: tuple = ()
    text: str = ""

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.mean), dtype=np.int64)
        if self.kind == "normal":
            hi = int(4 * self.mean + 1)
            return np.clip(np.rint(rng.normal(self.mean, self.sd, n)), 1, hi).astype(np.int64)
        w = np.asarray(self.weights, float)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=w / w.sum())

    @property
    def max(self) -> int:
        if self.kind == "fixed":
            return int(self.mean)
        if self.kind == "normal":
            return int(4 * self.mean + 1)
        return int(max(self.values))


def _len(v, what: str) -> int:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise LengthsError(f"{what}: {v!r} is not a number", "lengths are whole numbers of tokens") from None
    if not math.isfinite(f) or f < 1 or f > MAX_LEN or f != int(f):
        raise LengthsError(f"{what}: {v!r} must be a whole number from 1 to {MAX_LEN:,}", "fix the length")
    return int(f)


def parse_lengths(spec, what: str = "length") -> Lengths:
    """A :class:`Lengths` from ``spec`` (see the module doc).

    Raises:
        LengthsError: naming what is wrong (a bad number, a missing or malformed file).
    """
    if isinstance(spec, Lengths):
        return spec
    if isinstance(spec, bool):
        raise LengthsError(f"{what}: {spec!r} is not a length", "pass a number, MEAN:SD or a histogram file")
    if isinstance(spec, (int, float)):
        return Lengths("fixed", float(_len(spec, what)), text=str(spec))
    text = str(spec).strip()
    if not text:
        raise LengthsError(f"{what} is empty", "pass a number, MEAN:SD or a histogram file")
    if ":" in text and not Path(text).exists():
        m, _, s = text.partition(":")
        mean = _len(m, what)
        try:
            sd = float(s)
        except ValueError:
            raise LengthsError(f"{what}: SD {s!r} in {text!r} is not a number", "write MEAN:SD, e.g. 200:150") from None
        if not math.isfinite(sd) or sd < 0 or sd > MAX_LEN:
            raise LengthsError(f"{what}: SD {s!r} must be a non-negative number", "write MEAN:SD, e.g. 200:150")
        return Lengths("normal", float(mean), sd, text=text)
    if text.replace(".", "", 1).isdigit():
        return Lengths("fixed", float(_len(text, what)), text=text)
    return read_histogram(Path(text).expanduser(), what)


def read_histogram(path: Path, what: str = "length") -> Lengths:
    """A histogram file (CSV ``length,count`` or one length per line; JSON lengths/counts)."""
    try:
        raw = path.read_text()
    except FileNotFoundError:
        raise LengthsError(f"{what}: {path} is neither a number, MEAN:SD nor an existing file",
                           "pass a number, MEAN:SD or the path of a length histogram (CSV length,count)") from None
    except OSError as e:
        raise LengthsError(f"{what}: cannot read {path} ({e})", "check the path") from e
    vals, cnts = [], []
    if path.suffix.lower() == ".json":
        try:
            obj = json.loads(raw)
            vals, cnts = list(obj["lengths"]), list(obj.get("counts") or [1] * len(obj["lengths"]))
        except (ValueError, KeyError, TypeError) as e:
            raise LengthsError(f"{what}: {path} is not JSON with a 'lengths' list ({e})",
                               "write {\"lengths\": [...], \"counts\": [...]}") from e
    else:
        for i, row in enumerate(csv.reader(raw.splitlines())):
            if not row or not "".join(row).strip():
                continue
            if i == 0 and not row[0].strip().replace(".", "", 1).isdigit():
                continue  # a header
            vals.append(row[0])
            cnts.append(row[1] if len(row) > 1 else 1)
    if not vals or len(vals) != len(cnts) or len(vals) > MAX_BINS:
        raise LengthsError(f"{what}: {path} holds no usable lengths (or more than {MAX_BINS:,} bins)",
                           "one 'length,count' per line")
    values = tuple(_len(v, f"{what} ({path})") for v in vals)
    weights = []
    for c in cnts:
        try:
            w = float(c)
        except (TypeError, ValueError):
            raise LengthsError(f"{what}: count {c!r} in {path} is not a number", "fix the count") from None
        if not math.isfinite(w) or w < 0:
            raise LengthsError(f"{what}: count {c!r} in {path} must be >= 0", "fix the count")
        weights.append(w)
    if sum(weights) <= 0:
        raise LengthsError(f"{what}: the counts in {path} add up to 0", "give at least one positive count")
    mean = float(np.average(values, weights=weights))
    return Lengths("histogram", mean, values=values, weights=tuple(weights), text=str(path))
