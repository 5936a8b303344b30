"""The networks behind a predictor card's ``predict(graphs) -> [N, T]``: a trained graph network with
its feature and target scaling (:class:`NeuralPredictor`), or a fitted baseline estimator
(:class:`EstimatorNet`).  Inference only: training lives in :mod:`perfseer.fit.trainer`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from perfseer.errors import PerfseerError
from perfseer.runtime import heap
from perfseer.runtime.scaling import FIELDS, FeatureScaler, TargetScaler
from perfseer.runtime.threads import SMALL_CALL_GRAPHS, limited


class NeuralPredictor:
    """A trained network with its feature and target scaling: graphs in, metrics in their units.

    Args:
        model: the network (``forward(batch) -> [G, T]`` standardised log targets).
        feature_scaler, target_scaler: fitted scalers (:mod:`perfseer.runtime.scaling`).
    """

    def __init__(self, model: nn.Module, feature_scaler: FeatureScaler, target_scaler: TargetScaler,
                 batch_size: int = 64, device: str | torch.device = "cpu"):
        self.model = model
        self.feature_scaler = feature_scaler
        self.target_scaler = target_scaler
        self.batch_size = batch_size
        self.device = torch.device(device)

    @property
    def targets(self) -> list[str]:
        return self.target_scaler.targets

    def predict_scaled(self, graphs: Sequence, scaled: bool = False) -> np.ndarray:
        """Raw network outputs ``[N, T]`` (standardised log units); ``scaled``: graphs already scaled."""
        return self._run(graphs, scaled, "predict")[0]

    def predict(self, graphs: Sequence) -> np.ndarray:
        """Predicted metrics ``[N, T]`` in the targets' units (PyG ``Data`` of raw PerfGraphs in)."""
        return self.target_scaler.inverse_transform(self.predict_scaled(graphs))

    def predict_with_embeddings(self, graphs: Sequence) -> tuple[np.ndarray, np.ndarray | None]:
        """``(predict(graphs), embeddings [N, D])`` from one pass through the network, the
        embeddings being what the head reads (``model.embed``); ``None`` for no graphs or a model
        without ``forward_embed`` (whose predictions are then computed alone)."""
        if not hasattr(self.model, "forward_embed"):
            return self.predict(graphs), None
        out, emb = self._run(graphs, False, "both")
        return self.target_scaler.inverse_transform(out), emb

    def embeddings(self, graphs: Sequence) -> np.ndarray | None:
        """The encoder embeddings ``[N, D]`` (what the head reads, ``model.embed``) of raw graphs, or
        ``None`` for no graphs or a model without ``embed`` (baselines)."""
        if not hasattr(self.model, "embed"):
            return None
        return self._run(graphs, False, "embed")[1]

    def _run(self, graphs: Sequence, scaled: bool, what: str) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``what``: ``"predict"`` (outputs), ``"embed"`` (embeddings) or ``"both"`` (one pass)."""
        from torch_geometric.data import Batch  # deferred: heavy, loaded on first use

        if len(graphs) == 0:
            return np.zeros((0, len(self.targets))), None
        outs, embs = [], []
        # many graphs: chunks that allocate and free the same large tensors, kept for reuse (runtime.heap)
        keep = heap.kept() if len(graphs) >= SMALL_CALL_GRAPHS else contextlib.nullcontext()
        with inference(self.model), limited(len(graphs)), keep:
            for i in range(0, len(graphs), self.batch_size):
                chunk = graphs[i:i + self.batch_size]
                if scaled:
                    batch = Batch.from_data_list(list(chunk)).to(self.device)
                else:  # scaled once per chunk: the transform is per element, so the same as per graph
                    batch = collate_inputs(chunk).to(self.device)
                    for field in FIELDS:
                        if getattr(batch, field, None) is not None:
                            setattr(batch, field, self.feature_scaler.transform_field(field, getattr(batch, field)))
                if what == "embed":
                    embs.append(self.model.embed(batch).double().cpu())
                    continue
                if what == "both":
                    out, e = self.model.forward_embed(batch)
                    embs.append(e.double().cpu())
                else:
                    out = self.model(batch)
                outs.append(_as_2d(out, len(chunk)).double().cpu())
        return (torch.cat(outs).numpy() if outs else None), (torch.cat(embs).numpy() if embs else None)


@contextlib.contextmanager
def inference(model: nn.Module):
    """Run a block with ``model`` in eval mode and without gradients (``torch.inference_mode``).  A model in training mode
    (predictions during training) is switched to eval mode and back; one already in eval mode (a
    predictor loaded for prediction, which stays so) is left alone, so that repeated predictions
    do not walk its modules twice a call."""
    was_training = model.training
    if was_training:
        model.eval()
    try:
        with torch.inference_mode():  # no_grad's values, less bookkeeping per operation (5-8 % of a small call)
            yield
    finally:
        if was_training:
            model.train()


def _as_2d(out: torch.Tensor, n: int) -> torch.Tensor:
    if out.dim() == 1:
        out = out.unsqueeze(1)
    if out.dim() != 2 or out.shape[0] != n:
        raise PerfseerError(f"the model returned shape {tuple(out.shape)} for {n} graphs",
                            "forward(batch) must return [num_graphs, num_targets]")
    return out


def _model_input(d, y: torch.Tensor | None = None):
    """A Data holding only what models read (extra fields such as ``row`` do not collate)."""
    from torch_geometric.data import Data  # deferred: heavy, loaded on first use

    out = Data(x=d.x, edge_index=d.edge_index, edge_attr=d.edge_attr, u=d.u, num_nodes=d.num_nodes)
    if getattr(d, "op_type", None) is not None:
        out.op_type = d.op_type
    if y is not None:
        out.y = y
    return out


_FIELDS = ("x", "edge_index", "edge_attr", "u", "op_type")


def collate_inputs(graphs: Sequence):
    """``Batch.from_data_list([_model_input(g) for g in graphs])``: one batch of what models read.
    Graphs of the usual fields (``x`` [n, F], ``edge_index`` [2, E], ``edge_attr`` [E, D] or none,
    ``u`` [1, G], ``op_type`` [n] or none; the same fields in each) are concatenated here directly,
    with the same tensors PyG's collation makes (``edge_index`` shifted by the nodes before it,
    ``batch`` and ``ptr``), a fraction of its time; others go through PyG's collation."""
    from torch_geometric.data import Batch  # deferred: heavy, loaded on first use

    fields = [{k: getattr(g, k, None) for k in _FIELDS} for g in graphs]
    first = fields[0] if fields else None
    if (first is None or any(not isinstance(f["x"], torch.Tensor) or f["x"].dim() != 2
                             or not isinstance(f["edge_index"], torch.Tensor) or f["edge_index"].dim() != 2
                             or not isinstance(f["u"], torch.Tensor) or f["u"].dim() != 2 or f["u"].shape[0] != 1
                             or (f["edge_attr"] is None) != (first["edge_attr"] is None)
                             or (f["op_type"] is None) != (first["op_type"] is None)
                             or g.num_nodes != f["x"].shape[0] for f, g in zip(fields, graphs))):
        return Batch.from_data_list([_model_input(g) for g in graphs])
    counts = [f["x"].shape[0] for f in fields]
    if len(fields) == 1:
        edge_index = first["edge_index"]
    else:  # one concatenation, then each graph's edges shifted by the nodes before it in one add
        offsets = torch.tensor(np.cumsum([0] + counts[:-1]))
        edges = torch.tensor([f["edge_index"].shape[1] for f in fields])
        edge_index = torch.cat([f["edge_index"] for f in fields], dim=1)
        edge_index = edge_index + torch.repeat_interleave(offsets, edges)
    out = {k: (first[k] if len(fields) == 1 else torch.cat([f[k] for f in fields], dim=0))
           for k in ("x", "edge_attr", "u", "op_type") if first[k] is not None}
    n = torch.tensor(counts)
    batch = (torch.zeros(counts[0], dtype=torch.long) if len(counts) == 1  # one graph: all its nodes are graph 0
             else torch.repeat_interleave(torch.arange(len(counts)), n))
    return Batch(**out, edge_index=edge_index, num_nodes=int(sum(counts)), batch=batch,
                 ptr=torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(n, 0)]))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise PerfseerError(f"unknown device {name!r}", "use cpu, cuda, cuda:N or auto") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PerfseerError(f"device {name!r} was asked for but CUDA is not available",
                            "use device='cpu', or 'auto' to take CUDA only when present")
    return dev


class EstimatorNet:
    """A fitted baseline estimator behind the ``predict(graphs) -> [N, T]`` of a network."""

    def __init__(self, estimator, n_targets: int):
        self.estimator, self.n_targets = estimator, n_targets

    def predict(self, graphs) -> np.ndarray:
        return np.asarray(self.estimator.predict(graphs), dtype=np.float64).reshape(len(graphs), self.n_targets)


def embeddings(net, graphs) -> np.ndarray | None:
    """Encoder embeddings ``[N, D]`` (what the head reads) of raw PyG graphs, or ``None`` for a
    network without an ``embed`` method (baselines).  A prediction that also needs them takes both
    from one pass: :meth:`perfseer.runtime.predictor.Predictor.predict_with_embeddings`."""
    model = getattr(net, "model", None)
    if model is None or not hasattr(model, "embed") or not len(graphs):
        return None
    return net.embeddings(list(graphs))  # NeuralPredictor.embeddings
