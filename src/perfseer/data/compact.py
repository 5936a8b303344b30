"""Graph datasets small enough to commit: one NPZ file instead of one graph per batch size.

A graph dataset (:mod:`perfseer.data.dataset`) holds one PerfGraph per ``(model, input_shape,
batch_size)``.  Most of that is redundant, and this format drops the redundancy *exactly*:

1. **Batch sizes.**  Every primary feature (hyper-parameters, FLOPs, bytes, tensor sizes: all but
   the columns :func:`~perfseer.features.perfgraph.derive_features` computes) is an affine
   function of the batch size, because each tensor's shape is (``Tensor.batch_scale``).  So a
   ``(model, input_shape)`` is stored once, as its features at the smallest batch ``b0`` plus their
   slope per unit of batch, and the graph at batch ``b`` is ``base + slope * (b - b0)``, with the
   derived columns and the global features recomputed.  :func:`pack` checks this against every
   stored graph; a model where it does not hold is stored once per batch instead.
2. **Repeated rows.**  Node rows ``[base | slope]`` are de-duplicated across the whole dataset
   (the twelve blocks of a ViT, the same stem in a hundred ResNets), and so are edge rows; each
   node and edge keeps an ``int32`` index into the table of distinct rows.
3. **Compression.**  The arrays are written with ``numpy.savez_compressed`` (deflate).

Reading it back (:func:`read_compact`) gives the same ``Data`` as the graph file, up to float32
rounding of the reconstruction (checked to ``rtol=1e-5`` when packing).  NPZ holds plain arrays
only; it is loaded with ``allow_pickle=False``.

Arrays of ``graphs.npz``:

=================  ======================================================================
``node_rows``      float32 ``[distinct, 2 * P]``: base then slope of the P primary node columns
``node_row``       int32 ``[nodes]``: row of each node of each stored model
``op_type``        int16 ``[nodes]``: index into the ``op_vocab`` of the header
``edge_rows``      float32 ``[distinct, 2 * F_edge]``; ``edge_row`` int32 ``[edges]``
``edges``          int32 ``[2, edges]``: source and target within the model's nodes
``node_ptr``       int64 ``[models + 1]``; ``edge_ptr`` likewise
``params``         float64 ``[models]``: parameter count; ``base_batch`` int64 ``[models]``
``graph_model``    int32 ``[graphs]``: stored model of each graph; ``graph_batch`` int64
``header``         a JSON string: format, schema, op vocabulary, per-graph metadata
=================  ======================================================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from perfseer.errors import SchemaError
from perfseer.features import schema
from perfseer.features.perfgraph import PRIMARY_NODE_COLUMNS, derive_features
from perfseer.features.pyg import OP_VOCAB

COMPACT_FILE = "graphs.npz"
_FORMAT = "perfseer.graphs.compact"
_FORMAT_VERSION = 1
_RTOL = 1e-5


def _primary():
    return np.array(PRIMARY_NODE_COLUMNS)


def _distinct(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a float32 matrix (bitwise) and the index of each row among them."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if rows.shape[0] == 0:
        return rows, np.zeros(0, np.int32)
    view = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
    return rows[first], inverse.astype(np.int32).ravel()


def _rebuilt(base_x, slope_x, base_e, slope_e, delta, batch, params, num_cols):
    x = np.zeros((base_x.shape[0], num_cols))
    x[:, _primary()] = base_x.astype(np.float64) + slope_x.astype(np.float64) * delta
    e = base_e.astype(np.float64) + slope_e.astype(np.float64) * delta
    u = derive_features(x, e, batch, params)
    return x, e, u


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.allclose(a, b, rtol=_RTOL, atol=1e-6)


def pack(graphs, meta: list[dict], path: str | os.PathLike, vocab) -> dict:
    """Write ``graphs`` (``Data``, as :func:`perfseer.features.pyg.load_graphs` gives them, with
    ``meta`` holding ``model``, ``input_shape`` and ``batch_size`` each) as a compact file.

    Returns counts: graphs, models stored, models stored per batch (not affine), distinct rows.
    """

    prim = _primary()
    n_cols = len(schema.NODE_FEATURES)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, m in enumerate(meta):
        groups.setdefault((str(m["model"]), str(m["input_shape"])), []).append(i)

    stored = []  # (graph indices, base graph, slope arrays or None)
    per_batch = 0
    for idx in groups.values():
        idx = sorted(idx, key=lambda i: int(meta[i]["batch_size"]))
        lo, hi = idx[0], idx[-1]
        g_lo, g_hi = graphs[lo], graphs[hi]
        b_lo, b_hi = int(meta[lo]["batch_size"]), int(meta[hi]["batch_size"])
        base_x = g_lo.x.numpy()[:, prim].astype(np.float64)
        base_e = g_lo.edge_attr.numpy().astype(np.float64)
        same_structure = all(torch_equal(graphs[i].edge_index, g_lo.edge_index) and graphs[i].num_nodes == g_lo.num_nodes
                             for i in idx)
        ok = same_structure
        if ok and b_hi != b_lo:
            slope_x = (g_hi.x.numpy()[:, prim].astype(np.float64) - base_x) / (b_hi - b_lo)
            slope_e = (g_hi.edge_attr.numpy().astype(np.float64) - base_e) / (b_hi - b_lo)
        else:
            slope_x, slope_e = np.zeros_like(base_x), np.zeros_like(base_e)
        params = float(g_lo.u.numpy()[0, schema.GLOBAL_FEATURES.index("params")])
        if ok:
            for i in idx:
                b = int(meta[i]["batch_size"])
                x, e, u = _rebuilt(base_x.astype(np.float32), slope_x.astype(np.float32), base_e.astype(np.float32),
                                   slope_e.astype(np.float32), b - b_lo, b, params, n_cols)
                g = graphs[i]
                if not (_close(x, g.x.numpy()) and _close(e, g.edge_attr.numpy()) and _close(u, g.u.numpy()[0])):
                    ok = False
                    break
        if ok:
            stored.append((idx, lo, base_x, slope_x, base_e, slope_e, b_lo, params))
        else:
            per_batch += 1
            for i in idx:
                g = graphs[i]
                stored.append(([i], i, g.x.numpy()[:, prim].astype(np.float64), np.zeros((g.num_nodes, len(prim))),
                               g.edge_attr.numpy().astype(np.float64), np.zeros_like(g.edge_attr.numpy(), np.float64),
                               int(meta[i]["batch_size"]), float(g.u.numpy()[0, schema.GLOBAL_FEATURES.index("params")])))

    node_rows = np.concatenate([np.hstack([s[2], s[3]]) for s in stored]) if stored else np.zeros((0, 2 * len(prim)))
    edge_rows = np.concatenate([np.hstack([s[4], s[5]]) for s in stored]) if stored else np.zeros((0, 16))
    node_table, node_row = _distinct(node_rows)
    edge_table, edge_row = _distinct(edge_rows)
    graph_model = np.zeros(len(graphs), np.int32)
    for k, s in enumerate(stored):
        graph_model[s[0]] = k
    arrays = {
        "node_rows": node_table, "node_row": node_row,
        "op_type": np.concatenate([graphs[s[1]].op_type.numpy() for s in stored]).astype(np.int16) if stored else np.zeros(0, np.int16),
        "edge_rows": edge_table, "edge_row": edge_row,
        "edges": (np.concatenate([graphs[s[1]].edge_index.numpy() for s in stored], axis=1).astype(np.int32)
                  if stored else np.zeros((2, 0), np.int32)),
        "node_ptr": np.cumsum([0] + [graphs[s[1]].num_nodes for s in stored]).astype(np.int64),
        "edge_ptr": np.cumsum([0] + [graphs[s[1]].edge_index.shape[1] for s in stored]).astype(np.int64),
        "params": np.array([s[7] for s in stored], np.float64),
        "base_batch": np.array([s[6] for s in stored], np.int64),
        "graph_model": graph_model,
        "graph_batch": np.array([int(m["batch_size"]) for m in meta], np.int64),
        "header": np.array(json.dumps({"format": _FORMAT, "version": _FORMAT_VERSION, "schema": schema.describe(),
                                       "op_vocab": list(vocab), "meta": meta})),
    }
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.npz")
    try:
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"graphs": len(graphs), "models": len(groups), "stored": len(stored), "per_batch": per_batch,
            "node_rows": int(node_rows.shape[0]), "distinct_node_rows": int(node_table.shape[0]),
            "edge_rows": int(edge_rows.shape[0]), "distinct_edge_rows": int(edge_table.shape[0])}


def torch_equal(a, b) -> bool:
    return tuple(a.shape) == tuple(b.shape) and bool((a == b).all())


class CompactGraphs:
    """The graphs of a compact file as a read-only sequence: ``graphs[i]`` is a ``Data``, built
    when first asked for and kept (callers must not modify it in place; copy it first)."""

    def __init__(self, path: str | os.PathLike):
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
            header = json.loads(str(a.pop("header")))
        except (OSError, ValueError, KeyError) as e:
            raise SchemaError(f"{path} is not a readable compact graph file ({e})",
                              "rebuild it with perfseer data build --compact") from e
        if header.get("format") != _FORMAT:
            raise SchemaError(f"{path} is not a perfseer compact graph file", "rebuild it with perfseer data build")
        if header["schema"].get("version") != schema.SCHEMA_VERSION:
            raise SchemaError(f"{path} uses feature schema {header['schema'].get('version')}, this perfseer uses "
                              f"{schema.SCHEMA_VERSION}", "rebuild the dataset with this version of perfseer")
        self.path = path
        self.meta: list[dict] = header["meta"]
        index = {op: i for i, op in enumerate(OP_VOCAB)}
        self._remap = np.array([index.get(op, 0) for op in header["op_vocab"]], dtype=np.int64)
        self._a = a
        self._p = len(_primary())
        self._num_cols = len(schema.NODE_FEATURES)
        self._built: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self._a["graph_model"])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, i: int):
        import torch  # deferred: heavy, loaded on first use
        from torch_geometric.data import Data  # deferred: heavy, loaded on first use

        if not -len(self) <= i < len(self):
            raise IndexError(f"graph {i} out of range ({len(self)} graphs)")
        i = int(i) % len(self)
        if i not in self._built:
            self._built[i] = self._build(i)
        return self._built[i]

    def at_batch(self, i: int, batch: int):
        """Graph ``i``'s model re-bound to another batch size (exact: every primary feature is affine
        in the batch); not cached."""
        if not isinstance(batch, (int, np.integer)) or batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {batch!r}")
        return self._build(int(i) % len(self), int(batch))

    def _build(self, i: int, batch: int | None = None):
        import torch  # deferred: heavy, loaded on first use
        from torch_geometric.data import Data  # deferred: heavy, loaded on first use

        a, p = self._a, self._p
        k = int(a["graph_model"][i])
        n0, n1, e0, e1 = (int(a["node_ptr"][k]), int(a["node_ptr"][k + 1]), int(a["edge_ptr"][k]), int(a["edge_ptr"][k + 1]))
        rows = a["node_rows"][a["node_row"][n0:n1]]
        erows = a["edge_rows"][a["edge_row"][e0:e1]]
        ef = erows.shape[1] // 2
        batch = int(a["graph_batch"][i]) if batch is None else batch
        x, e, u = _rebuilt(rows[:, :p], rows[:, p:], erows[:, :ef], erows[:, ef:], batch - int(a["base_batch"][k]),
                           batch, float(a["params"][k]), self._num_cols)
        return Data(x=torch.from_numpy(x.astype(np.float32)),
                    edge_index=torch.from_numpy(a["edges"][:, e0:e1].astype(np.int64)),
                    edge_attr=torch.from_numpy(e.astype(np.float32)),
                    u=torch.from_numpy(u.astype(np.float32)[None, :]),
                    op_type=torch.from_numpy(self._remap[a["op_type"][n0:n1].astype(np.int64)]),
                    num_nodes=n1 - n0)
