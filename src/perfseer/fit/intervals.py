"""Give a predictor its domain of validity and its intervals, from the data it was trained on.

:func:`calibrate` is run by :func:`perfseer.runtime.predictor.train_predictor` on the selection it trained
on, and by ``scripts/calibrate_predictors.py`` on a card trained before these fields existed: the
card names its dataset (committed under ``datasets/``), split column, split(s) fitted,
``max_train_models``, targets and phase, which select the same rows again
(:func:`selection_for`).  It adds to the card:

- ``domain`` (:mod:`perfseer.trust.domain`) over the graphs the network was fitted on, with the
  embedding threshold calibrated on the validation graphs, and ``domain["targets"]``: the range of
  each target over the fitted rows (for spec-free sanity bounds);
- ``intervals`` (:mod:`perfseer.trust.intervals`): per target the split-conformal quantile of the
  validation rows' log residuals.
"""

from __future__ import annotations

import numpy as np

from perfseer.data.dataset import load_dataset, resolve_dataset
from perfseer.data.splits import model_family
from perfseer.errors import PerfseerError
from perfseer.features.pyg import OP_VOCAB
from perfseer.fit.data import fit_splits, select, select_devices, subsample_models, targets_of
from perfseer.runtime.net import embeddings
from perfseer.trust import domain as dom
from perfseer.trust import intervals as itv


def selection_for(card: dict, data=None):
    """The selection (:func:`perfseer.fit.data.select`) a card was trained on, with ``train``
    holding the rows the network was fitted on.

    Raises:
        PerfseerError: the card does not say what it was trained on, or the dataset is missing.
    """

    t = card.get("training") or {}
    if data is None and not t.get("dataset"):
        raise PerfseerError(f"predictor {card.get('name')} does not name its training data",
                            "pass the dataset it was trained on")
    ds = data if hasattr(data, "labels") else load_dataset(resolve_dataset(data or t["dataset"].removeprefix("datasets/")))
    targets = card["targets"]
    devices = list(dict.fromkeys(x["device"] for x in targets))
    metrics = list(dict.fromkeys(x["metric"] for x in targets))
    phase = targets[0]["phase"]
    split = t.get("split_column") or "split"
    if len(devices) > 1:
        sel = select_devices(ds, metrics[0], devices, phase, split)
        if "input_shape" in ds.labels and "graph" in sel.labels:  # one graph, one input shape
            shape_of = ds.labels.drop_duplicates("graph").set_index("graph")["input_shape"]
            sel.labels["input_shape"] = sel.labels["graph"].map(shape_of).astype(str).to_numpy()
    else:
        sel = select(ds, metrics, devices, phase, split)
    fit = fit_splits(t.get("fit_splits") or ["train"])
    if fit != ("train",):
        sel.train, sel.test = [g for s in fit for g in sel.split(s)], []
    if t.get("max_train_models"):
        sel.train = subsample_models(sel, int(t["max_train_models"]))
    return sel


MAX_CALIBRATION = 3000  # validation rows used at most (a seeded random subset beyond): ample for a 90 % quantile


def _subset(graphs: list, n: int) -> list:
    if len(graphs) <= n:
        return list(graphs)
    keep = np.sort(np.random.default_rng(0).choice(len(graphs), n, replace=False))
    return [graphs[i] for i in keep]


def calibrate(predictor, sel) -> None:
    """Write ``domain`` and ``intervals`` into ``predictor.card`` (and the training embeddings into
    the predictor) from a selection whose ``train`` are the fitted rows and ``val`` the validation
    rows."""

    if not len(sel.train) or not len(sel.val):
        raise PerfseerError("calibration needs the training and validation rows", "check the card's training data")
    labels = sel.labels
    rows = [int(g.row) for g in sel.train]
    shapes = labels["input_shape"].astype(str).to_numpy()[rows] if "input_shape" in labels else [None] * len(rows)
    batches = labels["batch_size"].to_numpy()[rows]
    ops = {OP_VOCAB[int(i)] for g in sel.train for i in g.op_type.unique().tolist()}
    net = predictor.net
    val = _subset(sel.val, MAX_CALIBRATION)
    e_train, e_val = embeddings(net, _subset(sel.train, dom.MAX_EMBEDDINGS)), embeddings(net, val)
    t = predictor.card.get("training") or {}
    fit = "+".join(t.get("fit_splits") or ["train"])
    source = (f"{len(sel.train)} rows fitted ({fit} of {t.get('dataset', 'its dataset')}, by {sel.split_column}); "
              f"embedding threshold from {len(val)} validation rows")
    families = None
    if "model" in labels:
        families = [model_family(m) for m in labels["model"].astype(str).to_numpy()[rows]]
    domain, stored = dom.build_domain(sel.train, ops, batches, shapes, e_train, e_val, source=source, families=families)
    y = targets_of(sel.train)
    keys = [x for x in predictor.targets]
    domain["targets"] = {k.key: [float(np.nanmin(y[:, c])), float(np.nanmax(y[:, c]))] for c, k in enumerate(keys)}
    yv = targets_of(val)
    pv = predictor.predict_graphs(val)
    q = {}
    for c, k in enumerate(keys):
        q[k.key] = itv.calibrate(yv[:, c], pv[:, c])
    old = predictor.card.get("intervals") or {}
    predictor.card["domain"] = domain
    predictor.card["intervals"] = {
        "level": itv.LEVEL, "method": "split-conformal", "space": "log",
        "calibration": f"{len(val)} validation rows (by {sel.split_column})",
        "targets": q, "ood_factor": old.get("ood_factor", itv.DEFAULT_OOD_FACTOR),
        "ood_factor_source": old.get("ood_factor_source", "default (docs/concepts/trust.md)"),
    }
    predictor.domain_embeddings = stored
