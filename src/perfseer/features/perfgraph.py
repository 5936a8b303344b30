"""The PerfGraph (PerfSeer §3.1): a model's operator graph with node, edge and global features."""

from __future__ import annotations

import math
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

import numpy as np

from perfseer.features import schema
from perfseer.features.ops import REGISTRY, NodeView, OpCost, generic_cost, memory_of
from perfseer.features.ops.registry import registry_key
from perfseer.features.precision import dominant, node_compute_dtypes, params_by_dtype, totals_by_dtype
from perfseer.features.pyg import to_data
from perfseer.graph.ir import Graph, Tensor

_N_HP = len(schema.HYPERPARAMETERS)
KEPT_BATCHES = 16  # re-bound graphs kept per PerfGraph (PerfGraph.at_batch): the envelope's powers of two to 2**15
_REBOUND_LOCK = threading.Lock()  # guards every PerfGraph's kept graphs (service threads share graphs)
_COST_AT = {name: _N_HP + i for i, name in enumerate(schema.COST_FEATURES)}


def edge_shape_features(t: Tensor) -> tuple[float, ...]:
    """``(rank, batch, channels, height, width, tokens)`` of a tensor, read by its layout."""
    s = t.shape
    r = len(s)
    batch_axis = next((i for i, k in enumerate(t.batch_scale) if k), None)
    batch = float(s[batch_axis]) if batch_axis is not None else 1.0
    if r == 0:
        return (0.0, batch, 1.0, 1.0, 1.0, 1.0)
    if r == 1:
        return (1.0, batch, float(s[0]), 1.0, 1.0, 1.0)
    if r == 2:
        return (2.0, batch, float(s[1]), 1.0, 1.0, 1.0)
    if r == 3:
        return (3.0, batch, float(s[2]), float(s[1]), 1.0, float(s[1]))
    return (float(r), batch, float(s[1]), float(s[-2]), float(s[-1]), float(math.prod(s[2:])))


