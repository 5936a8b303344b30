"""Reading a saved network: its card (``NAME.json``) and its weights (``NAME.safetensors`` beside
it), with the same checks and the same errors for every kind of card perfseer writes (predictors,
the spec model's kernel MLPs, pre-trained encoders).  Nothing is unpickled.

A :class:`CardFormat` says what a kind of card is called and how to replace a bad one;
:func:`read_card` checks that a file is such a card (format, version, feature schema) and
:func:`read_weights` reads its tensors (missing file, corrupt file, tensors the card needs).

Example::

    fmt = CardFormat("perfseer.predictor", 1, "predictor", writer="perfseer train",
                     remedy="re-train or re-download it", schema=True, error=PredictorError)
    card = read_card("preds/mine.json", fmt)
    state = read_weights(weights_path("preds/mine.json"), fmt, required=model.state_dict())
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from perfseer.errors import PerfseerError
from perfseer.features import schema


@dataclass(frozen=True)
class CardFormat:
    """One kind of card.

    Attributes:
        name: the card's ``format`` field (``perfseer.predictor``).
        version: the newest ``format_version`` this perfseer reads (a card without one is version 0).
        what: how messages name it (``predictor``, ``spec-model``, ``pre-trained encoder``).
        writer: what writes such cards (the fix for a file of another format).
        remedy: how to replace a corrupt file (``re-train or re-download it``).
        schema: the card must hold this perfseer's feature-schema version (``schema_version``).
        error: the exception class raised (a :class:`~perfseer.errors.PerfseerError`).
    """

    name: str
    version: int
    what: str
    writer: str
    remedy: str
    schema: bool = False
    error: type = PerfseerError


def weights_path(card_path: str | os.PathLike) -> Path:
    """``NAME.safetensors`` beside ``NAME.json`` (names may hold dots: ``x.infer.json``)."""
    return Path(card_path).with_suffix(".safetensors")


def read_card(path: str | os.PathLike, fmt: CardFormat) -> dict:
    """The card at ``path``, checked against ``fmt``.

    Raises:
        fmt.error: no such file; not JSON; another format; a version that is not a number or newer
            than this perfseer reads; (``fmt.schema``) another feature schema.
    """
    path = Path(path)
    err, what = fmt.error, fmt.what
    if not path.is_file():
        raise err(f"no {what} card at {path}", f"pass the path of a .json card written by {fmt.writer}")
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise err(f"{what} card {path} is unreadable ({e})", fmt.remedy) from e
    except RecursionError as e:  # JSON nested deeper than the parser's stack
        raise err(f"{what} card {path} is nested too deep to be a card", fmt.remedy) from e
    depth = _depth(card)
    if depth > MAX_DEPTH:
        raise err(f"{what} card {path} is nested {depth} levels deep (a card has at most {MAX_DEPTH})", fmt.remedy)
    found = card.get("format") if isinstance(card, dict) else type(card).__name__
    if not isinstance(card, dict) or found != fmt.name:
        raise err(f"{path} is not a {what} card (format {found!r}, expected {fmt.name!r})",
                  f"pass a card written by {fmt.writer}")
    version = card.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise err(f"{path} has format_version {version!r}, not a version number", f"the card is corrupt: {fmt.remedy}")
    if version > fmt.version:
        raise err(f"{path} is {what} format {version}, this perfseer reads up to {fmt.version}", "upgrade perfseer")
    if fmt.schema:
        if card.get("schema_version") != schema.SCHEMA_VERSION:
            raise err(f"{path} was trained on feature schema {card.get('schema_version')}, this perfseer computes "
                      f"schema {schema.SCHEMA_VERSION}", "use a perfseer version with that schema, or re-train it")
    return card


MAX_DEPTH = 32  # nesting levels of any card perfseer writes (the deepest holds about 8)


def _depth(obj, level: int = 0) -> int:
    """How deeply ``obj`` nests (stops counting past :data:`MAX_DEPTH`)."""
    if level > MAX_DEPTH or not isinstance(obj, (dict, list)):
        return level
    items = obj.values() if isinstance(obj, dict) else obj
    return max((_depth(v, level + 1) for v in items), default=level + 1)


def peek_card(path: str | os.PathLike, fmt: CardFormat) -> dict | None:
    """:func:`read_card`, or ``None`` where it would raise (listing a folder skips what is not a card)."""
    try:
        return read_card(path, fmt)
    except PerfseerError:
        return None


def read_weights(path: str | os.PathLike, fmt: CardFormat, required: Iterable[str] = ()) -> dict:
    """The tensors of a ``.safetensors`` file (name -> ``torch.Tensor``).

    Args:
        required: tensor names the card needs (e.g. a model's ``state_dict()``); an error names
            those the file lacks.

    Raises:
        fmt.error: the file is missing, corrupt (truncated, not safetensors) or lacks a required tensor.
    """
    from safetensors import SafetensorError  # deferred: heavy, loaded on first use
    from safetensors.torch import load_file  # deferred: heavy, loaded on first use

    path = Path(path)
    err, what = fmt.error, fmt.what
    try:
        state = load_file(str(path))
    except FileNotFoundError:
        raise err(f"{what} weights {path} are missing", f"keep {path.name} next to its .json card") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise err(f"{what} weights {path} are corrupt ({e})", fmt.remedy) from e
    lacking = [k for k in required if k not in state]
    if lacking:
        more = f" and {len(lacking) - 5} more" if len(lacking) > 5 else ""
        raise err(f"{what} weights {path} lack the tensor(s) {', '.join(lacking[:5])}{more} that its card needs",
                  f"the file does not belong to this card: {fmt.remedy}")
    return state
