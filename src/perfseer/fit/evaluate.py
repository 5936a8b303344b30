"""Score a predictor on measurements it was not trained on (``perfseer evaluate``).

Each row of a measurement table (or of a built dataset's labels) is matched to the predictor's
targets by device, phase and metric.  Rows no target covers are counted by device and phase and
left out: a predictor is never asked about a device it does not know.  Each distinct ``(model,
input_shape)`` of the covered rows is extracted once and re-bound to its batch sizes; a model
that cannot be built is listed with its error and its rows are left out.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from perfseer.data.dataset import MANIFEST_FILE, load_dataset, parse_shape
from perfseer.data.table import read_table
from perfseer.errors import PerfseerError
from perfseer.features.extract import extract
from perfseer.features.pyg import OP_VOCAB
from perfseer.fit.metrics import evaluate


def _rows_and_graphs(measurements, split):
    """``(rows DataFrame, graph_of(row_index) -> Data or None, failures)``."""

    path = Path(measurements)
    if path.is_dir() or (path / MANIFEST_FILE).exists():
        ds = load_dataset(path)
        rows = ds.labels
        if split is not None:
            rows = rows[rows["split"].astype(str) == split]
        rows = rows.reset_index(drop=True)
        return rows, (lambda i: ds.graphs[int(rows.at[i, "graph"])]), []
    if split is not None:
        raise PerfseerError("--split needs a dataset folder", "pass a folder written by perfseer data build")
    rows = read_table(path).reset_index(drop=True)
    cache: dict = {}
    failures = []

    def build(model, shape):
        key = (model, shape)
        if key not in cache:
            try:
                ref = model
                if model.endswith(".onnx") and not os.path.isabs(model) and (path.parent / model).exists():
                    ref = str(path.parent / model)
                cache[key] = extract(ref, batch=1, input_shape=parse_shape(shape))
            except Exception as e:  # noqa: BLE001 - reported per model, the evaluation goes on
                cache[key] = None
                failures.append({"model": model, "input_shape": shape, "error": f"{type(e).__name__}: {e}"})
        return cache[key]

    def graph_of(i):
        pg = build(str(rows.at[i, "model"]), str(rows.at[i, "input_shape"]))
        if pg is None:
            return None
        b = int(rows.at[i, "batch_size"])
        return (pg if b == pg.batch_size else pg.with_batch(b)).to_pyg()

    return rows, graph_of, failures


def evaluate_predictor(predictor, measurements: str | os.PathLike, split: str | None = None) -> dict:
    """Score ``predictor`` on the rows of ``measurements`` it covers.

    Returns:
        ``{"scores": {target key: metrics}, "rows_scored", "rows_not_covered", "not_covered":
        {"device (phase)": rows}, "failures": [{model, input_shape, error}], "unseen_ops": [...]}``.
        Each target's metrics add ``coverage90`` (% of measurements inside the 90 % intervals;
        absent for a card without calibration), ``out_of_domain_pct`` and ``clipped_pct`` (% of
        rows whose prediction was clipped to the physical bounds).
    """

    rows, graph_of, failures = _rows_and_graphs(measurements, split)
    covered = np.zeros(len(rows), dtype=bool)
    per_target = []
    for c, t in enumerate(predictor.targets):
        if t.metric not in rows.columns:
            continue
        mask = ((rows["device"].astype(str) == t.device) & (rows["phase"].astype(str) == t.phase)
                & rows[t.metric].notna()).to_numpy()
        covered |= mask
        per_target.append((c, t, np.flatnonzero(mask)))
    not_covered = rows.loc[~covered].groupby(["device", "phase"]).size()
    graphs, unseen = {}, set()
    for i in np.flatnonzero(covered):
        g = graph_of(int(i))
        if g is not None:
            graphs[int(i)] = g
            unseen.update(predictor.unseen_ops([OP_VOCAB[int(k)] for k in g.op_type.unique().tolist()]))
    order = sorted(graphs)
    pred, emb = (predictor.predict_with_embeddings([graphs[i] for i in order]) if order
                 else (np.zeros((0, len(predictor.targets))), None))
    at = {i: k for k, i in enumerate(order)}
    shapes = rows["input_shape"].astype(str).to_numpy() if "input_shape" in rows else None
    verdicts, checked = predictor.assess([graphs[i] for i in order], pred,
                                         [[OP_VOCAB[int(k)] for k in graphs[i].op_type.unique().tolist()] for i in order],
                                         [shapes[i] for i in order] if shapes is not None else None,
                                         embeddings=emb)
    scores, scored = {}, set()
    for c, t, idx in per_target:
        idx = [int(i) for i in idx if int(i) in at]
        if not idx:
            continue
        y = rows.loc[idx, t.metric].to_numpy(dtype=np.float64)
        p = pred[[at[i] for i in idx], c]
        scores[t.key] = evaluate(y, p)
        ivs = [checked[at[i]][c]["interval"] for i in idx]
        if all(iv is not None for iv in ivs):  # cards without calibration have no intervals
            lo, hi = np.array([iv[0] for iv in ivs]), np.array([iv[1] for iv in ivs])
            scores[t.key]["coverage90"] = float(np.mean((y >= lo) & (y <= hi)) * 100)
        scores[t.key]["out_of_domain_pct"] = float(np.mean([not verdicts[at[i]][0] for i in idx]) * 100)
        scores[t.key]["clipped_pct"] = float(np.mean([bool(checked[at[i]][c]["flags"]) for i in idx]) * 100)
        scored.update(idx)
    return {"predictor": predictor.name, "measurements": str(measurements), "scores": scores,
            "rows_scored": len(scored), "rows_not_covered": int((~covered).sum()),
            "not_covered": {f"{d} ({p})": int(n) for (d, p), n in not_covered.items()},
            "failures": failures, "unseen_ops": sorted(unseen)}
