"""A predictor's domain of validity: what its training graphs looked like, and a verdict per graph.

A network answers any graph, but only graphs like its training graphs deserve trust.  The domain
is stored in the predictor's card (``card["domain"]``) and summarises the graphs the network was
fitted on:

- ``op_types``: the operator types seen (a graph with another type is out of domain);
- ``batch_sizes``: ``[lo, hi]`` of the training batch sizes;
- ``inputs``: channels seen and the range of input values per sample (``3x224x224`` is 150,528);
- ``precision``: the element sizes of the training graphs' activations (``fp32`` = 4 bytes);
  a graph exported in fp16 is out of domain for a predictor trained on fp32 exports;
- ``globals``: for each global feature (schema :data:`~perfseer.features.schema.GLOBAL_FEATURES`
  but the batch size, checked above) a robust range in ``log10(1 + value)``: the 0.5 % and
  99.5 % quantiles of the training graphs, padded by 5 % of their width on each side, so that one
  odd training graph does not stretch the range;
- ``embedding``: for networks, the encoder embeddings of the training graphs (the vector the head
  reads; stored beside the weights as ``domain.embeddings``) and a distance threshold: the
  ``quantile`` (0.99) of the distances from each *validation* graph to its nearest training
  graph.  Validation graphs are architectures the network never trained on, drawn like the
  training ones, so about 1 % of graphs like the training data land beyond the threshold; graphs
  of other kinds land beyond it far more often.

:func:`verdicts` checks graphs against a domain and returns, per graph, ``in_domain`` and the
human-readable reasons when it is not.  Which checks make a graph *out of domain* was chosen on
held-out model families (``python -m benchmarks run domain``: for each of four folds over timm
families, a domain built from the fold's training families, the rule chosen on its validation
families, scored on its test families): a graph is out when it has an **operator type** no
training graph had, **input channels** or an **input size** outside the training inputs, or a
**precision** the training graphs did not have (:data:`OUT_CHECKS`).  On the test families the rows
this marks out erred 1.90x (RTX 3090 card) and 1.49x (i9 card) the pooled held-out error, the rows
it keeps in 0.96x and 0.98x (``docs/results.md``).  Adding the disagreement of a blend's members,
chosen per fold on validation families, reached 1.81x and 1.71x; it is not used, because on the
shipped cards it grows off the measured batch sizes for the training models too (timm measured
each model at the largest batch that fit).  Distances in global features or operator mix, and a
learned model of the error, did no better on the validation families; the family check marks
every held-out family out by definition.  None of them decides the verdict.

What a graph's verdict cannot see is judged per row by :func:`interval_flags`: a **model family**
absent from training, and a **step** outside the training steps (a predicted value outside the
training values, or FLOPs and memory access of the whole batch below the training graphs').  Neither marks the model out (ResNet-50 is a training-zoo model at batch 1
and at 256), but each widens the row's interval by the card's out-of-domain factor and says why:
unseen families err more than the card's k-fold score (the intervals' ``ood_factor`` is
calibrated on them), and the timm rows were measured at the largest batch that fit, so a much
smaller or larger step is an extrapolation in the batch the measurements cannot check.  :func:`build_domain` computes a domain from training and validation graphs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perfseer.features import schema

DOMAIN_VERSION = 1
GLOBAL_QUANTILES = (0.005, 0.995)  # robust range of each global feature over the training graphs
GLOBAL_PAD = 0.05  # ... padded by this share of its width (in log10(1 + value)) on each side
EMBEDDING_QUANTILE = 0.99  # the NN-distance threshold: this quantile over the validation graphs
MAX_EMBEDDINGS = 4096  # training embeddings kept in the predictor file (a hash-chosen subset beyond)
_CHECKED_GLOBALS = [i for i, n in enumerate(schema.GLOBAL_FEATURES) if n != "batch_size"]
_EDGE_BYTES, _EDGE_ELEMENTS = schema.EDGE_FEATURES.index("bytes"), schema.EDGE_FEATURES.index("elements")
PRECISION_NAMES = {8: "fp64", 4: "fp32", 2: "16-bit (fp16/bf16)", 1: "8-bit"}
# the checks that mark a graph out of domain (chosen on held-out families: benchmarks/suites/domain.py)
OUT_CHECKS = ("operator types", "input channels", "input size", "precision")
STEP_FEATURES = ("flops_total", "memory_access_total")  # the size of a step, for interval_flags


def graph_precision(data) -> int:
    """The element size in bytes carrying most of a graph's activation elements (4 for fp32)."""
    ea = data.edge_attr.detach().cpu().numpy() if hasattr(data.edge_attr, "detach") else np.asarray(data.edge_attr)
    if ea.shape[0] == 0:
        return 4
    elems = ea[:, _EDGE_ELEMENTS].astype(np.float64)
    size = np.rint(ea[:, _EDGE_BYTES] / np.maximum(elems, 1)).astype(np.int64)
    sizes, idx = np.unique(size, return_inverse=True)
    return int(sizes[np.argmax(np.bincount(idx, weights=elems))])


