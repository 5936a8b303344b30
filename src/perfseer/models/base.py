"""What every neural predictor shares: the config contract, the module contract, small layers.

A predictor is a ``torch.nn.Module`` built from one config dataclass, ``Model(config)``, whose
``forward(data)`` maps a PyG ``Batch`` of PerfGraphs to a ``[num_graphs, num_targets]`` tensor.
The batch holds ``x`` [N, node_dim], ``edge_index`` [2, E], ``edge_attr`` [E, edge_dim],
``u`` [G, global_dim], ``op_type`` [N] and ``batch`` [N]; the trainer has already log-scaled and
standardised the features, so models never normalise their input themselves.

Configs are flat dataclasses of JSON scalars (``to_dict``/``from_dict``), stored next to the
weights in every checkpoint, so a predictor is rebuilt from its card without pickle.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perfseer.errors import PerfseerError
from perfseer.features.pyg import OP_VOCAB
from perfseer.features.schema import EDGE_FEATURES, GLOBAL_FEATURES, NODE_FEATURES

LOSSES = ("mse", "huber", "l1")
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "elu": nn.ELU}


@dataclass
class ModelConfig:
    """Fields common to every model: input sizes, number of targets, and the loss to train with.

    Subclasses add their hyper-parameters; every field has a default and a comment saying where
    the default comes from.  Construction validates the values (a :class:`PerfseerError` names the
    field, the value received and what is expected).
    """

    node_dim: int = len(NODE_FEATURES)  # columns of x: the feature schema's node features
    edge_dim: int = len(EDGE_FEATURES)  # columns of edge_attr: the schema's edge features
    global_dim: int = len(GLOBAL_FEATURES)  # columns of u: the schema's global features
    num_op_types: int = len(OP_VOCAB)  # rows of the op_type embedding: len(OP_VOCAB)
    num_targets: int = 1  # metrics predicted per graph (columns of the output)
    loss: str = "mse"  # the loss this model is meant to be trained with (a hint for the trainer)

    def __post_init__(self) -> None:
        self._check_types()
        self.validate()

    def validate(self) -> None:
        """Check value ranges; subclasses extend it (and call ``super().validate()``)."""
        for name in ("node_dim", "edge_dim", "global_dim", "num_op_types", "num_targets"):
            _check_positive(self, name)
        _check_choice(self, "loss", LOSSES)

    def to_dict(self) -> dict:
        """The config as a JSON-serialisable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """Rebuild a config from :meth:`to_dict` output; unknown keys are refused."""
        if not isinstance(d, dict):
            raise PerfseerError(f"{cls.__name__} needs a dict of fields, got {type(d).__name__}",
                                "pass the dict that to_dict() returned")
        fields = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise PerfseerError(f"{cls.__name__} has no field(s) {', '.join(unknown)}",
                                f"use only: {', '.join(fields)}")
        return cls(**d)

    def _check_types(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value, kind = getattr(self, f.name), hints[f.name]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                setattr(self, f.name, float(value))  # JSON writes 1.0 as 1
                continue
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if not ok:
                raise PerfseerError(f"{type(self).__name__}.{f.name} must be {kind.__name__}, got {value!r}",
                                    f"pass a {kind.__name__}")


def _check_positive(cfg, name: str, allow_zero: bool = False) -> None:
    value = getattr(cfg, name)
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise PerfseerError(f"{type(cfg).__name__}.{name} must be {bound}, got {value!r}",
                            f"set {name} {bound}")


def _check_choice(cfg, name: str, choices) -> None:
    value = getattr(cfg, name)
    if value not in choices:
        raise PerfseerError(f"{type(cfg).__name__}.{name} is {value!r}, expected one of {', '.join(choices)}",
                            f"set {name} to one of {', '.join(choices)}")


def _check_dropout(cfg) -> None:
    if not 0.0 <= cfg.dropout < 1.0:
        raise PerfseerError(f"{type(cfg).__name__}.dropout must be in [0, 1), got {cfg.dropout!r}",
                            "set dropout to a probability below 1")


class GraphRegressor(nn.Module):
    """Base class of the neural predictors: holds the config and checks the batch it is given.

    Class attributes:
        name: the registry name.
        config_class: the config dataclass ``__init__`` expects.
        permutation_invariant: whether the output ignores the order of the nodes (False only for
            models that read nodes in stored order, such as :class:`~perfseer.models.mlp.MLPNode`).
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[ModelConfig]] = ModelConfig
    permutation_invariant: ClassVar[bool] = True

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise PerfseerError(f"{type(self).__name__} needs a {self.config_class.__name__}, "
                                f"got {type(config).__name__}",
                                f"build it with {self.config_class.__name__}(...) or perfseer.models.build_model")
        self.config = config

    def num_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def _inputs(self, data) -> tuple[Tensor, Tensor, int]:
        """Check the batch's feature widths; return ``(batch, u, num_graphs)``.

        ``batch`` is the node-to-graph index [N]; a lone ``Data`` (no ``batch``) is one graph.
        """
        cfg = self.config
        u = data.u
        if u.dim() == 1:
            u = u.unsqueeze(0)
        for field, value, want in (("x", data.x, cfg.node_dim), ("edge_attr", data.edge_attr, cfg.edge_dim),
                                   ("u", u, cfg.global_dim)):
            if value is None or value.dim() != 2 or value.shape[1] != want:
                got = None if value is None else tuple(value.shape)
                raise PerfseerError(f"{type(self).__name__} expects {field} with {want} columns, got shape {got}",
                                    "build the graphs with the feature schema this model was configured for")
        batch = getattr(data, "batch", None)
        if batch is None:
            batch = torch.zeros(data.x.shape[0], dtype=torch.long, device=data.x.device)
        return batch, u, u.shape[0]


def mlp(dims: list[int], activation: str = "relu", dropout: float = 0.0,
        final_activation: bool = False) -> nn.Sequential:
    """``Linear -> act -> Dropout`` for each step of ``dims``; the last Linear is bare unless
    ``final_activation``."""
    layers: list[nn.Module] = []
    for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(nn.Linear(d_in, d_out))
        if i < len(dims) - 2 or final_activation:
            layers.append(ACTIVATIONS[activation]())
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
    return MLP(*layers)


class MLP(nn.Sequential):
    """The ``nn.Sequential`` of :func:`mlp` (the same modules and state-dict keys); in prediction
    (eval mode, no gradients, no hooks) it runs the layers' functions directly, skipping dropout
    (the identity in eval mode): the same values, without a module call per layer, which is a
    good part of a small graph's prediction time."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training or torch.is_grad_enabled() or _hooked(self):
            return super().forward(x)
        fresh = False  # x is a tensor this call made (a Linear's output): its activation may overwrite it
        for m in self:
            kind = type(m)
            if kind is nn.Linear and not _hooked(m):
                x = F.linear(x, m.weight, m.bias)
                fresh = True
                continue
            if kind is nn.ReLU and not m.inplace and not _hooked(m):
                # in place on a fresh tensor: the same values without allocating another
                x = torch.relu_(x) if fresh else torch.relu(x)
            elif kind is nn.Dropout and not _hooked(m):
                continue
            else:
                x = m(x)
                fresh = False
        return x


def _hooked(m: nn.Module) -> bool:
    """Whether calling ``m`` runs hooks (its own or the global ones) that a direct call would skip."""
    return bool(m._forward_hooks or m._forward_pre_hooks or nn.modules.module._global_forward_hooks
                or nn.modules.module._global_forward_pre_hooks)


class NodeInput(nn.Module):
    """Node input features: ``x`` concatenated with a learned embedding of ``op_type``.

    Args:
        node_dim: columns of ``x``.
        num_op_types: size of the operator vocabulary.
        embedding_dim: width of the operator embedding; 0 leaves ``op_type`` out.

    Shapes: ``x`` [N, node_dim], ``op_type`` [N] -> [N, node_dim + embedding_dim] (:attr:`out_dim`).
    """

    def __init__(self, node_dim: int, num_op_types: int, embedding_dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_op_types, embedding_dim) if embedding_dim > 0 else None
        self.out_dim = node_dim + embedding_dim

    def forward(self, x: Tensor, op_type: Tensor | None) -> Tensor:
        if self.embedding is None:
            return x
        if op_type is None:
            raise PerfseerError("this model embeds op_type but the batch has none",
                                "build graphs with perfseer.features.pyg.to_data, or set op_embedding_dim=0")
        return torch.cat([x, self.embedding(op_type)], dim=-1)


def task_losses(pred: Tensor, target: Tensor, loss: str = "mse") -> list[Tensor]:
    """One scalar loss per target column, ignoring non-finite (missing) targets.

    Used for multi-task training (PCGrad projects the shared-parameter gradients of these
    losses).  A column with no finite target contributes a zero that still belongs to the graph.

    Args:
        pred: [G, T] predictions.
        target: [G, T] targets; NaN marks a metric not measured for that graph.
        loss: one of :data:`LOSSES` (Huber uses delta 1, in standardised target units).
    """
    if pred.shape != target.shape:
        raise PerfseerError(f"predictions have shape {tuple(pred.shape)} but targets {tuple(target.shape)}",
                            "pass targets with one column per model output")
    if loss not in LOSSES:
        raise PerfseerError(f"unknown loss {loss!r}", f"use one of {', '.join(LOSSES)}")
    F = nn.functional
    fn = {"mse": F.mse_loss, "huber": F.huber_loss, "l1": F.l1_loss}[loss]
    out = []
    for t in range(pred.shape[1]):
        ok = torch.isfinite(target[:, t])
        out.append(fn(pred[ok, t], target[ok, t]) if bool(ok.any()) else pred[:, t].sum() * 0.0)
    return out
