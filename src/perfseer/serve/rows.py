"""The prediction rows a service has answered: a bounded LRU cache, so that a request asked before
costs a dictionary look-up instead of re-binding the batch size, building the features, running
the network and the trust checks (domain embedding, interval, bounds).

A key is ``(graph, batch, what)``: ``graph`` the token of a :class:`~perfseer.serve.graphs.GraphCache`
entry (new for every extraction, and the entry's key holds the model file's content hash, so an
edited file or a re-extracted graph never meets old rows), ``batch`` one batch size, and ``what``
everything else that changes the rows: ``("predictor", name, device, phase)`` or ``("device",
device, phase, precision, basis)``.  A value is the rows for that one batch size with the warnings
they raised.  When the graph cache drops an entry, :meth:`RowCache.drop_graph` drops its rows.
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class RowCache:
    """``get(key)`` -> ``(rows, warnings)`` or ``None``; ``put(key, rows, warnings)``.

    Args:
        size: entries kept (least recently used dropped first); 0 turns the cache off.
    """

    def __init__(self, size: int = 4096):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._by_graph: dict = {}  # graph token -> its keys, so that dropping a graph is O(its rows)
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple):
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return hit

    def put(self, key: tuple, rows: list[dict], warnings: list[str]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = (tuple(rows), tuple(warnings))
            self._items.move_to_end(key)
            self._by_graph.setdefault(key[0], set()).add(key)
            while len(self._items) > self.size:
                self._forget(next(iter(self._items)))

    def drop_graph(self, graph) -> None:
        """Forget every row of one graph-cache entry (it was evicted)."""
        with self._lock:
            for key in list(self._by_graph.get(graph, ())):
                self._forget(key)

    def _forget(self, key: tuple) -> None:
        self._items.pop(key, None)
        keys = self._by_graph.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_graph[key[0]]

    def stats(self) -> dict:
        return {"entries": len(self._items), "size": self.size, "hits": self.hits, "misses": self.misses}

    def __len__(self) -> int:
        return len(self._items)