def _u(data) -> np.ndarray:
    u = data.u.detach().cpu().numpy() if hasattr(data.u, "detach") else np.asarray(data.u)
    return u.reshape(-1).astype(np.float64)


def _log(v: np.ndarray) -> np.ndarray:
    return np.log10(1.0 + np.maximum(v, 0.0))


def parse_input(shape: str | Sequence[int] | None) -> tuple[int, int] | None:
    """``(channels, values per sample)`` of ``3x224x224`` (or a shape tuple without the batch)."""
    if shape is None:
        return None
    try:
        dims = [int(d) for d in (shape.split("x") if isinstance(shape, str) else shape)]
    except ValueError:
        return None
    if not dims or any(d < 1 for d in dims):
        return None
    return dims[0], int(np.prod(dims))


def inputs_summary(input_shapes) -> dict | None:
    """``{"channels", "values_per_sample": [lo, hi]}`` of one-sample input shapes (``None``: none known)."""
    inputs = [p for p in (parse_input(s) for s in input_shapes) if p is not None]
    if not inputs:
        return None
    return {"channels": sorted({c for c, _ in inputs}),
            "values_per_sample": [min(v for _, v in inputs), max(v for _, v in inputs)]}


def build_domain(train: Sequence, op_types: Sequence[str], batch_sizes: Sequence[int],
                 input_shapes: Sequence[str | None], train_embeddings: np.ndarray | None = None,
                 val_embeddings: np.ndarray | None = None, source: str = "",
                 families: Sequence[str | None] | None = None) -> tuple[dict, np.ndarray | None]:
    """The domain of a network fitted on ``train`` (PyG graphs of raw features).

    Args:
        train: the training graphs.
        op_types: operator types of the training graphs.
        batch_sizes, input_shapes: per training graph (``"3x224x224"``; ``None`` if unknown).
        train_embeddings, val_embeddings: ``[N, D]`` encoder embeddings of the training and
            validation graphs (``None``: no embedding check, as for baselines).
        source: how the training graphs were found (shown by ``perfseer predictors``).
        families: per training graph its architecture family, ``None`` where it has none (``None``:
            no family check).

    Returns:
        ``(domain dict for the card, training embeddings to store or None)``.
    """
    u = _log(np.stack([_u(g) for g in train]))
    lo, hi = np.quantile(u, GLOBAL_QUANTILES[0], axis=0), np.quantile(u, GLOBAL_QUANTILES[1], axis=0)
    pad = GLOBAL_PAD * (hi - lo)
    batches = [int(b) for b in batch_sizes]
    domain = {
        "version": DOMAIN_VERSION, "source": source, "graphs": len(train),
        "op_types": sorted(set(op_types)),
        "batch_sizes": [min(batches), max(batches)] if batches else None,
        "inputs": inputs_summary(input_shapes),
        "precision": sorted({graph_precision(g) for g in train}),
        "globals": {"space": "log10(1+x)", "quantiles": list(GLOBAL_QUANTILES), "pad": GLOBAL_PAD,
                    "ranges": {schema.GLOBAL_FEATURES[i]: [float(lo[i] - pad[i]), float(hi[i] + pad[i])]
                               for i in _CHECKED_GLOBALS}},
        "embedding": None,
    }
    if families is not None:
        domain["families"] = sorted({str(f) for f in families if f is not None})
    stored = None
    if train_embeddings is not None and len(train_embeddings) and val_embeddings is not None and len(val_embeddings):
        stored = _subset(np.asarray(train_embeddings, dtype=np.float32))
        d = nearest_distance(stored, val_embeddings)
        domain["embedding"] = {"dim": int(stored.shape[1]), "stored": int(len(stored)), "metric": "euclidean",
                               "threshold": float(np.quantile(d, EMBEDDING_QUANTILE)), "quantile": EMBEDDING_QUANTILE,
                               "calibration": f"{len(d)} validation graphs", "val_median": float(np.median(d))}
    return domain, stored


def _subset(e: np.ndarray) -> np.ndarray:
    if len(e) <= MAX_EMBEDDINGS:
        return e
    rng = np.random.default_rng(0)
    return e[np.sort(rng.choice(len(e), MAX_EMBEDDINGS, replace=False))]


