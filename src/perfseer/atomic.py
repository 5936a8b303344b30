"""Writing files so that a reader never sees a partial one, and parallel writers never collide."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def tmp_sibling(path: str | os.PathLike) -> Path:
    """A unique hidden name next to ``path`` (same filesystem, so ``os.replace`` is atomic)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically: readers see the old file or the new one, never a part."""
    tmp = tmp_sibling(path)
    try:
        Path(tmp).write_text(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
