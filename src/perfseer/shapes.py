"""Reading what users write for shapes and dimensions: one sample's input shape (``3x224x224``),
symbolic dimensions (``seq=128``) and the sequence length, each bounded by what extraction accepts
(:mod:`perfseer.graph.validate`).  The CLI, the service, the collection kit and the datasets all
read them here."""

from __future__ import annotations

import math
import re

from perfseer.errors import PerfseerError, ShapeError
from perfseer.graph.limits import MAX_DIM, MAX_INPUT_ELEMENTS

_SHAPE = re.compile(r"\d+(x\d+)*")


def check_shape(dims: tuple[int, ...], what: str = "--input-shape", error: type = PerfseerError) -> tuple[int, ...]:
    """One sample's shape: each dimension at most ``MAX_DIM``, the sample at most ``MAX_INPUT_ELEMENTS``."""
    if any(d > MAX_DIM for d in dims) or math.prod(dims) > MAX_INPUT_ELEMENTS:
        raise error(f"{what} {'x'.join(map(str, dims))} is too large (each dimension at most {MAX_DIM:,}, "
                    f"a sample at most {MAX_INPUT_ELEMENTS:,} elements)", "give the real input size")
    return dims


def parse_shape(text, what: str = "input shape", error: type = ShapeError) -> tuple[int, ...]:
    """``"3x224x224"`` (or ``"3,224,224"``, or a tuple) -> ``(3, 224, 224)``: one sample's
    dimensions without the batch, each at least 1, bounded by :func:`check_shape`.

    Raises:
        ``error`` (:class:`~perfseer.errors.ShapeError` by default) naming the text and the fix.
    """
    if isinstance(text, (tuple, list)):
        text = "x".join(str(d) for d in text)
    t = str(text).strip().lower().replace(",", "x")
    dims = tuple(int(d) for d in t.split("x")) if _SHAPE.fullmatch(t) else ()
    if not dims or any(d <= 0 for d in dims):
        raise error(f"cannot read {what} '{text}'",
                    "write the dimensions of one sample without the batch, e.g. 3x224x224")
    return check_shape(dims, error=error)


def shape_text(shape) -> str:
    """The canonical text of a shape: ``(3, 64, 64)`` -> ``"3x64x64"``."""
    return "x".join(str(int(d)) for d in parse_shape(shape))


def parse_dims(items: list[str] | None) -> dict[str, int]:
    """``["seq=128", "boxes=100"]`` -> ``{"seq": 128, "boxes": 100}`` (each value 1..MAX_DIM)."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit() or not 0 < int(value) <= MAX_DIM:
            raise ShapeError(f"cannot read --dim '{item}'",
                             f"write NAME=VALUE with an integer from 1 to {MAX_DIM}, e.g. seq=128")
        out[name.strip()] = int(value)
    return out


def check_seq_len(seq_len: int | None) -> None:
    """A sequence length is at least 1 (``None``: not given)."""
    if seq_len is not None and seq_len < 1:
        raise ShapeError(f"--seq-len must be at least 1, got {seq_len}", "pass --seq-len N with N >= 1")