def nearest_distance(reference: np.ndarray, queries: np.ndarray, chunk: int = 1024) -> np.ndarray:
    """Euclidean distance from each query row to its nearest ``reference`` row."""
    from perfseer import blas

    ref = np.asarray(reference, dtype=np.float64)
    q = np.asarray(queries, dtype=np.float64)
    rr = (ref * ref).sum(1)
    out = np.empty(len(q))
    # a few queries (one model's batch sizes): one BLAS thread, which does not wait for busy cores
    with blas.limited(1 if len(q) < SMALL_QUERIES else 1 << 16):
        for i in range(0, len(q), chunk):
            part = q[i:i + chunk]
            d2 = (part * part).sum(1)[:, None] + rr[None, :] - 2 * part @ ref.T
            out[i:i + chunk] = np.sqrt(np.maximum(d2.min(1), 0.0))
    return out


SMALL_QUERIES = 64  # fewer query rows than this: one BLAS thread (perfseer.runtime.threads.SMALL_CALL_GRAPHS)


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) < 1e6 else f"{v:.3g}"


def verdicts(domain: dict | None, graphs: Sequence, op_types: Sequence[Sequence[str]],
             input_shapes: Sequence | None = None, embeddings: np.ndarray | None = None,
             stored_embeddings: np.ndarray | None = None,
             families: Sequence[str | None] | None = None) -> list[tuple[bool, list[str]]]:
    """``(in_domain, reasons)`` per graph: out of domain for the checks of :data:`OUT_CHECKS`.

    Args:
        domain: a card's ``domain`` (``None``: no domain known; every graph gets that as its reason).
        graphs: PyG graphs of raw features.
        op_types: per graph, its operator types.
        input_shapes: per graph, one sample's input shape (``"3x224x224"`` or a tuple; ``None`` skips).
        embeddings, stored_embeddings, families: accepted for callers of the earlier rule and not
            used: the embedding distance and the family decide no verdict (they are the model
            space's check, :func:`space_reasons`, and :func:`interval_flags`'s).
    """
    if domain is None:
        return [(False, ["the predictor's card has no domain of validity (re-train it, or run "
                         "scripts/calibrate_predictors.py)"])] * len(graphs)
    seen = set(domain.get("op_types", []))
    out = []
    for i, g in enumerate(graphs):
        reasons = []
        unseen = sorted({op for op in op_types[i] if op not in seen})
        if unseen:
            reasons.append(f"operator types never seen in training: {', '.join(unseen)}")
        inp = parse_input(input_shapes[i]) if input_shapes is not None else None
        di = domain.get("inputs")
        if inp and di:
            c, v = inp
            if c not in di["channels"]:
                reasons.append(f"{c} input channels; training inputs had {', '.join(map(str, di['channels']))}")
            lo, hi = di["values_per_sample"]
            if not lo <= v <= hi:
                reasons.append(f"input of {_fmt(v)} values per sample outside the training range {_fmt(lo)}-{_fmt(hi)}")
        prec = domain.get("precision")
        if prec:
            p = graph_precision(g)
            if p not in prec:
                reasons.append(f"graph precision {PRECISION_NAMES.get(p, f'{p}-byte')}; training graphs were "
                               f"{', '.join(PRECISION_NAMES.get(x, f'{x}-byte') for x in prec)}")
        out.append((not reasons, reasons))
    return out


def _gfmt(v: float, name: str) -> str:
    unit = "FLOPs" if name.startswith("flops") else "B"
    v = float(f"{v:.3g}")  # 999,999.99 (a round trip through log10) reads as 1 M
    for div, pre in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            return f"{v / div:.3g} {pre}{unit}"
    return f"{v:.3g} {unit}"


INTERVAL_FLAG_PREFIXES = ("step smaller than the training steps", "step larger than the training steps",
                          "model family ")


def is_interval_flag(text: str) -> bool:
    """Whether a row's flag is one of :func:`interval_flags`' (a widened interval in domain)."""
    return text.startswith(INTERVAL_FLAG_PREFIXES)


