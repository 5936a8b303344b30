"""PerfGraphs as PyTorch Geometric ``Data``, and saving/loading them without pickle.

``Data`` fields: ``x`` [N, F_node] float32, ``edge_index`` [2, E] int64, ``edge_attr`` [E, F_edge]
float32, ``u`` [1, F_global] float32 (one row per graph, so batching stacks them), ``op_type`` [N]
int64 (index into :data:`OP_VOCAB`, 0 = other; PerfSeer leaves op categories out of ``x``), and
``num_nodes``.  Feature columns are those of :mod:`perfseer.features.schema`.

Files are safetensors: the arrays of all graphs concatenated, with per-graph offsets, and the
schema and per-graph metadata as JSON in the header.  Loading never unpickles.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import numpy as np

from perfseer.errors import PerfseerError, SchemaError
from perfseer.features import schema
from perfseer.features.ops import REGISTRY
from perfseer.graph.liveness import liveness

# Node-type vocabulary: index 0 is "other"; frozen with the schema version.
OP_VOCAB: tuple[str, ...] = ("<other>", *sorted(k for k in REGISTRY if "::" not in k))
_OP_INDEX = {op: i for i, op in enumerate(OP_VOCAB)}
_FORMAT = "perfseer.graphs"


def op_type_ids(op_types) -> np.ndarray:
    return np.array([_OP_INDEX.get(op, 0) for op in op_types], dtype=np.int64)


def to_data(pg, live: bool = False):
    """A :class:`~perfseer.features.perfgraph.PerfGraph` as a ``torch_geometric.data.Data``.

    ``live=True`` also attaches ``live`` (:func:`attach_liveness`): only calibrated cards read it, so
    the prediction path computes it once per model for them instead of for every graph."""
    import torch  # deferred: heavy, loaded on first use
    from torch_geometric.data import Data  # deferred: heavy, loaded on first use

    data = Data(
        x=torch.from_numpy(pg.x.astype(np.float32)),
        edge_index=torch.from_numpy(pg.edge_index.copy()),
        edge_attr=torch.from_numpy(pg.edge_attr.astype(np.float32)),
        u=torch.from_numpy(pg.u.astype(np.float32)).unsqueeze(0),
        op_type=torch.from_numpy(op_type_ids(pg.op_types)),
        num_nodes=pg.num_nodes,
    )
    return attach_liveness([data], pg)[0] if live else data


def attach_liveness(datas, pg):
    """Set ``live`` on each of ``datas`` (graphs of ``pg``, any batch size: liveness does not depend
    on it): ``[[live FLOPs share, live operator share, 1 if the network's result does not depend
    on its input]]`` (:mod:`perfseer.graph.liveness`), what a constant-folding runtime keeps.
    Calibration reads it; models do not.  Returns ``datas``."""
    import torch  # deferred: heavy, loaded on first use

    lv = liveness(pg.graph, pg._col("flops"))
    row = [[lv.flops_fraction, lv.node_fraction, float(lv.output_independent)]]
    for d in datas:
        d.live = torch.tensor(row, dtype=torch.float64)
    return datas


def save_graphs(graphs, path: str | os.PathLike, meta: list[dict] | None = None) -> None:
    """Save PerfGraphs (or their ``Data``) to one safetensors file, atomically."""
    from safetensors.numpy import save_file  # deferred: heavy, loaded on first use

    datas = [g if hasattr(g, "edge_index") and not hasattr(g, "graph") else to_data(g) for g in graphs]
    arrays = {
        "x": np.concatenate([d.x.numpy() for d in datas]) if datas else np.zeros((0, len(schema.NODE_FEATURES)), np.float32),
        "edge_index": np.concatenate([d.edge_index.numpy() for d in datas], axis=1) if datas else np.zeros((2, 0), np.int64),
        "edge_attr": np.concatenate([d.edge_attr.numpy() for d in datas]) if datas else np.zeros((0, len(schema.EDGE_FEATURES)), np.float32),
        "u": np.concatenate([d.u.numpy() for d in datas]) if datas else np.zeros((0, len(schema.GLOBAL_FEATURES)), np.float32),
        "op_type": np.concatenate([d.op_type.numpy() for d in datas]) if datas else np.zeros(0, np.int64),
        "node_ptr": np.cumsum([0] + [int(d.num_nodes) for d in datas]).astype(np.int64),
        "edge_ptr": np.cumsum([0] + [int(d.edge_index.shape[1]) for d in datas]).astype(np.int64),
    }
    header = {"format": _FORMAT, "schema": json.dumps(schema.describe()), "op_vocab": json.dumps(OP_VOCAB),
              "meta": json.dumps(meta or [{} for _ in datas])}
    from safetensors import SafetensorError  # deferred: heavy, loaded on first use

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")  # unique: parallel writers
    try:
        save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()}, str(tmp), metadata=header)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # safetensors creates 0600 files; give the usual permissions
        os.replace(tmp, path)
    except (OSError, SafetensorError) as e:
        tmp.unlink(missing_ok=True)
        reason = getattr(e, "strerror", None) or str(e).splitlines()[0]
        raise PerfseerError(f"cannot write graph file {path}: {reason}",
                            "choose a file path in an existing, writable directory (for --save)") from e


def load_graphs(path: str | os.PathLike) -> tuple[list, list[dict]]:
    """Load graphs saved by :func:`save_graphs`: ``(list of Data, list of metadata dicts)``.

    Raises:
        SchemaError: the file is not a perfseer graph file, is corrupt, or uses another schema.
    """
    import torch  # deferred: heavy, loaded on first use
    from safetensors import SafetensorError, safe_open  # deferred: heavy, loaded on first use
    from torch_geometric.data import Data  # deferred: heavy, loaded on first use

    path = Path(path)
    if not path.exists():
        raise SchemaError(f"graph file {path} does not exist", "check the path")
    try:
        with safe_open(str(path), framework="numpy") as f:
            header = f.metadata() or {}
            arrays = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise SchemaError(f"{path} is not a readable safetensors file ({e})", "re-create it with save_graphs") from e
    if header.get("format") != _FORMAT:
        raise SchemaError(f"{path} is not a perfseer graph file", "re-create it with perfseer.features.pyg.save_graphs")
    version = json.loads(header["schema"]).get("version")
    if version != schema.SCHEMA_VERSION:
        raise SchemaError(f"{path} uses feature schema {version}, this perfseer uses {schema.SCHEMA_VERSION}",
                          "re-extract the graphs with this version of perfseer")
    vocab = json.loads(header["op_vocab"])
    remap = np.array([_OP_INDEX.get(op, 0) for op in vocab], dtype=np.int64)
    npt, ept = arrays["node_ptr"], arrays["edge_ptr"]
    out = []
    for g in range(len(npt) - 1):
        n0, n1, e0, e1 = int(npt[g]), int(npt[g + 1]), int(ept[g]), int(ept[g + 1])
        out.append(Data(
            x=torch.from_numpy(arrays["x"][n0:n1].copy()),
            edge_index=torch.from_numpy(arrays["edge_index"][:, e0:e1].copy()),
            edge_attr=torch.from_numpy(arrays["edge_attr"][e0:e1].copy()),
            u=torch.from_numpy(arrays["u"][g:g + 1].copy()),
            op_type=torch.from_numpy(remap[arrays["op_type"][n0:n1]]),
            num_nodes=n1 - n0,
        ))
    return out, json.loads(header["meta"])
