"""The estimator contract of the non-neural baselines (``additive``, ``gbm``, ``flops``).

Scikit-learn's contract, on PerfGraphs:

- ``__init__(config=None, **params)`` only stores a config dataclass (``params`` override its
  fields); nothing is learned or validated against data there;
- ``fit(graphs, y)`` validates, learns, returns ``self``; learned state ends in ``_``;
- ``predict(graphs)`` returns predictions in the targets' units, ``[N]`` if ``y`` was 1-D, else
  ``[N, T]``; on an unfitted estimator it raises :class:`NotFittedError` saying to call ``fit``;
- ``to_dict()`` / ``from_dict()`` (and ``save`` / ``load``) write and read plain JSON, never
  pickle, so a file from another perfseer version can be read safely; a loaded estimator predicts
  exactly what the saved one did.

``graphs`` are PyG ``Data`` with raw features (``x`` [n, 31], ``u`` [1, 20], ``op_type``);
``y`` holds raw targets (milliseconds, MiB, ...).  Every baseline models ``log y`` (``log1p`` with
``target_transform="log1p"``, for utilisation that can be 0).

Example::

    est = FlopsOnly().fit(train_graphs, y_train)       # y_train [N] milliseconds
    est.predict(test_graphs)                           # [N] milliseconds
    FlopsOnly.from_dict(json.loads(json.dumps(est.to_dict()))).predict(test_graphs)  # identical
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
from pathlib import Path
from typing import ClassVar

import numpy as np

from perfseer.errors import PerfseerError
from perfseer.features import schema
from perfseer.features.pyg import OP_VOCAB

ESTIMATOR_FORMAT = "perfseer.estimator"
TARGET_TRANSFORMS = ("log", "log1p")


class NotFittedError(PerfseerError):
    """``predict`` (or ``to_dict``) was called on an estimator that was never fitted."""


def signed_log1p(v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return np.sign(v) * np.log1p(np.abs(v))


# operator groups of :func:`op_group_features` (convolutions are split by shape in the function)
OP_GROUPS: dict[str, tuple[str, ...]] = {
    "matmul": ("MatMul", "Gemm", "Einsum", "Attention", "MatMulInteger", "QLinearMatMul"),
    "recurrent": ("LSTM", "GRU", "RNN"),
    "norm": ("BatchNormalization", "LayerNormalization", "GroupNormalization", "InstanceNormalization",
             "RMSNormalization", "SimplifiedLayerNormalization", "LpNormalization", "LRN"),
    "activation": ("Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Gelu", "Erf", "Tanh", "Softplus", "Mish", "Swish",
                   "Clip", "LeakyRelu", "PRelu", "Elu", "Celu", "Selu", "ThresholdedRelu", "Softsign", "Shrink"),
    "softmax": ("Softmax", "LogSoftmax"),
    "arithmetic": ("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Reciprocal", "Neg", "Abs", "Max", "Min",
                   "Mean", "Sum", "Where", "Sin", "Cos"),
    "pool": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "LpPool"),
    "reduce": ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare", "ReduceProd",
               "ReduceL1", "ReduceLogSumExp", "ReduceLogSum", "CumSum", "ArgMax", "ArgMin", "TopK"),
    "movement": ("Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Pad",
                 "Resize", "Upsample", "Expand", "Tile", "Flatten", "Squeeze", "Unsqueeze", "DepthToSpace",
                 "SpaceToDepth", "Cast", "ScatterND", "ScatterElements"),
}
OP_GROUP_NAMES = ("conv_depthwise", "conv_pointwise", "conv_spatial", *OP_GROUPS, "other")
OP_GROUP_STATS = ("count", "flops", "memory_access_bytes")


def _group_lookup():
    """The group index of every operator type of the vocabulary, and the convolutions' type ids."""

    group_of = np.full(len(OP_VOCAB), OP_GROUP_NAMES.index("other"), dtype=np.int64)
    for g, ops in OP_GROUPS.items():
        for op in ops:
            if op in OP_VOCAB:
                group_of[OP_VOCAB.index(op)] = OP_GROUP_NAMES.index(g)
    conv = [OP_VOCAB.index(o) for o in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv") if o in OP_VOCAB]
    return group_of, conv


def node_groups(graph, lookup=None) -> np.ndarray:
    """The operator group (an index into :data:`OP_GROUP_NAMES`) of every node of a raw-featured
    graph, ``[n]`` int64: the group of its type, convolutions split into grouped / depthwise, 1x1
    and spatial by their ``groups`` and kernel features."""
    group_of, conv = lookup or _group_lookup()
    x_idx = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
    op = np.asarray(graph.op_type, dtype=np.int64).reshape(-1)
    x = np.asarray(graph.x, dtype=np.float64).reshape(len(op), -1)
    is_conv = np.isin(op, conv)
    k1 = (x[:, x_idx["kernel_h"]] <= 1) & (x[:, x_idx["kernel_w"]] <= 1)
    return np.where(is_conv & (x[:, x_idx["groups"]] > 1), 0,
                    np.where(is_conv & k1, 1, np.where(is_conv, 2, group_of[op])))


def op_group_features(graphs) -> np.ndarray:
    """Per graph, per operator group (:data:`OP_GROUP_NAMES`: convolutions split into grouped /
    depthwise, 1x1 and spatial; then matrix products, recurrent, norms, activations, softmax,
    arithmetic, pooling, reductions, data movement, the rest): the number of nodes, their summed
    FLOPs and summed memory access, ``[N, 3 * groups]`` float64, raw.  A bag of operator costs:
    what a tree model on whole-graph numbers can not see in :func:`global_features` alone."""
    lookup = _group_lookup()
    x_idx = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
    G = len(OP_GROUP_NAMES)
    out = np.zeros((len(graphs), 3 * G))
    for i, g in enumerate(graphs):
        grp = node_groups(g, lookup)
        x = np.asarray(g.x, dtype=np.float64).reshape(len(grp), -1)
        for j, col in enumerate(("flops", "memory_access_bytes")):
            out[i, G * (j + 1):G * (j + 2)] = np.bincount(grp, weights=x[:, x_idx[col]], minlength=G)
        out[i, :G] = np.bincount(grp, minlength=G)
    return out


def global_features(graphs) -> np.ndarray:
    """``u`` of every graph, ``[N, 20]`` float64, raw."""
    if len(graphs) == 0:
        return np.zeros((0, len(schema.GLOBAL_FEATURES)))
    return np.concatenate([np.asarray(g.u, dtype=np.float64).reshape(1, -1) for g in graphs])


class EstimatorConfig:
    """Mixin of the baselines' config dataclasses: ``to_dict`` / ``from_dict`` (the registry's
    config contract)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise PerfseerError(f"{cls.__name__} has no field(s) {', '.join(unknown)}",
                                f"use only: {', '.join(sorted(fields))}")
        return cls(**d)


class GraphEstimator:
    """Base of the baselines: config handling, target checks and transforms, JSON I/O.

    Subclasses set :attr:`name`, :attr:`config_class` and implement ``_fit(graphs, z)`` (``z``:
    ``[N, T]`` transformed targets), ``_predict(graphs) -> [N, T]`` transformed predictions,
    ``_state() -> dict`` (JSON-able) and ``_load_state(dict)``.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = object
    version: ClassVar[int] = 1  # of the serialised state; bump when _state changes meaning

    def __init__(self, config=None, **params):
        base = config if config is not None else self.config_class()
        if not isinstance(base, self.config_class):
            raise PerfseerError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(base).__name__}",
                                f"pass {self.config_class.__name__}(...) or keyword parameters")
        self.config = dataclasses.replace(base, **params) if params else base

    # -- the contract ---------------------------------------------------------------------------

    def fit(self, graphs, y, **kwargs):
        """Learn from ``graphs`` and their raw targets ``y`` (``[N]`` or ``[N, T]``, > 0); returns ``self``."""
        y2 = self._check_y(graphs, y)
        self.n_targets_ = y2.shape[1]
        self.y_ndim_ = np.ndim(y)
        self._fit(graphs, self._forward(y2), **kwargs)
        return self

    def predict(self, graphs) -> np.ndarray:
        """Predicted targets in their units: ``[N]`` if fitted on 1-D ``y``, else ``[N, T]``."""
        self._check_fitted()
        if len(graphs) == 0:
            z = np.zeros((0, self.n_targets_))
        else:
            z = np.asarray(self._predict(graphs), dtype=np.float64).reshape(len(graphs), self.n_targets_)
        out = self._inverse(z)
        return out[:, 0] if self.y_ndim_ == 1 else out

    def to_dict(self) -> dict:
        """The fitted estimator as a JSON-serialisable dict."""
        self._check_fitted()
        return {"format": ESTIMATOR_FORMAT, "name": self.name, "version": self.version,
                "schema_version": schema.SCHEMA_VERSION, "config": dataclasses.asdict(self.config),
                "n_targets": self.n_targets_, "y_ndim": self.y_ndim_, "state": self._state()}

    @classmethod
    def from_dict(cls, d: dict):
        """Rebuild a fitted estimator from :meth:`to_dict` output."""
        if not isinstance(d, dict) or d.get("format") != ESTIMATOR_FORMAT or d.get("name") != cls.name:
            raise PerfseerError(f"not a saved {cls.name!r} estimator",
                                f"pass what {cls.__name__}.to_dict() returned")
        if d.get("version") != cls.version:
            raise PerfseerError(f"the saved {cls.name!r} estimator has format version {d.get('version')}, "
                                f"this perfseer reads {cls.version}", "refit the baseline")
        if d.get("schema_version") != schema.SCHEMA_VERSION:
            raise PerfseerError(f"the saved {cls.name!r} estimator was fitted on feature schema "
                                f"{d.get('schema_version')}, this perfseer uses {schema.SCHEMA_VERSION}",
                                "refit the baseline")
        self = cls(cls.config_class.from_dict(d["config"]))
        self.n_targets_ = int(d["n_targets"])
        self.y_ndim_ = int(d["y_ndim"])
        self._load_state(d["state"])
        return self

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`to_dict` as JSON to ``path`` (atomically)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(json.dumps(self.to_dict()))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike):
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise PerfseerError(f"cannot read estimator file {path}: {e}", "pass a file written by save()") from e
        return cls.from_dict(d)

    def get_params(self) -> dict:
        return dataclasses.asdict(self.config)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(self.config).items())
        return f"{type(self).__name__}({params})"

    # -- helpers --------------------------------------------------------------------------------

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_targets_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet",
                                 "call fit(graphs, y) before predict, or load a fitted one with from_dict")

    def _check_y(self, graphs, y) -> np.ndarray:
        y = np.asarray(y, dtype=np.float64)
        if y.ndim not in (1, 2):
            raise PerfseerError(f"y has shape {y.shape}, expected [N] or [N, T]", "pass one row per graph")
        y2 = y.reshape(len(y), -1)
        if len(graphs) != len(y2):
            raise PerfseerError(f"{len(graphs)} graphs but {len(y2)} targets", "pass one target row per graph")
        if len(y2) == 0:
            raise PerfseerError("cannot fit on no graphs", "pass the training graphs")
        if not np.isfinite(y2).all():
            raise PerfseerError("y holds NaN or infinite values", "drop rows without a measurement")
        tr = self._transform_name()
        if tr == "log" and (y2 <= 0).any():
            raise PerfseerError(f"{int((y2 <= 0).sum())} targets are <= 0, which log cannot take",
                                "drop them, or set target_transform='log1p'")
        if tr == "log1p" and (y2 < 0).any():
            raise PerfseerError("targets are < 0", "targets must be >= 0")
        return y2

    def _transform_name(self) -> str:
        tr = getattr(self.config, "target_transform", "log")
        if tr not in TARGET_TRANSFORMS:
            raise PerfseerError(f"target_transform {tr!r}", f"use one of {', '.join(TARGET_TRANSFORMS)}")
        return tr

    def _forward(self, y: np.ndarray) -> np.ndarray:
        return np.log(y) if self._transform_name() == "log" else np.log1p(y)

    def _inverse(self, z: np.ndarray) -> np.ndarray:
        z = np.clip(z, -700, 700)
        return np.exp(z) if self._transform_name() == "log" else np.expm1(z)

    # -- for subclasses -------------------------------------------------------------------------

    def _fit(self, graphs, z: np.ndarray, **kwargs) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _predict(self, graphs) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _state(self) -> dict:  # pragma: no cover - abstract
        raise NotImplementedError

    def _load_state(self, state: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def floats(a) -> list:
    """A float array as nested lists that JSON round-trips exactly (repr of float64 is exact)."""
    return np.asarray(a, dtype=np.float64).tolist()
