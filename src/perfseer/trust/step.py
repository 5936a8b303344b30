"""The step domain of a measured training card: the batch at which its labels were taken.

The RTX 3090 training card (``rtx3090-amp-nchw-pt112.train``) learned from the timm benchmark,
which measures each model at **one** batch size: the first of 512, 384, 256, 192, 128, ... whose
step fits in the GPU's memory (95 % of its 652 rows at 16-512 samples).  The card therefore knows
each architecture at that batch and barely responds to the batch otherwise (ResNet-34: 247 ms at
batch 16, 270 ms at 64; measured at 512: 313 ms).  A query step is inside the card's step domain
when its batch, relative to the batch the benchmark would have run the model at, lies in the range
the card's own training and validation rows span:

    ratio = batch / min(top, largest batch that fits)

``top`` is the largest batch of the card's rows (512), and the largest batch that fits comes
from a memory estimate read off the graph's global features, so that it costs nothing at
prediction time: ``fixed + per_param * params + per_act * activation bytes`` where the
activation bytes are the sum of the graph's edge tensors (fp32, proportional to the batch) but
those out of view operators.  Its three constants are fitted to perfseer's memory simulator
(:mod:`perfseer.memory`) at the card's precision and optimizer on a sample of the card's models
(:mod:`perfseer.fit.stepdomain`), and the ratio's range is the 0.5 %-99.5 % quantiles of the
fitted and validation rows, padded (``card["domain"]["step"]``).

:func:`step_reasons` says why a graph is outside it; the routing (:mod:`perfseer.runtime.route`)
then answers with the next basis anchored on the card (:mod:`perfseer.runtime.anchor`).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from perfseer.features import schema
from perfseer.features.pyg import OP_VOCAB

STEP_VERSION = 1
QUANTILES = (0.005, 0.995)  # the ratio's robust range over the card's rows ...
PAD = 0.05  # ... padded by this share of its width (in log2) on each side
_N = list(schema.GLOBAL_FEATURES)


#: Operators whose output is a view or a re-labelling of their input: their edges are not counted
#: as activation memory (on the simulated sample, the spread of the simulator's bytes per sample
#: over the estimate's fell from 0.38 to 0.28 in log when they were left out).
VIEW_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Expand", "Shape"})
_VIEW = np.array([op in VIEW_OPS for op in OP_VOCAB])
_BYTES = schema.EDGE_FEATURES.index("bytes")


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def _u(g) -> np.ndarray:
    return _np(g.u).reshape(-1).astype(np.float64)


def memory_terms(g) -> tuple[float, float, float]:
    """``(batch, parameters, activation bytes)`` of a PyG graph of raw features: the activation
    bytes are the sum of its edge tensors at its batch but those out of a view operator
    (:data:`VIEW_OPS`); a graph without edges given: ``num_edges x edge_bytes_mean``."""
    u = _u(g)
    b, p = float(u[_N.index("batch_size")]), float(u[_N.index("params")])
    if getattr(g, "edge_attr", None) is None or getattr(g, "op_type", None) is None:
        return b, p, float(u[_N.index("num_edges")] * u[_N.index("edge_bytes_mean")])
    src = _np(g.edge_index)[0]
    ops = _np(g.op_type).reshape(-1).astype(np.int64)
    keep = ~_VIEW[np.clip(ops[src], 0, len(_VIEW) - 1)]
    return b, p, float(_np(g.edge_attr)[keep, _BYTES].astype(np.float64).sum())


def estimated_bytes(g, memory: dict, batch: float | None = None) -> float:
    """The step's peak memory (bytes) at ``batch`` (default: the graph's own) by the fitted estimate."""
    b, p, act = memory_terms(g)
    per_sample = act / max(b, 1.0)
    return memory["fixed"] + memory["per_param"] * p + memory["per_act"] * per_sample * (b if batch is None else batch)


def largest_batch(g, memory: dict) -> float:
    """The largest batch (real-valued) whose estimated step fits ``memory["capacity"]`` bytes."""
    b, p, act = memory_terms(g)
    per_sample = memory["per_act"] * act / max(b, 1.0)
    room = memory["capacity"] - memory["fixed"] - memory["per_param"] * p
    return max(room, 0.0) / per_sample if per_sample > 0 else float("inf")


def ratio(g, step: dict) -> float:
    """``batch / min(top, largest batch that fits)`` of graph ``g`` under a card's step domain."""
    b = memory_terms(g)[0]
    return b / max(min(float(step["top"]), largest_batch(g, step["memory"])), 1e-9)


