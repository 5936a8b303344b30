"""Switches read from the environment at every use (so worker processes follow their parent)."""

from __future__ import annotations

import os


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` switches something on (1, true, yes, on)."""
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")
