"""Training examples from a graph dataset: one device, one phase, one or more metrics.

A graph dataset (``perfseer data build``) holds one PerfGraph per ``(model, input_shape,
batch_size)`` and a label table whose rows point at them (``graph``), measured on several devices
and in two phases.  A predictor learns one ``(device, phase) -> metric(s)`` mapping, so
:func:`select` keeps the rows of the chosen device(s) and phase and builds, per split, a list of
``Data`` with the targets attached:

- ``y``: ``[1, T]`` float32 targets in their units (``T`` = number of metrics), so batching stacks
  them to ``[G, T]``;
- ``row``: ``[1]`` int64, the row of ``selection.labels`` the example came from.

Rows whose metric is missing (NaN) are dropped; with several metrics a row is kept only when all
are present (multi-task training needs every target of a graph), and the number dropped is
reported.  Rows with a value the target transform cannot take (``<= 0`` for ``log``) are dropped
and reported too.

The split column is ``split`` (by architecture) or ``family_split`` (by timm family; rows without a
family are left out).

Example::

    sel = select("runs-dataset", targets="latency_ms", devices="rtx3090/amp-nchw-pt240", phase="infer")
    sel.train[0].y   # tensor([[41.3]])
    print(sel.describe())
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from perfseer.data.dataset import load_dataset
from perfseer.errors import PerfseerError
from perfseer.runtime.predictor import PredictorError
from perfseer.runtime.scaling import DEFAULT_TARGET_TRANSFORM

log = logging.getLogger(__name__)

METRIC_COLUMNS = ("latency_ms", "memory_mb", "util_pct", "energy_j")
SPLIT_COLUMNS = ("split", "family_split")
PHASES = ("infer", "train")


@dataclass
class Selection:
    """The examples of one selection, per split.

    Attributes:
        train, val, test: lists of ``Data`` with ``y`` ``[1, T]`` and ``row`` ``[1]``.
        targets: the metric names, in the column order of ``y``.
        labels: the selected label rows (a DataFrame); ``Data.row`` indexes it.
        devices, phase, split_column: what was selected.
        dropped: rows left out and why: ``{"missing <metric>": n, "non-positive <metric>": n,
            "no <split_column>": n}``.
    """

    train: list
    val: list
    test: list
    targets: list[str]
    labels: object
    devices: list[str]
    phase: str
    split_column: str
    dropped: dict[str, int] = field(default_factory=dict)

    def split(self, name: str) -> list:
        if name not in ("train", "val", "test"):
            raise PerfseerError(f"unknown split {name!r}", "use train, val or test")
        return getattr(self, name)

    def describe(self) -> str:
        """One line: what was selected, the split sizes and the rows dropped."""
        drop = ", ".join(f"{n} {why}" for why, n in self.dropped.items() if n) or "none"
        return (f"{'+'.join(self.targets)} on {', '.join(self.devices)} ({self.phase}), by {self.split_column}: "
                f"train {len(self.train)}, val {len(self.val)}, test {len(self.test)} examples; dropped rows: {drop}")


def _load(dataset):
    """``(graphs, labels)`` of a dataset object or folder."""
    if hasattr(dataset, "graphs") and hasattr(dataset, "labels"):
        return dataset.graphs, dataset.labels
    if isinstance(dataset, (str, os.PathLike)):
        ds = load_dataset(dataset)
        return ds.graphs, ds.labels
    raise PerfseerError(f"cannot read a dataset from a {type(dataset).__name__}",
                        "pass a dataset folder (perfseer data build --out) or perfseer.data.dataset.load_dataset(...)")


def _as_list(v) -> list[str]:
    if v is None:
        return []
    return [str(v)] if isinstance(v, str) else [str(x) for x in v]


def select(dataset, targets: str | Sequence[str], devices: str | Sequence[str] | None = None,
           phase: str | None = None, split_column: str = "split",
           transforms: Sequence[str] | None = None) -> Selection:
    """Examples of ``targets`` measured on ``devices`` in ``phase``, split by ``split_column``.

    Args:
        dataset: a dataset folder, or an object with ``graphs`` (list of ``Data``) and ``labels``
            (DataFrame with ``graph``, ``device``, ``phase``, the metric and split columns).
        targets: one metric column or several (multi-task), e.g. ``"latency_ms"``.
        devices: one device string or several, matched exactly (``rtx3090/amp-nchw-pt240``).
            ``None``: the dataset's only device (an error lists them if there are several).  The
            graph does not encode the device, so several devices only make sense for settings
            that behave alike.
        phase: ``infer`` or ``train``; ``None``: the only phase present.
        split_column: ``split`` (by architecture) or ``family_split`` (by timm family).
        transforms: per target, the target transform (to drop values it cannot take); default
            :data:`perfseer.runtime.scaling.DEFAULT_TARGET_TRANSFORM`.

    Returns:
        A :class:`Selection`.

    Raises:
        PerfseerError: an unknown metric, device, phase or split column, or an empty selection;
            the message lists what the dataset has.
    """
    graphs, labels = _load(dataset)
    targets = _as_list(targets)
    if not targets:
        raise PerfseerError("no target metric given", f"choose from {', '.join(METRIC_COLUMNS)}")
    present_metrics = [m for m in METRIC_COLUMNS if m in labels.columns and labels[m].notna().any()]
    unknown = [t for t in targets if t not in labels.columns]
    if unknown or len(set(targets)) != len(targets):
        raise PerfseerError(f"unknown or repeated target(s) {targets}",
                            f"the dataset has measurements of: {', '.join(present_metrics) or 'none'}")
    if split_column not in SPLIT_COLUMNS or split_column not in labels.columns:
        raise PerfseerError(f"split column {split_column!r} is not available",
                            f"use one of {', '.join(c for c in SPLIT_COLUMNS if c in labels.columns)}")

    all_devices = sorted(labels["device"].astype(str).unique())
    devices = _as_list(devices)
    if not devices:
        if len(all_devices) != 1:
            raise PerfseerError(f"the dataset has {len(all_devices)} devices; choose which",
                                f"pass devices=one of {', '.join(all_devices)}")
        devices = all_devices
    missing = [d for d in devices if d not in all_devices]
    if missing:
        raise PerfseerError(f"device(s) {', '.join(missing)} not in the dataset",
                            f"choose from {', '.join(all_devices)}")
    rows = labels[labels["device"].astype(str).isin(devices)]
    phases = sorted(rows["phase"].astype(str).unique())
    if phase is None:
        if len(phases) != 1:
            raise PerfseerError(f"{', '.join(devices)} have rows of phases {', '.join(phases)}; choose one",
                                "pass phase='infer' or phase='train'")
        phase = phases[0]
    if phase not in phases:
        raise PerfseerError(f"no {phase!r} rows on {', '.join(devices)}",
                            f"phases measured there: {', '.join(phases) or 'none'}")
    rows = rows[rows["phase"].astype(str) == phase]

    dropped: dict[str, int] = {}
    transforms = list(transforms) if transforms is not None else [DEFAULT_TARGET_TRANSFORM.get(t, "log") for t in targets]
    keep = np.ones(len(rows), dtype=bool)
    for t, tr in zip(targets, transforms):
        v = rows[t].to_numpy(dtype=np.float64)
        missing_t = keep & ~np.isfinite(v)
        dropped[f"missing {t}"] = int(missing_t.sum())
        keep &= ~missing_t
        bad = keep & (v <= 0 if tr == "log" else v < 0)
        dropped[f"non-positive {t}"] = int(bad.sum())
        keep &= ~bad
    no_split = keep & rows[split_column].isna().to_numpy()
    dropped[f"no {split_column}"] = int(no_split.sum())
    keep &= ~no_split
    if not keep.any():
        avail = labels.groupby(["device", "phase"]).apply(
            lambda g: ",".join(m for m in METRIC_COLUMNS if m in g.columns and g[m].notna().any()) or "no metric",
            include_groups=False)
        listing = "; ".join(f"{d} {p}: {m}" for (d, p), m in avail.items())
        raise PerfseerError(f"no row of {', '.join(devices)} ({phase}) has {' and '.join(targets)}"
                            + (f" and a {split_column}" if dropped[f'no {split_column}'] else ""),
                            f"the dataset has: {listing}")
    if len(targets) > 1 and any(dropped[f"missing {t}"] for t in targets):
        log.info("multi-target selection keeps only rows with all of %s: %d rows dropped", ", ".join(targets),
                 sum(dropped[f"missing {t}"] for t in targets))
    rows = rows[keep].reset_index(drop=True)

    y = rows[targets].to_numpy(dtype=np.float32)
    gidx = rows["graph"].to_numpy(dtype=np.int64)
    if len(gidx) and (gidx.min() < 0 or gidx.max() >= len(graphs)):
        raise PerfseerError(f"label rows point at graph {int(gidx.max())}, but the dataset has {len(graphs)} graphs",
                            "rebuild the dataset (perfseer data build)")
    out = _examples(graphs, gidx, rows[split_column].astype(str), y, split_column)
    sel = Selection(out["train"], out["val"], out["test"], targets, rows, devices, phase, split_column, dropped)
    log.info("%s", sel.describe())
    return sel


def _examples(graphs, gidx, split_values, y: np.ndarray, split_column: str) -> dict[str, list]:
    """Per split, a shallow copy of each row's graph with its targets ``y`` and ``row`` attached."""
    out = {"train": [], "val": [], "test": []}
    for i, (g, s) in enumerate(zip(gidx, split_values)):
        if s not in out:
            raise PerfseerError(f"row {i} has {split_column} {s!r}", "splits are train, val or test")
        d = copy.copy(graphs[int(g)])  # one graph may carry several rows (phases, devices): share tensors
        d.y = torch.from_numpy(y[i:i + 1].copy())
        d.row = torch.tensor([i], dtype=torch.long)
        out[s].append(d)
    return out