@dataclass(frozen=True)
class PerfGraph:
    """A model as PerfSeer's performance graph.

    Attributes:
        graph: the typed IR it was computed from (kept for re-binding the batch size).
        x: node features, ``[num_nodes, len(schema.NODE_FEATURES)]`` float64.
        edge_index: ``[2, num_edges]`` int64, source and target node of each data-flow edge.
        edge_attr: ``[num_edges, len(schema.EDGE_FEATURES)]`` float64.
        u: global features, ``[len(schema.GLOBAL_FEATURES)]`` float64.
        op_types: the ONNX op type of each node.
        covered: whether each node's operator has its own cost function.
        edge_tensors: the tensor name carried by each edge.
    """

    graph: Graph
    x: np.ndarray
    edge_index: np.ndarray
    edge_attr: np.ndarray
    u: np.ndarray
    op_types: tuple[str, ...]
    covered: np.ndarray
    edge_tensors: tuple[str, ...]
    _rebound: OrderedDict = field(default_factory=OrderedDict, init=False, repr=False, compare=False)

    # -- summary figures ------------------------------------------------------------------------
    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def batch_size(self) -> int:
        return self.graph.batch_size

    @property
    def dropout_elements(self) -> tuple[int, ...]:
        """Elements of each dropout a training step of the model applies (recorded when a PyTorch
        module is exported, :func:`perfseer.graph.torch_export.training_dropouts`; empty for ONNX
        files and models without dropout).  Not a feature: the graph is the eval-mode one."""
        return tuple(d.numel for d in self.graph.dropout)

    def _col(self, name: str) -> np.ndarray:
        return self.x[:, _COST_AT[name]]

    @property
    def flops(self) -> float:
        return float(self._col("flops").sum())

    @property
    def macs(self) -> float:
        return float(self._col("macs").sum())

    @property
    def memory_access_bytes(self) -> float:
        return float(self._col("memory_access_bytes").sum())

    @property
    def params(self) -> int:
        return self.graph.parameter_count

    @property
    def uncovered_ops(self) -> dict[str, int]:
        """Operators without a cost function (they got the generic estimate), with their counts."""
        return dict(Counter(op for op, c in zip(self.op_types, self.covered) if not c))

    # -- element types (perfseer.features.precision) ---------------------------------------------
    def _compute_dtypes(self) -> list[str]:
        return node_compute_dtypes(self.graph)

    @property
    def macs_by_dtype(self) -> dict[str, float]:
        """MACs by compute element type (``{"int8": ..., "float32": ...}``)."""

        return totals_by_dtype(self._compute_dtypes(), self._col("macs"))

    @property
    def flops_by_dtype(self) -> dict[str, float]:
        """FLOPs by compute element type."""

        return totals_by_dtype(self._compute_dtypes(), self._col("flops"))

    @property
    def params_by_dtype(self) -> dict[str, int]:
        """Parameters by stored element type."""

        return params_by_dtype(self.graph)

    @property
    def precision(self) -> str:
        """The dominant compute element type: ``float32``, ``float16``, ``bfloat16``, ``int8``...

        The type holding most MACs (FLOPs without MACs); see :mod:`perfseer.features.precision`.
        """

        dtypes = self._compute_dtypes()
        return dominant(totals_by_dtype(dtypes, self._col("macs")), totals_by_dtype(dtypes, self._col("flops")))

    def heaviest(self, k: int = 5, by: str = "flops") -> list[tuple[str, str, float]]:
        """The ``k`` nodes with the largest ``by`` feature: ``(name, op_type, value)``."""
        col = self._col(by)
        order = np.argsort(-col, kind="stable")[:k]
        return [(self.graph.nodes[i].name, self.op_types[i], float(col[i])) for i in order]

    def summary(self) -> dict:
        """The figures of ``perfseer graph --json``."""
        ops = Counter(self.op_types)
        return {
            "model": self.graph.name, "batch_size": self.batch_size, "schema_version": schema.SCHEMA_VERSION,
            "num_nodes": self.num_nodes, "num_edges": self.num_edges, "params": self.params,
            "macs": self.macs, "flops": self.flops, "memory_access_bytes": self.memory_access_bytes,
            "weight_bytes": float(self._col("weight_bytes").sum()),
            "arithmetic_intensity": float(self.u[schema.GLOBAL_FEATURES.index("arithmetic_intensity")]),
            "folded_nodes": self.graph.folded_nodes, "folded_ops": dict(sorted(self.graph.folded_ops.items())),
            "op_counts": dict(sorted(ops.items())),
            "uncovered_ops": self.uncovered_ops,
            **self._dtype_summary(),
            "heaviest": [{"node": n, "op": o, "flops": f} for n, o, f in self.heaviest()],
        }

    def _dtype_summary(self) -> dict:
        dtypes = self._compute_dtypes()
        macs, flops = totals_by_dtype(dtypes, self._col("macs")), totals_by_dtype(dtypes, self._col("flops"))
        return {"precision": dominant(macs, flops), "macs_by_dtype": macs, "flops_by_dtype": flops,
                "params_by_dtype": params_by_dtype(self.graph)}

    # -- transformations ------------------------------------------------------------------------
    def with_batch(self, batch: int) -> PerfGraph:
        """The PerfGraph at another batch size, without re-exporting or re-reading the model."""
        return build_perfgraph(self.graph.with_batch(batch))

    def at_batch(self, batch: int) -> PerfGraph:
        """This graph at ``batch`` (itself at its own batch size), re-bound once and kept.

        The runtime asks the same graph at the same batch sizes for every device of a comparison
        and for every power of two of the batch envelope (:mod:`perfseer.runtime.monotone`); the
        last :data:`KEPT_BATCHES` re-bound graphs are kept on this one, so a 60-GPU comparison
        re-binds each batch size once.  The kept graphs are shared: treat them as read-only, like
        every PerfGraph.  :meth:`with_batch` always computes a fresh one.
        """
        batch = int(batch)
        if batch == self.batch_size:
            return self
        with _REBOUND_LOCK:
            hit = self._rebound.get(batch)
            if hit is not None:
                self._rebound.move_to_end(batch)
                return hit
        hit = self.with_batch(batch)  # outside the lock: two threads may both compute it, one is kept
        with _REBOUND_LOCK:
            self._rebound[batch] = hit
            while len(self._rebound) > KEPT_BATCHES:
                self._rebound.popitem(last=False)
        return hit

    def to_pyg(self, live: bool = False):
        """This graph as a PyTorch Geometric ``Data`` (see :mod:`perfseer.features.pyg`); ``live``:
        with its liveness shares (:func:`perfseer.features.pyg.attach_liveness`)."""

        return to_data(self, live=live)


