"""The last few values a process computed, kept for the next call that asks again (a warm process
comparing one model on many GPUs, a service answering the same graph)."""

from __future__ import annotations

from collections import OrderedDict


def remember(cache: OrderedDict, key, value, size: int):
    """Keep ``value`` under ``key`` in ``cache``, forgetting the oldest entries beyond ``size``;
    returns ``value``."""
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)
    return value