def interval_flags(domain: dict | None, graphs: Sequence, families: Sequence[str | None] | None = None,
                   factor: float | None = None, values: Sequence[float] | None = None,
                   target: str | None = None, unit: str = "") -> list[list[str]]:
    """Per graph, why its interval is widened although its model is in domain (empty: not widened).

    * its **model family** (``timm:`` / ``torchvision:`` references) is absent from the training
      graphs (``None``: unknown, not checked);
    * its **step** lies outside the training steps: its predicted ``values`` (for ``target``)
      outside the range of that target over the training rows (``domain["targets"]``), or both its
      FLOPs and its memory access below the training graphs' (the robust ranges of
      ``domain["globals"]``).  Timm's measurements ran each model at the largest batch that fit,
      so such a step is an extrapolation in the batch the measurements cannot check.

    Args:
        factor: the card's out-of-domain factor, named in the text (``None``: not named).
        values, target, unit: the predictions, the target's key and unit (``None``: the values
            are not checked).
    """
    out: list[list[str]] = [[] for _ in graphs]
    if not domain:
        return out
    wide = f"; interval widened x{factor:g}" if factor else "; interval widened"
    known = set(domain["families"]) if domain.get("families") else None
    ranges = (domain.get("globals") or {}).get("ranges", {})
    span = (domain.get("targets") or {}).get(target) if target is not None else None
    names = list(schema.GLOBAL_FEATURES)
    for i, g in enumerate(graphs):
        fam = families[i] if families is not None else None
        if known is not None and fam is not None and fam not in known:
            out[i].append(f"model family {fam!r} never seen in training{wide} (held-out families err more "
                          f"than the card's k-fold score)")
        u = _u(g)
        b = int(round(u[names.index("batch_size")]))
        lu = _log(u)
        below = []
        for name in STEP_FEATURES:
            if name in ranges and lu[names.index(name)] < ranges[name][0]:
                below.append(f"{name} {_gfmt(10 ** lu[names.index(name)] - 1, name)} < "
                             f"{_gfmt(10 ** ranges[name][0] - 1, name)}")
        v = float(values[i]) if values is not None and span else None
        if v is not None and np.isfinite(v) and v < span[0]:
            out[i].append(f"step smaller than the training steps at batch {b}{wide} (predicted {v:.3g} {unit} < "
                          f"{span[0]:.3g} {unit}, the smallest training value: small steps were not measured)")
        elif len(below) == len(STEP_FEATURES):
            out[i].append(f"step smaller than the training steps at batch {b}{wide} ({'; '.join(below)}: small "
                          f"steps were not measured)")
        elif v is not None and np.isfinite(v) and v > span[1]:
            out[i].append(f"step larger than the training steps at batch {b}{wide} (predicted {v:.3g} {unit} > "
                          f"{span[1]:.3g} {unit}, the largest training value)")
    return out


# -- the model space: where a measured card answers at all -----------------------------------------
# A card's domain verdict above is soft (a row out of it is still answered, flagged); its *model
# space* is hard: a model outside it is not answered by the card unless asked with force, and the
# routing falls through to the next basis.  Two rules, each far beyond what the zoo reaches on a card
# trained on it (timm models at batch 1-1024 on the timm cards: at most ~11x the embedding threshold,
# inputs inside the training range), and each met by a model of another space (ResNet-50 on the
# NAS-Bench-201 card: ~3e12x; 224x224 images on a card of 32x32 ones: 49x the input values):
SPACE_EMBEDDING_FACTOR = 100.0  # nearest-training-graph distance beyond this many times the threshold
SPACE_INPUT_FACTOR = 4.0  # one sample's input values beyond the training range by more than this factor


def space_reasons(domain: dict | None, input_shapes: Sequence | None = None,
                  distance_ratios: Sequence[float | None] | None = None, n: int = 1) -> list[list[str]]:
    """Why each of ``n`` graphs lies outside the model space of a card (empty: inside).

    Args:
        domain: the card's ``domain`` (``None``: no space known, nothing is outside it).
        input_shapes: per graph, one sample's input shape (``None``: not checked).
        distance_ratios: per graph, its nearest-training-graph embedding distance divided by the
            domain's threshold (``None``: not checked).
    """
    out: list[list[str]] = [[] for _ in range(n)]
    if not domain:
        return out
    di = domain.get("inputs")
    for i in range(n):
        inp = parse_input(input_shapes[i]) if input_shapes is not None and di else None
        if inp:
            c, v = inp
            lo, hi = di["values_per_sample"]
            if c not in di["channels"]:
                shape = input_shapes[i] if isinstance(input_shapes[i], str) else "x".join(map(str, input_shapes[i]))
                out[i].append(f"its input of shape {shape} does not have the {' or '.join(map(str, di['channels']))} "
                              f"channels of every training input")
            elif v > hi * SPACE_INPUT_FACTOR or v < lo / SPACE_INPUT_FACTOR:
                out[i].append(f"its input of {_fmt(v)} values per sample is {v / hi if v > hi else lo / v:.3g}x "
                              f"{'above' if v > hi else 'below'} the training inputs ({_fmt(lo)}-{_fmt(hi)})")
        r = distance_ratios[i] if distance_ratios is not None else None
        if r is not None and r > SPACE_EMBEDDING_FACTOR:
            out[i].append(f"its embedding is {r:.3g}x the distance threshold from the nearest training graph "
                          f"(a graph of another model space; the limit is {SPACE_EMBEDDING_FACTOR:g}x)")
    return out
