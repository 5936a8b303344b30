"""Feature and target transforms, fitted on the training split and stored with a predictor.

PerfGraph features are raw FLOPs, bytes and counts spanning ten orders of magnitude
(:mod:`perfseer.features.schema`), and so are latencies and memory.  Networks learn on:

- **features**: ``sign(v) * log1p(|v|)`` of every column of ``x``, ``edge_attr`` and ``u``, then
  standardised per column, ``(v - mean) / std``, with the mean and std of the training graphs
  (every node, edge and graph counts once; a constant column gets std 1);
- **targets**: ``log(y)`` (``log1p`` for utilisation, which can be 0), then standardised per target.
  The loss is MSE on these, so it weighs relative errors alike at 1 ms and at 1 s; predictions are
  brought back to the target's unit by :meth:`TargetScaler.inverse_transform`.

**Feature groups** (ablations, PerfSeer Table 1): :data:`FEATURE_GROUPS` names column groups;
a :class:`FeatureScaler` built with ``mask=("edge", ...)`` sets those columns to 0 after
standardisation (the training mean), so a model sees no information in them.

Both scalers serialise to plain JSON dicts (``to_dict`` / ``from_dict``): a predictor card stores
them next to the weights.

Example::

    fs = FeatureScaler().fit(train_graphs)
    ts = TargetScaler(["latency_ms"]).fit(y_train)          # y_train [N, 1], milliseconds
    data = fs.transform(graph)                              # a new Data; graph is unchanged
    ms = ts.inverse_transform(model(batch).detach().numpy())
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from perfseer.errors import PerfseerError
from perfseer.features import schema

# field of Data -> feature names, in column order
FIELDS = {"x": schema.NODE_FEATURES, "edge_attr": schema.EDGE_FEATURES, "u": schema.GLOBAL_FEATURES}

# group name -> (Data field, column indices)
FEATURE_GROUPS: dict[str, tuple[str, tuple[int, ...]]] = {
    "node_hp": ("x", tuple(range(len(schema.HYPERPARAMETERS)))),
    "node_cost": ("x", tuple(range(len(schema.HYPERPARAMETERS), len(schema.NODE_FEATURES)))),
    "edge": ("edge_attr", tuple(range(len(schema.EDGE_FEATURES)))),
    "global": ("u", tuple(range(len(schema.GLOBAL_FEATURES)))),
}

# target -> transform applied before standardising; "log" needs values > 0
TARGET_TRANSFORMS = ("log", "log1p")
DEFAULT_TARGET_TRANSFORM = {"latency_ms": "log", "memory_mb": "log", "energy_j": "log", "util_pct": "log1p"}
_FORMAT = "perfseer.scaling"


def signed_log1p(v):
    """``sign(v) * log1p(|v|)`` of a tensor or array (defined for negative features too)."""
    if isinstance(v, torch.Tensor):
        return torch.sign(v) * torch.log1p(torch.abs(v))
    v = np.asarray(v, dtype=np.float64)
    return np.sign(v) * np.log1p(np.abs(v))


def _check_groups(mask: Sequence[str]) -> tuple[str, ...]:
    mask = tuple(mask)
    unknown = [g for g in mask if g not in FEATURE_GROUPS]
    if unknown:
        raise PerfseerError(f"unknown feature group(s) {', '.join(map(repr, unknown))}",
                            f"choose from {', '.join(FEATURE_GROUPS)}")
    return mask


class FeatureScaler:
    """``signed_log1p`` then per-column standardisation of ``x``, ``edge_attr`` and ``u``.

    Args:
        mask: feature groups (keys of :data:`FEATURE_GROUPS`) to zero out after scaling.

    Attributes (after :meth:`fit`):
        mean_, std_: ``{field: float64 array [F_field]}`` of the log-scaled training features.
    """

    def __init__(self, mask: Sequence[str] = ()):
        self.mask = _check_groups(mask)

    def fit(self, graphs: Sequence) -> "FeatureScaler":
        """Fit the column statistics on ``graphs`` (the training split)."""
        if len(graphs) == 0:
            raise PerfseerError("cannot fit feature scaling on no graphs", "pass the training graphs")
        self.mean_, self.std_ = {}, {}
        for field, names in FIELDS.items():
            cols = len(names)
            parts = [getattr(g, field).detach().cpu().double().reshape(-1, cols) for g in graphs]
            v = signed_log1p(torch.cat(parts).numpy()) if parts else np.zeros((0, cols))
            if v.shape[0] == 0:  # e.g. single-node graphs have no edges
                self.mean_[field], self.std_[field] = np.zeros(cols), np.ones(cols)
                continue
            mean, std = v.mean(0), v.std(0)
            std[~(std > 1e-12)] = 1.0  # constant columns (a hyper-parameter no operator has)
            self.mean_[field], self.std_[field] = mean, std
        return self

    def _fitted(self) -> None:
        if not hasattr(self, "mean_"):
            raise PerfseerError("this FeatureScaler is not fitted", "call fit(train_graphs) first")

    def transform_field(self, field: str, values: torch.Tensor) -> torch.Tensor:
        """Scale one field's ``[rows, F]`` tensor (float32 out), masking its masked groups."""
        self._fitted()
        mean = torch.as_tensor(self.mean_[field], dtype=torch.float32, device=values.device)
        std = torch.as_tensor(self.std_[field], dtype=torch.float32, device=values.device)
        v = values.float()
        # (sign(v) * log1p(|v|) - mean) / std, each step in place on the one new tensor: the same
        # operations in the same order (the same values) without a tensor per step
        out = torch.abs(v).log1p_().mul_(torch.sign(v)).sub_(mean).div_(std)
        for group in self.mask:
            gfield, cols = FEATURE_GROUPS[group]
            if gfield == field:
                out[..., list(cols)] = 0.0
        return out

    def transform(self, data):
        """A shallow copy of ``data`` (a PyG ``Data``) with ``x``, ``edge_attr`` and ``u`` scaled;
        every other field (``edge_index``, ``op_type``, ``y``, ...) is shared, not copied."""
        out = copy.copy(data)
        for field in FIELDS:
            value = getattr(data, field, None)
            if value is not None:
                setattr(out, field, self.transform_field(field, value))
        return out

    def to_dict(self) -> dict:
        self._fitted()
        return {"format": _FORMAT, "kind": "features", "schema_version": schema.SCHEMA_VERSION,
                "transform": "signed_log1p+standardise", "mask": list(self.mask),
                "mean": {k: v.tolist() for k, v in self.mean_.items()},
                "std": {k: v.tolist() for k, v in self.std_.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> "FeatureScaler":
        if d.get("format") != _FORMAT or d.get("kind") != "features":
            raise PerfseerError("not a feature-scaler dict", "pass what FeatureScaler.to_dict() returned")
        if d.get("schema_version") != schema.SCHEMA_VERSION:
            raise PerfseerError(f"the feature scaling was fitted on schema {d.get('schema_version')}, "
                                f"this perfseer uses {schema.SCHEMA_VERSION}", "retrain the predictor")
        self = cls(mask=d.get("mask", ()))
        self.mean_ = {k: np.asarray(v, dtype=np.float64) for k, v in d["mean"].items()}
        self.std_ = {k: np.asarray(v, dtype=np.float64) for k, v in d["std"].items()}
        for field, names in FIELDS.items():
            if self.mean_.get(field, np.zeros(0)).shape != (len(names),):
                raise PerfseerError(f"feature scaling for {field!r} has the wrong number of columns",
                                    "retrain the predictor")
        return self


class TargetScaler:
    """``log`` (or ``log1p``) then per-target standardisation of ``[N, T]`` targets.

    Args:
        targets: the target names (metric columns), one per column of ``y``.
        transforms: per target, ``"log"`` or ``"log1p"``; default from
            :data:`DEFAULT_TARGET_TRANSFORM` (``log``, and ``log1p`` for ``util_pct``).

    Attributes (after :meth:`fit`): ``mean_``, ``std_`` ``[T]`` of the transformed training targets.
    """

    def __init__(self, targets: Sequence[str], transforms: Sequence[str] | None = None):
        self.targets = [str(t) for t in ([targets] if isinstance(targets, str) else targets)]
        if not self.targets:
            raise PerfseerError("no target names given", "pass e.g. ['latency_ms']")
        if transforms is None:
            transforms = [DEFAULT_TARGET_TRANSFORM.get(t, "log") for t in self.targets]
        self.transforms = list(transforms)
        bad = [t for t in self.transforms if t not in TARGET_TRANSFORMS]
        if bad or len(self.transforms) != len(self.targets):
            raise PerfseerError(f"target transforms {self.transforms} for targets {self.targets}",
                                f"give one of {', '.join(TARGET_TRANSFORMS)} per target")

    def _as2d(self, y) -> np.ndarray:
        y = np.asarray(y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else y, dtype=np.float64)
        y = y.reshape(-1, 1) if y.ndim == 1 else y
        if y.ndim != 2 or y.shape[1] != len(self.targets):
            raise PerfseerError(f"targets of shape {y.shape}, expected [N, {len(self.targets)}] for {self.targets}",
                                "pass one column per target")
        return y

    def _forward(self, y: np.ndarray) -> np.ndarray:
        out = np.empty_like(y)
        for i, (name, tr) in enumerate(zip(self.targets, self.transforms)):
            col = y[:, i]
            if not np.isfinite(col).all():
                raise PerfseerError(f"target {name!r} holds NaN or infinite values",
                                    "drop rows without a measurement (training.data.select does)")
            if tr == "log":
                if (col <= 0).any():
                    raise PerfseerError(f"target {name!r} has {int((col <= 0).sum())} values <= 0, which log cannot take",
                                        "drop them, or use the 'log1p' transform for this target")
                out[:, i] = np.log(col)
            else:
                if (col <= -1).any():
                    raise PerfseerError(f"target {name!r} has values <= -1, which log1p cannot take",
                                        "targets must be >= 0")
                out[:, i] = np.log1p(col)
        return out

    def fit(self, y) -> "TargetScaler":
        y = self._as2d(y)
        if y.shape[0] == 0:
            raise PerfseerError("cannot fit target scaling on no rows", "pass the training targets")
        z = self._forward(y)
        self.mean_, self.std_ = z.mean(0), z.std(0)
        self.std_[~(self.std_ > 1e-12)] = 1.0
        return self

    def _fitted(self) -> None:
        if not hasattr(self, "mean_"):
            raise PerfseerError("this TargetScaler is not fitted", "call fit(y_train) first")

    def transform(self, y) -> np.ndarray:
        """``[N, T]`` targets in their units -> standardised log targets (float64)."""
        self._fitted()
        return (self._forward(self._as2d(y)) - self.mean_) / self.std_

    def inverse_transform(self, z) -> np.ndarray:
        """Standardised log predictions ``[N, T]`` -> the targets' units (float64)."""
        self._fitted()
        z = self._as2d(z) * self.std_ + self.mean_
        out = np.empty_like(z)
        for i, tr in enumerate(self.transforms):
            # clip so that a wild prediction of an untrained model is huge, not inf
            out[:, i] = np.exp(np.clip(z[:, i], -700, 700)) if tr == "log" else np.expm1(np.clip(z[:, i], -700, 700))
        return out

    def to_dict(self) -> dict:
        self._fitted()
        return {"format": _FORMAT, "kind": "targets", "targets": self.targets, "transforms": self.transforms,
                "mean": self.mean_.tolist(), "std": self.std_.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "TargetScaler":
        if d.get("format") != _FORMAT or d.get("kind") != "targets":
            raise PerfseerError("not a target-scaler dict", "pass what TargetScaler.to_dict() returned")
        self = cls(d["targets"], d["transforms"])
        self.mean_ = np.asarray(d["mean"], dtype=np.float64)
        self.std_ = np.asarray(d["std"], dtype=np.float64)
        if self.mean_.shape != (len(self.targets),):
            raise PerfseerError("target scaling has the wrong number of targets", "retrain the predictor")
        return self