#: Headroom bands (largest batch that fits / ``top``) with a range each: how far a row's batch lies
#: from ``top`` depends on whether memory limited it.  On the RTX 3090 training card every row whose
#: estimate fits 1.5x ``top`` (the ladder's next batch, 768) was measured at 512 (83 rows); rows below
#: 1x spread over 0.1-1.9x (the estimate's error).
BANDS = (1.0, 1.5)
MIN_BAND_ROWS = 20  # a band with fewer rows takes the range of all rows


def headroom(g, step: dict) -> float:
    """``largest batch that fits / top`` of graph ``g``."""
    return largest_batch(g, step["memory"]) / float(step["top"])


def band_range(step: dict, h: float) -> list[float]:
    """The log2 ratio range of the band holding headroom ``h`` (the whole range without bands)."""
    for band in step.get("bands") or []:
        lo, hi = band["headroom"]
        if h >= lo and (hi is None or h < hi):
            return band["range"]
    return step["range"]


def _range(r: np.ndarray) -> list[float]:
    lo, hi = np.quantile(r, QUANTILES[0]), np.quantile(r, QUANTILES[1])
    pad = PAD * (hi - lo)
    return [float(lo - pad), float(hi + pad)]


def build_step(graphs: Sequence, memory: dict, top: int, source: str = "", bands: Sequence[float] = BANDS) -> dict:
    """A card's ``domain["step"]`` from its fitted and validation graphs and the fitted ``memory``
    estimate (``{"fixed", "per_param", "per_act", "capacity"}``, bytes): the robust range of the
    log2 ratio over all rows, and over the rows of each headroom band (:data:`BANDS`)."""
    probe = {"top": int(top), "memory": memory}
    r = np.log2(np.array([ratio(g, probe) for g in graphs]))
    h = np.array([headroom(g, probe) for g in graphs])
    step = dict(probe, version=STEP_VERSION, quantity="log2(batch / min(top, largest batch that fits))",
                range=_range(r), quantiles=list(QUANTILES), pad=PAD, rows=len(graphs), source=source, bands=[])
    edges = [0.0, *bands, None]
    for lo, hi in pairwise(edges):
        m = (h >= lo) & (h < hi if hi is not None else True)
        step["bands"].append({"headroom": [lo, hi], "rows": int(m.sum()),
                              "range": _range(r[m]) if m.sum() >= MIN_BAND_ROWS else step["range"]})
    step["inside"] = float(np.mean([in_range(step, 2 ** x, hh) for x, hh in zip(r, h)]))
    return step


def step_reasons(step: dict | None, graphs: Sequence) -> list[list[str]]:
    """Per graph, why its step lies outside a card's step domain (empty: inside, or no step domain)."""
    out: list[list[str]] = [[] for _ in graphs]
    if not step:
        return out
    top = int(step["top"])
    for i, g in enumerate(graphs):
        b = round(memory_terms(g)[0])
        fit = largest_batch(g, step["memory"])
        bench = min(top, fit)
        if in_range(step, b / max(bench, 1e-9), fit / top):
            continue
        lo, hi = band_range(step, fit / top)
        first, last = max(1, int(np.ceil(bench * 2 ** lo - 1e-6))), int(np.floor(bench * 2 ** hi + 1e-6))
        where = f"about {fit:,.0f}, the largest that fits" if fit < top else f"{top}, the largest measured"
        span = f"batch {first} only" if first == last else f"batches {first}-{last} only"
        out[i].append(f"the card's measurements took each model at one batch (for this model {where}), so it "
                      f"answers {span}")
    return out


def in_range(step: dict, r: float, h: float | None = None) -> bool:
    """Whether a ratio (not in log2) lies in the step domain (of the band of headroom ``h``)."""
    lo, hi = step["range"] if h is None else band_range(step, h)
    x = float(np.log2(r))
    return lo - 1e-9 <= x <= hi + 1e-9
