"""What a calibrated predictor card (``perfseer calibrate``) applies when it answers: the source
network followed by the fitted correction (:class:`CorrectedNet`), and the card's interval,
calibration domain and flags on each row (:class:`CalibratedNet`).  Loading only: the fitting is
:mod:`perfseer.fit.calibrate`.

The correction of the ``loglinear`` method is ``log y = log yhat_base + a + sum_j b_j x_j`` over the
variant's features (:class:`LogLinear`), or the geometric mean of several (:class:`BlendedCorrection`);
the ``distance`` interval grows with the distance from the calibration models in the source trunk's
embedding (:func:`row_halfwidths`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from perfseer.errors import PerfseerError
from perfseer.features.schema import GLOBAL_FEATURES
from perfseer.graph.liveness import FLOOR

DOMAIN_FEATURES = ("flops_total", "memory_access_total", "weight_total", "batch_size", "num_nodes")


_GIDX = [GLOBAL_FEATURES.index(f) for f in DOMAIN_FEATURES]


# Per-graph shares of the work a constant-folding runtime keeps (perfseer.graph.liveness), read by
# the correction and the K-centre selection next to the global features (not part of
# schema.GLOBAL_FEATURES, whose length every bundled card depends on).
LIVE_FEATURES = ("live_flops_fraction", "live_node_fraction", "output_independent")


# The live columns loglinear reads by default: none.  Each candidate (the log live FLOPs share, with
# the operator share, the output-independent indicator, with and without K-centre selection over
# it) lowered the mean Spearman on HELP's validation devices at K = 10 (docs/guide/calibrate.md).
LIVE_DESIGN: tuple[str, ...] = ()


OUTPUT_INDEPENDENT = ("the network's output does not depend on its input (perfseer.graph.liveness): a "
                      "constant-folding runtime may skip it, others run it at full cost")


# ``auto+cost``: the geometric mean of ``auto``'s correction and ``cost``'s fit (a
# :class:`BlendedCorrection`); ``auto`` weighs it from a CPU source to a CPU (:data:`BLEND_KINDS`).
BLEND_VARIANT = "auto+cost"


def _parts(net):
    """``(model, heads)`` of a SeerNet or SeerNet-Multi NeuralPredictor; heads in output order."""
    model = getattr(net, "model", None)
    name = getattr(model, "name", None)
    if name == "seernet":
        return model, [model.head]
    if name == "seernet-multi":
        return model, list(model.heads)
    raise PerfseerError(f"fine-tuning needs a SeerNet or SeerNet-Multi source, got {name or type(net).__name__}",
                        "use --method loglinear with this predictor, or a SeerNet source")


def has_embedding(net) -> bool:
    """Whether the source network has trunk embeddings: a SeerNet, a SeerNet-Multi, or a blend with
    SeerNet members (their embeddings side by side, :attr:`perfseer.models.blend.Blend.embed`)."""
    return hasattr(getattr(net, "model", None), "embed")


def embed(net, graphs: Sequence) -> torch.Tensor:
    """The trunk's output (what the head reads) for raw graphs: ``[N, H]``, no gradient
    (:meth:`perfseer.fit.trainer.NeuralPredictor.embeddings` of a SeerNet source; a blend's
    SeerNet members' side by side)."""
    if not has_embedding(net):
        raise PerfseerError(f"the source network ({getattr(getattr(net, 'model', None), 'name', type(net).__name__)}) "
                            "has no trunk embeddings", "use a SeerNet, SeerNet-Multi or blend-with-SeerNet source, "
                            "or a loglinear variant without the embedding (full, cols)")
    e = net.embeddings(list(graphs))
    return torch.zeros(0, 1) if e is None else torch.from_numpy(e).float()


def graph_liveness(graphs: Sequence) -> np.ndarray:
    """``[N, 3]`` per raw graph: live FLOPs share, live operator share and 1 when the network's
    result does not depend on the input (:mod:`perfseer.graph.liveness`, the ``live`` attribute
    :func:`perfseer.features.pyg.to_data` attaches); ``(1, 1, 0)`` for a graph without it (a
    stored dataset graph)."""
    out = np.tile(np.array([1.0, 1.0, 0.0]), (len(graphs), 1))
    for i, g in enumerate(graphs):
        lv = getattr(g, "live", None)
        if lv is not None:
            out[i] = np.asarray(lv, dtype=np.float64).reshape(-1)[:3]
    return out


def live_design(live: np.ndarray, features: Sequence[str] = LIVE_DESIGN) -> np.ndarray:
    """``[N, len(features)]`` columns of the named :data:`LIVE_FEATURES` of :func:`graph_liveness`
    rows: the log of a share (floored at :data:`perfseer.graph.liveness.FLOOR`), the
    ``output_independent`` indicator as 0 / 1."""

    live = np.asarray(live, dtype=np.float64).reshape(-1, 3)
    cols = [live[:, 2] if f == "output_independent" else np.log(np.maximum(live[:, LIVE_FEATURES.index(f)], FLOOR))
            for f in features]
    return np.stack(cols, axis=1) if cols else np.zeros((len(live), 0))


def global_design(graphs: Sequence, live_features: Sequence[str] = LIVE_DESIGN) -> np.ndarray:
    """``[N, 5 + L]`` log of :data:`DOMAIN_FEATURES` of raw graphs, then the log live shares
    ``live_features`` (:func:`live_design`; a constant column is dropped by every fit)."""
    u = np.stack([g.u.reshape(-1).double().numpy() for g in graphs]) if len(graphs) else np.zeros((0, len(GLOBAL_FEATURES)))
    return np.hstack([np.log(np.maximum(u[:, _GIDX], 1e-12)), live_design(graph_liveness(graphs), live_features)])


@dataclass
class LogLinear:
    """The fitted ``loglinear`` correction: features ``[log yhat_j - log yhat_base, (log yhat_base), g]``,
    standardised with ``mean`` / ``std`` (the K rows'), coefficients ``coef`` (intercept first)."""

    base: int
    columns: list[int]
    use_globals: list[int]
    mean: list[float]
    std: list[float]
    coef: list[float]
    lam: float
    slope: bool = False  # the base column's own log prediction is a feature (shrunk towards slope 1)
    variant: str = "full"
    embedding: bool = False  # the source trunk's embedding is a feature
    clip: list[float] | None = None  # the log correction's bounds (the K rows' fitted range, widened)
    live_features: list[str] = field(default_factory=list)  # the live shares after the 5 globals (cards before: none)
    source: bool = True  # the base column's log prediction is the starting point (False: variant cost)

    def features(self, logp: np.ndarray, glob: np.ndarray, emb: np.ndarray | None = None) -> np.ndarray:
        parts = [logp[:, self.columns] - logp[:, [self.base]]] if self.source else []
        if self.slope:
            parts.append(logp[:, [self.base]])
        parts.append(glob[:, self.use_globals])
        if self.embedding:
            if emb is None:
                raise PerfseerError("this correction reads the source's embeddings", "pass emb")
            parts.append(np.asarray(emb, dtype=np.float64))
        return (np.hstack(parts) - np.asarray(self.mean)) / np.asarray(self.std)

    def predict_log(self, logp: np.ndarray, glob: np.ndarray, emb: np.ndarray | None = None) -> np.ndarray:
        c = np.asarray(self.coef)
        delta = c[0] + self.features(logp, glob, emb) @ c[1:]
        if self.clip is not None:  # never extrapolate the correction far beyond what the K rows showed
            delta = np.clip(delta, self.clip[0], self.clip[1])
        return logp[:, self.base] + delta if self.source else delta

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BlendedCorrection:
    """Several fitted corrections whose log predictions are averaged: the geometric mean of their
    predictions (``auto+cost``: the source-reading correction ``auto`` chose, first, and the rows'
    own ``cost`` fit).  Reads like a :class:`LogLinear` where :class:`CorrectedNet` reads one."""

    parts: list[LogLinear]
    variant: str = BLEND_VARIANT

    @property
    def base(self) -> int:
        return next((p.base for p in self.parts if p.source), self.parts[0].base)

    @property
    def embedding(self) -> bool:
        return any(p.embedding for p in self.parts)

    @property
    def live_features(self) -> list[str]:
        return self.parts[0].live_features

    @live_features.setter
    def live_features(self, names: Sequence[str]) -> None:
        for p in self.parts:
            p.live_features = list(names)

    def predict_log(self, logp: np.ndarray, glob: np.ndarray, emb: np.ndarray | None = None) -> np.ndarray:
        return np.mean([p.predict_log(logp, glob, emb if p.embedding else None) for p in self.parts], axis=0)

    def to_dict(self) -> dict:
        return {"variant": self.variant, "parts": [p.to_dict() for p in self.parts]}


def correction_from_dict(d: dict) -> LogLinear | BlendedCorrection:
    """The correction a calibrated card stores (:meth:`LogLinear.to_dict` / :meth:`BlendedCorrection.to_dict`)."""
    if "parts" in d:
        return BlendedCorrection([LogLinear(**p) for p in d["parts"]], d.get("variant", BLEND_VARIANT))
    return LogLinear(**d)


def nearest_distance(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per row of ``x``, the Euclidean distance to the nearest row of ``ref``."""
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    d2 = (x ** 2).sum(1)[:, None] - 2 * x @ ref.T + (ref ** 2).sum(1)[None, :]
    return np.sqrt(np.maximum(d2.min(1), 0.0))


def width_growth(d: np.ndarray, d_ref: float, beta: float, form: str = "linear") -> np.ndarray:
    """The interval's growth ``w`` at distance ``d`` (``d_ref``: the calibration rows' mean
    leave-one-model-out distance): ``1 + beta d / d_ref`` (``linear``) or
    ``sqrt(1 + beta (d / d_ref)^2)`` (``quadratic``); 1 everywhere when ``beta`` is 0."""
    d = np.asarray(d, dtype=np.float64)
    if not beta or not d_ref > 0:
        return np.ones_like(d)
    u = d / d_ref
    return 1 + beta * u if form == "linear" else np.sqrt(1 + beta * u ** 2)


def row_halfwidths(interval: dict, coords: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per new row, the ``distance`` rule's log half-width and whether the row is farther from the
    calibration set than any calibration model is from the others; ``(None, None)`` when the
    interval has one half-width for every row (other rules, or no ``coords``)."""
    dist = interval.get("distance")
    if not dist or coords is None:
        return None, None
    d = nearest_distance(np.asarray(coords, dtype=np.float64), np.asarray(dist["coords"], dtype=np.float64))
    q = dist["scale"] * dist["rms_weighted"] * width_growth(d, dist["d_ref"], dist["beta"], dist["form"])
    return q, d > dist["far"] + 1e-9


class CorrectedNet:
    """The source network followed by the ``loglinear`` correction: graphs -> ``[N, 1]``."""

    def __init__(self, source_net, columns: list[int], correction: LogLinear | BlendedCorrection):
        self.source_net, self.columns, self.correction = source_net, columns, correction

    def predict(self, graphs: Sequence) -> np.ndarray:
        return self.predict_with_embeddings(graphs)[0]

    def predict_with_embeddings(self, graphs: Sequence) -> tuple[np.ndarray, np.ndarray | None]:
        """The corrected predictions and the source trunk's embeddings ``[N, D]`` (float64; ``None``
        for a source without them), from one pass through the source network."""
        graphs = list(graphs)
        if not graphs:
            return np.zeros((0, 1)), None
        both = getattr(self.source_net, "predict_with_embeddings", None)
        out, e = both(graphs) if both is not None else (self.source_net.predict(graphs), None)
        logp = np.log(np.maximum(np.asarray(out)[:, self.columns], 1e-12))
        e = None if e is None else np.asarray(e, dtype=np.float64)
        if self.correction.embedding and e is None:
            raise PerfseerError("this calibrated card's correction reads the source's trunk embeddings, and the "
                                "source network has none", "calibrate again from the source it was made with")
        glob = global_design(graphs, tuple(self.correction.live_features))
        emb_feature = e if self.correction.embedding else None
        return np.exp(self.correction.predict_log(logp, glob, emb_feature)).reshape(-1, 1), e


def domain_check(domain: dict, graphs: Sequence) -> list[list[str]]:
    """Per graph, the reasons it lies outside the calibration domain (empty: inside)."""
    glob = global_design(graphs, ())
    lo, hi = np.asarray(domain["log_low"]), np.asarray(domain["log_high"])
    out = []
    for row in glob:
        reasons = []
        for j, name in enumerate(domain["features"]):
            if row[j] < lo[j] - 1e-9 or row[j] > hi[j] + 1e-9:
                side = "below" if row[j] < lo[j] else "above"
                a, b = domain["min"][j], domain["max"][j]
                reasons.append(f"{name} {math.exp(row[j]):.4g} is {side} the calibration rows' {a:.4g}-{b:.4g} "
                               f"(+{int(domain['margin'] * 100)} % of the log range)" if f"{a:.4g}" != f"{b:.4g}"
                               else f"{name} {math.exp(row[j]):.4g} is {side} {a:.4g}, every calibration row's")
        out.append(reasons)
    return out


class CalibratedNet:
    """A calibrated card's network: predictions ``[N, 1]``, and :meth:`annotate` adds to each
    prediction row the card's ``interval``, ``in_domain``, ``domain_reasons`` and ``flags``."""

    reads_liveness = True  # annotate flags networks whose output does not depend on the input

    def __init__(self, card: dict, net):
        self.card, self.net = card, net
        self.model = getattr(net, "model", None) or getattr(getattr(net, "source_net", None), "model", None)

    def predict(self, graphs: Sequence) -> np.ndarray:
        return self.net.predict(list(graphs))

    def predict_with_embeddings(self, graphs: Sequence) -> tuple[np.ndarray, np.ndarray | None]:
        """Predictions and the source trunk's embeddings (float64, for :meth:`annotate`) from one
        pass through the source network; ``None`` for a source without a trunk."""
        graphs = list(graphs)
        both = getattr(self.net, "predict_with_embeddings", None)
        if both is None:
            return self.predict(graphs), None
        values, emb = both(graphs)  # emb is None for a source without embeddings
        return values, None if emb is None else np.asarray(emb, dtype=np.float64)

    def embeddings(self, graphs: Sequence) -> np.ndarray | None:
        """The source trunk's embeddings of ``graphs`` (what the ``distance`` interval measures in)."""
        source = getattr(self.net, "source_net", self.net)
        return embed(source, list(graphs)).double().numpy() if has_embedding(source) else None

    def annotate(self, rows: list[dict], graphs: Sequence, embeddings: np.ndarray | None = None) -> None:
        """``embeddings``: the source's embeddings of ``graphs`` when the prediction already has them
        (:meth:`predict_with_embeddings`); computed here otherwise."""
        cal = self.card["calibration"]
        factor = float(cal["interval"]["factor"])
        reasons = domain_check(cal["domain"], graphs)
        folded = graph_liveness(graphs)[:, 2] > 0 if len(graphs) else np.zeros(0, dtype=bool)
        q_rows, far = (None, None)
        if cal["interval"].get("distance") and len(graphs):
            q_rows, far = row_halfwidths(cal["interval"],
                                         self.embeddings(graphs) if embeddings is None else embeddings)
        k = len(cal["rows"])
        variant = (cal.get("extra") or {}).get("variant") if cal["method"] == "loglinear" else None
        how = f"{cal['method']} ({variant})" if variant else cal["method"]
        for i, (row, why) in enumerate(zip(rows, reasons)):
            # the source network's own checks (perfseer.trust: its domain, physical bounds) stay; the
            # interval is the calibration's, which is the only one measured on the new device
            v = row["value"]
            f = math.exp(float(q_rows[i])) if q_rows is not None else factor
            if folded[i] and not cal["domain"].get("output_independent_rows"):
                why = why + [OUTPUT_INDEPENDENT + "; no calibration model was such a network"]
            if far is not None and far[i]:
                why = why + ["farther from the calibration models (in the source's embedding) than any of them is "
                             "from the others: the interval widens with the distance, and may still be optimistic"]
            row["interval"] = [v / f, v * f]
            row["interval_level"] = cal["interval"]["level"]
            row["in_domain"] = bool(row.get("in_domain", True)) and not why
            row["domain_reasons"] = list(row.get("domain_reasons") or []) + why
            row["flags"] = ([f for f in row.get("flags") or [] if not str(f).startswith("no interval")]
                            + [f"calibrated:{cal['method']}:k={k}"] + (["outside-calibration-domain"] if why else [])
                            + (["far-from-calibration-set"] if far is not None and far[i] else [])
                            + (["output-independent-of-input"] if folded[i] else [])
                            + (["cross-kind-calibration"] if cal.get("warnings") else []))
            row["basis"] = f"calibrated from {cal['source']['name']} by {how} on {k} rows"
            row["basis_kind"], row["basis_seen"] = "calibrated", True


def wrap_loaded(card: dict, net):
    """The network of a loaded calibrated card (``load_predictor`` calls this)."""
    cal = card["calibration"]
    if cal.get("correction") is not None:
        net = CorrectedNet(net, list(cal["columns"]), correction_from_dict(cal["correction"]))
    return CalibratedNet(card, net)