def targets_of(graphs: Sequence) -> np.ndarray:
    """The ``[N, T]`` targets of a list of examples (their ``y``), float64."""
    if len(graphs) == 0:
        return np.zeros((0, 0))
    return torch.cat([g.y.reshape(1, -1) for g in graphs]).double().numpy()


def select_devices(dataset, metric: str, devices: Sequence[str], phase: str, split_column: str = "split",
                   transform: str | None = None) -> Selection:
    """One ``metric`` on several ``devices`` as several targets of the same graphs (SeerNet-Multi
    over devices): target ``k`` of a graph is its measurement on ``devices[k]``.

    A graph is kept only where every device measured it (the count left out is in ``dropped``).
    Target names are ``metric@device``.
    """
    graphs, labels = _load(dataset)
    devices = _as_list(devices)
    if len(devices) < 2:
        return select(_Pair(graphs, labels), metric, devices, phase, split_column,
                      None if transform is None else [transform])
    parts = []
    for dev in devices:  # reuses select's checks and drop rules, one device at a time
        s = select(_Pair(graphs, labels), metric, [dev], phase, split_column,
                   None if transform is None else [transform])
        rows = s.labels[["graph", "model", "batch_size", split_column, metric]].drop_duplicates("graph")
        parts.append(rows.set_index("graph").rename(columns={metric: dev}))
    joined = parts[0][["model", "batch_size", split_column, devices[0]]]
    for dev, p in zip(devices[1:], parts[1:]):
        joined = joined.join(p[[dev]], how="outer")
    complete = joined[devices].notna().all(axis=1)
    dropped = {"graphs not measured on every device": int((~complete).sum())}
    joined = joined[complete]
    if joined.empty:
        raise PerfseerError(f"no graph was measured on all of {', '.join(devices)} ({phase})",
                            "choose devices that measured the same models")
    names = [f"{metric}@{d}" for d in devices]
    y = joined[devices].to_numpy(dtype=np.float32)
    rows = joined.reset_index()
    out = _examples(graphs, rows["graph"].to_numpy(), rows[split_column].astype(str), y, split_column)
    sel = Selection(out["train"], out["val"], out["test"], names, rows, devices, phase, split_column, dropped)
    log.info("%s", sel.describe())
    return sel


@dataclass
class _Pair:
    graphs: object
    labels: object


def fit_splits(fit) -> tuple[str, ...]:
    """The splits a network is fitted on, validated: ``("train",)`` or ``("train", "test")``
    (validation is always kept for early stopping)."""
    fit = (fit,) if isinstance(fit, str) else tuple(fit)
    if not fit or "val" in fit or any(s not in ("train", "test") for s in fit) or len(set(fit)) != len(fit):
        raise PredictorError(f"cannot fit on splits {list(fit)}",
                             "fit on train, or on train and test (validation is kept for early stopping)")
    return tuple(s for s in ("train", "test") if s in fit)


def subsample_models(sel, n: int) -> list:
    """``sel.train``'s rows of at most ``n`` of its models, chosen by a hash of the model name (so
    that a smaller ``n`` keeps a subset of a larger one's models)."""
    models = sel.labels["model"].astype(str).to_numpy()
    train_models = sorted({models[int(g.row)] for g in sel.train},
                          key=lambda m: hashlib.sha256(f"perfseer-subsample:{m}".encode()).hexdigest())
    keep = set(train_models[:n])
    return [g for g in sel.train if models[int(g.row)] in keep]