def node_costs(graph: Graph) -> tuple[list[OpCost], list[NodeView], np.ndarray]:
    costs, views, covered = [], [], np.zeros(len(graph.nodes), dtype=bool)
    for i, node in enumerate(graph.nodes):
        fn = REGISTRY.get(registry_key(node))
        view = NodeView(node, graph)
        views.append(view)
        if fn is not None:
            try:
                costs.append(fn(view))
                covered[i] = True
                continue
            except (AttributeError, TypeError, IndexError, ValueError, ZeroDivisionError, KeyError):
                pass  # an unusual variant of the op (missing optional input...): estimate it
        costs.append(generic_cost(view))
    return costs, views, covered


def _stats(v: np.ndarray) -> list[float]:
    if v.size == 0:
        return [0.0, 0.0, 0.0, 0.0]
    return [float(v.sum()), float(v.mean()), float(np.median(v)), float(v.max())]


# Node columns computed from the others by :func:`derive_features`; the rest are "primary".
DERIVED_NODE_FEATURES = ("arithmetic_intensity", "flops_share", "memory_access_share", "weight_share")
PRIMARY_NODE_COLUMNS = tuple(i for i, name in enumerate(schema.NODE_FEATURES) if name not in DERIVED_NODE_FEATURES)


def derive_features(x: np.ndarray, edge_attr: np.ndarray, batch_size: int, parameter_count: float) -> np.ndarray:
    """Fill the derived node columns of ``x`` in place and return the global features ``u``.

    Everything here is a function of the primary node columns, the edge features, the batch size
    and the parameter count, so a stored graph needs only those (:mod:`perfseer.data.compact`).
    """
    n, ne = x.shape[0], edge_attr.shape[0]
    flops, mac, weights = (x[:, _COST_AT[c]] for c in ("flops", "memory_access_bytes", "weight_bytes"))
    x[:, _COST_AT["arithmetic_intensity"]] = np.divide(flops, mac, out=np.zeros(n), where=mac > 0)
    for col, src in (("flops_share", flops), ("memory_access_share", mac), ("weight_share", weights)):
        total = src.sum()
        x[:, _COST_AT[col]] = src / total if total > 0 else 0.0
    total_flops, total_mac = flops.sum(), mac.sum()
    return np.array([
        n, ne, ne / (n * (n - 1)) if n > 1 else 0.0,
        *_stats(flops), *_stats(mac), *_stats(weights),
        float(edge_attr[:, 0].mean()) if ne else 0.0,
        total_flops / total_mac if total_mac > 0 else 0.0,
        batch_size, parameter_count, float(x[:, _COST_AT["macs"]].sum()),
    ], dtype=np.float64)


def build_perfgraph(graph: Graph) -> PerfGraph:
    """Compute every feature of ``graph``."""
    costs, views, covered = node_costs(graph)
    n = len(graph.nodes)
    x = np.zeros((n, len(schema.NODE_FEATURES)), dtype=np.float64)
    hp_index = schema.HP_INDEX
    cells = [(i, hp_index[k], v) for i, cost in enumerate(costs) for k, v in cost.hp.items()]
    if cells:  # the hyper-parameters, written into x at once
        rows, cols, vals = zip(*cells)
        x[list(rows), list(cols)] = np.array(vals, dtype=np.float64)
    base = np.array([(c.flops, c.macs) for c in costs], dtype=np.float64).reshape(n, 2)
    mem = np.array([memory_of(v, c) for v, c in zip(views, costs)], dtype=np.float64).reshape(n, 5)
    x[:, _COST_AT["flops"]] = base[:, 0]
    x[:, _COST_AT["macs"]] = base[:, 1]
    read, weights, out, wread, params = mem.T
    mac = read + wread + out
    x[:, _COST_AT["memory_access_bytes"]] = mac
    x[:, _COST_AT["input_bytes"]] = read
    x[:, _COST_AT["output_bytes"]] = out
    x[:, _COST_AT["weight_bytes"]] = weights
    x[:, _COST_AT["params"]] = params
    src, dst, names = graph.edges
    tensors = graph.tensors
    eattr = [(t.nbytes, float(t.numel), *edge_shape_features(t)) for t in (tensors[name] for name in names)]
    edge_index = np.array([src, dst], dtype=np.int64).reshape(2, -1)
    edge_attr = np.array(eattr, dtype=np.float64).reshape(-1, len(schema.EDGE_FEATURES))

    u = derive_features(x, edge_attr, graph.batch_size, graph.parameter_count)
    return PerfGraph(graph, x, edge_index, edge_attr, u, tuple(nd.op_type for nd in graph.nodes), covered, names)
