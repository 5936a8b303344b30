"""A predictor for a new device from K measurements: calibration of a trained source predictor.

A user with a device nobody benchmarked can afford K = 5-50 measurements.  :func:`calibrate` turns
them, with a *source* predictor trained on another device, into a predictor card for the new one.
Four methods, compared on the same splits by ``benchmarks/calibration.py`` (``docs/calibration.md``):

``loglinear``
    a ridge correction of the source prediction in log space,
    ``log y = log yhat_base + a + sum_j b_j x_j``, where ``yhat_base`` is the source column (one per
    source device for SeerNet-Multi) whose ratio to the measurements varies least and ``x`` the
    variant's features (:data:`VARIANTS`: the other columns' log ratios to the base one, the
    standardised log global features, the base column itself, the source trunk's embedding).
    The ridge penalty shrinks towards "the base device times a constant"; its strength is chosen
    by leave-one-model-out error on the K rows.  The default variant ``auto`` keeps the variant of
    lowest nested leave-one-model-out error; its interval reads residuals with that choice nested
    in the leave-one-model-out loop too (:func:`auto_residuals`).  The fitted correction is clipped to the range it
    takes on the K rows (widened by :data:`CLIP_MARGIN`).  No gradient step.  Variant ``cost`` has
    no source term (``log y = a + b log FLOPs + c log memory access``, not clipped); ``auto`` is
    ``cost`` when the source's and the new device's kinds are known and differ
    (:data:`CROSS_KIND_VARIANT`).
``head``
    fine-tune the 2-layer head of SeerNet (the trunk frozen) on the K rows, starting from the
    base column's head, with an L2 pull towards the start (L2-SP).
``full``
    fine-tune every weight the same way (lower learning rate).
``meta``
    HELP's idea (Lee et al., NeurIPS 2021) in its first-order form: a head initialisation
    meta-learned by Reptile over the source devices (each a task of K rows, on the source trunk's
    frozen embeddings, see :func:`meta_init`), then adapted to the K rows like ``head``.

**Interval.**  Each method's out-of-fold residuals ``r_i = log y_i - log yhat_{-i}`` on the K
rows, whole models left out (for ``loglinear`` *nested*: the base column and ridge strength -- and
for ``auto`` the variant -- are chosen again without model ``i``; ``head`` / ``meta`` up to 10
model folds; ``full`` 5),
give the half-width ``q`` of a log-space interval ``[yhat / e^q, yhat e^q]`` at level
``1 - alpha`` (default 90 %), by one of :data:`INTERVAL_RULES`:

- ``distance`` (default): per predicted row, ``q(x) = c(K) s_w (1 + beta d(x) / d_ref)``, ``d(x)``
  the distance in the source trunk's embedding from the nearest calibration model, ``d_ref`` the
  calibration rows' mean leave-one-model-out distance and ``s_w`` the RMS of the residuals each
  divided by its own growth (:func:`row_scales`); ``beta`` and ``c(K)`` (:data:`DISTANCE_RULE`,
  :data:`DISTANCE_TABLE`) learned on validation and source devices.  A model farther from the
  calibration set than any calibration model is from the others is flagged.  Needs a SeerNet
  source (else ``scaled``);
- ``scaled``: ``q = c(K) s``, ``s`` the RMS residual and ``c(K)`` from
  :data:`SCALE_TABLE`, learned by simulating K-shot calibration on validation and source devices
  (never a test device), per way of choosing the K models (K-centre or not);
- ``conformal`` (jackknife form): the ``ceil((n + 1)(1 - alpha))``-th smallest ``|r_i|`` of the
  ``n`` rows, which exists only for ``n >= 9`` at 90 % (Student-t below);
- ``student-t``: ``t_{n-1, 1-alpha/2} s sqrt(1 + 1/n)``.

The calibrated card stores ``q``, the residuals and which rule set it (``calibration.interval``);
prediction rows carry ``interval`` and ``interval_level``.

**Domain.**  A model whose log global features (FLOPs, memory access, weights, batch, nodes) fall
outside the calibration rows' range, widened by a quarter of that range, is flagged
``in_domain = False`` with a reason per feature.

Example::

    src = load_predictor("rtx3090-amp-nchw-pt240.infer")
    cal = calibrate(src, graphs, y, Target("latency_ms", "rtx4090/amp-nchw-pt291", "infer"),
                    rows=table, config=CalibrationConfig(method="loglinear"))
    cal.save("preds/")          # a predictor card like any other, with a `calibration` section
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from perfseer.errors import PerfseerError
from perfseer.features.schema import GLOBAL_FEATURES

METHODS = ("loglinear", "head", "full", "meta")
# Chosen on the validation devices of benchmarks/calibration.py (NAS-Bench-201: HELP's meta-validation
# devices Titan X and Gold 6240; timm: RTX 3090 -> RTX 5090), never on the test devices.
DEFAULT_METHOD = "loglinear"
MIN_MODELS = 3  # fewer distinct models leave nothing to leave out (and no interval)
DOMAIN_FEATURES = ("flops_total", "memory_access_total", "weight_total", "batch_size", "num_nodes")
_GIDX = [GLOBAL_FEATURES.index(f) for f in DOMAIN_FEATURES]
# Per-graph shares of the work a constant-folding runtime keeps (perfseer.graph.liveness), read by
# the correction and the K-centre selection next to the global features (not part of
# schema.GLOBAL_FEATURES, whose length every bundled card depends on).
LIVE_FEATURES = ("live_flops_fraction", "live_node_fraction", "output_independent")
# The live columns loglinear reads by default: none.  Each candidate (the log live FLOPs share, with
# the operator share, the output-independent indicator, with and without K-centre selection over
# it) lowered the mean Spearman on HELP's validation devices at K = 10 (docs/calibration.md).
LIVE_DESIGN: tuple[str, ...] = ()
LIVE_RIDGE_WEIGHT = 1.0  # the live columns' ridge penalty relative to the other standardised columns
OUTPUT_INDEPENDENT = ("the network's output does not depend on its input (perfseer.graph.liveness): a "
                      "constant-folding runtime may skip it, others run it at full cost")
DOMAIN_MARGIN = 0.25  # share of the calibration rows' log range added on each side

# The correction's feature sets (``CalibrationConfig.variant``): which inputs besides the base
# device's log prediction enter the ridge regression.  ``diffs``: the other source columns' log
# ratios to the base column; ``slope``: the base column itself (its coefficient is the slope minus
# one, so the penalty shrinks the slope towards 1); ``globals``: the five log global features;
# ``embedding``: the source trunk's embedding of the graph (what its heads read; SeerNet sources).
# ``cost``: no source term at all -- ``log y = a + b log FLOPs + c log memory access`` on the K rows
# (what a roofline reads); the default across device kinds (:data:`CROSS_KIND_VARIANT`).
VARIANTS = {"full": ("diffs", "globals"), "slope": ("diffs", "slope", "globals"), "cols": ("diffs", "slope"),
            "one": ("slope",), "emb": ("diffs", "globals", "embedding"), "cost": ("cost",)}
COST_GLOBALS = (0, 1)  # the cost variant's columns of global_design: log FLOPs, log memory access
AUTO_VARIANTS = ("full", "cols", "emb")  # what ``auto`` chooses among (emb only for a SeerNet source)
# Chosen on the validation devices (docs/calibration.md): no fixed feature set was best on both
# NAS-Bench-201 and timm; ``auto`` -- per calibration, the variant of lowest nested
# leave-one-model-out error on the K rows themselves -- was at or near the best on both.
DEFAULT_VARIANT = "auto"
# ``auto+cost``: the geometric mean of ``auto``'s correction and ``cost``'s fit (a
# :class:`BlendedCorrection`); ``auto`` weighs it from a CPU source to a CPU (:data:`BLEND_KINDS`).
BLEND_VARIANT = "auto+cost"
CLIP_MARGIN = 0.25  # the correction's clip: the K rows' fitted range widened by this share on each side
INTERVAL_RULES = ("distance", "scaled", "conformal", "student-t")
DEFAULT_INTERVAL = "distance"


@dataclass
class CalibrationConfig:
    """How to calibrate.  Each default says where it comes from."""

    method: str = DEFAULT_METHOD  # one of METHODS
    coverage: float = 0.9  # level of the interval (the 90 %)
    # ridge strengths tried by loglinear, chosen by leave-one-model-out error on the K rows
    ridge: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0, 1e3, 1e6)  # 1e6: in effect the base device times a constant
    variant: str = DEFAULT_VARIANT  # loglinear's feature set (VARIANTS)
    interval: str = DEFAULT_INTERVAL  # how the interval's half-width is set (INTERVAL_RULES)
    # how the K models were chosen (the scaled interval's table): auto = spanning when every model is
    # one of the shipped calibration set's (datasets/calibration), else random
    selection: str = "auto"
    steps: int = 200  # Adam steps (full batch of the K rows) of head and meta adaptation
    steps_full: int = 60  # Adam steps of full fine-tuning (each is a forward/backward of all K graphs)
    lr_head: float = 3e-3  # head and meta adaptation learning rate
    lr_full: float = 3e-4  # full fine-tuning learning rate (the trunk moves 10x slower)
    l2sp: float = 1e-3  # pull towards the starting weights, sum of squares (L2-SP, Li et al. 2018)
    cv_folds: int = 5  # full: model folds for the residuals (a refit of the whole network per fold)
    head_folds: int = 10  # head / meta: model folds for the residuals (leave-one-model-out up to 10 models)
    seed: int = 0
    live_features: tuple[str, ...] = LIVE_DESIGN  # loglinear: live columns after the globals (LIVE_FEATURES)

    def __post_init__(self):
        self.ridge = tuple(float(r) for r in self.ridge)
        self.live_features = tuple(self.live_features)
        if bad := [f for f in self.live_features if f not in LIVE_FEATURES]:
            raise PerfseerError(f"unknown live feature {', '.join(bad)}", f"choose among {', '.join(LIVE_FEATURES)}")
        if self.method not in METHODS:
            raise PerfseerError(f"unknown calibration method {self.method!r}", f"choose one of {', '.join(METHODS)}")
        if not 0.5 <= self.coverage < 1:
            raise PerfseerError(f"coverage must be in [0.5, 1), got {self.coverage}", "pass e.g. 0.9")
        if self.variant not in VARIANTS and self.variant not in ("auto", BLEND_VARIANT):
            raise PerfseerError(f"unknown loglinear variant {self.variant!r}",
                                f"choose auto, {BLEND_VARIANT} or one of {', '.join(VARIANTS)}")
        if self.interval not in INTERVAL_RULES:
            raise PerfseerError(f"unknown interval rule {self.interval!r}", f"choose one of {', '.join(INTERVAL_RULES)}")
        if self.selection not in SELECTIONS:
            raise PerfseerError(f"unknown selection {self.selection!r}", f"choose one of {', '.join(SELECTIONS)}")
        if self.steps < 1 or self.cv_folds < 2:
            raise PerfseerError("steps must be >= 1 and cv_folds >= 2", "use the defaults")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ridge"] = list(self.ridge)
        d["live_features"] = list(self.live_features)
        return d


# -- the source network's parts ---------------------------------------------------------------------

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
    (:meth:`perfseer.training.trainer.NeuralPredictor.embeddings` of a SeerNet source; a blend's
    SeerNet members' side by side)."""
    if not has_embedding(net):
        raise PerfseerError(f"the source network ({getattr(getattr(net, 'model', None), 'name', type(net).__name__)}) "
                            "has no trunk embeddings", "use a SeerNet, SeerNet-Multi or blend-with-SeerNet source, "
                            "or a loglinear variant without the embedding (full, cols)")
    e = net.embeddings(list(graphs))
    return torch.zeros(0, 1) if e is None else torch.from_numpy(e).float()


def heads_output(net, emb: torch.Tensor) -> np.ndarray:
    """The source's predictions ``[N, T]`` in the targets' units from trunk embeddings ``[N, H]``."""
    _, heads = _parts(net)
    with torch.no_grad():
        z = torch.cat([h(emb) for h in heads], dim=1).double().numpy()
    return net.target_scaler.inverse_transform(z)


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
    from perfseer.graph.liveness import FLOOR

    live = np.asarray(live, dtype=np.float64).reshape(-1, 3)
    cols = [live[:, 2] if f == "output_independent" else np.log(np.maximum(live[:, LIVE_FEATURES.index(f)], FLOOR))
            for f in features]
    return np.stack(cols, axis=1) if cols else np.zeros((len(live), 0))


def global_design(graphs: Sequence, live_features: Sequence[str] = LIVE_DESIGN) -> np.ndarray:
    """``[N, 5 + L]`` log of :data:`DOMAIN_FEATURES` of raw graphs, then the log live shares
    ``live_features`` (:func:`live_design`; a constant column is dropped by every fit)."""
    u = np.stack([g.u.reshape(-1).double().numpy() for g in graphs]) if len(graphs) else np.zeros((0, len(GLOBAL_FEATURES)))
    return np.hstack([np.log(np.maximum(u[:, _GIDX], 1e-12)), live_design(graph_liveness(graphs), live_features)])


# -- loglinear --------------------------------------------------------------------------------------

def _ridge_fit(X: np.ndarray, r: np.ndarray, lam: float) -> np.ndarray:
    """Coefficients ``[1 + F]`` (intercept unpenalised) of ridge regression of ``r`` on ``X``."""
    A = np.hstack([np.ones((len(X), 1)), X])
    D = np.eye(A.shape[1]) * lam
    D[0, 0] = 0.0
    return np.linalg.solve(A.T @ A + D + 1e-9 * np.eye(A.shape[1]), A.T @ r)




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


def keeps_blend(res_variant: np.ndarray, res_cost: np.ndarray) -> bool:
    """``auto``'s rule between CPUs (:data:`BLEND_KINDS`): keep :data:`BLEND_VARIANT` when the RMS of
    the averaged nested residuals (the blend's) is below that of the chosen variant's own."""
    return residual_scale((np.asarray(res_variant) + np.asarray(res_cost)) / 2) < residual_scale(res_variant)


def base_column(logp: np.ndarray, logy: np.ndarray) -> int:
    """The source column whose log ratio to the measurements varies least."""
    return int(np.argmin([np.var(logy - logp[:, j]) for j in range(logp.shape[1])]))


def fit_correction(logp: np.ndarray, glob: np.ndarray, logy: np.ndarray, groups: np.ndarray,
                   ridge: Sequence[float], variant: str = DEFAULT_VARIANT, lam: float | None = None,
                   emb: np.ndarray | None = None) -> LogLinear:
    """Fit the ``loglinear`` correction of feature set ``variant`` (:data:`VARIANTS`); ``lam`` None:
    the ridge strength is chosen among ``ridge`` by leave-one-model-out error.  The fitted log
    correction (prediction minus the base column) is clipped, on any later model, to the range it
    takes on the K rows widened by :data:`CLIP_MARGIN` of that range on each side."""
    return _fit_scored(logp, glob, logy, groups, ridge, variant, lam, emb)[0]


def _fit_scored(logp: np.ndarray, glob: np.ndarray, logy: np.ndarray, groups: np.ndarray,
                ridge: Sequence[float], variant: str = DEFAULT_VARIANT, lam: float | None = None,
                emb: np.ndarray | None = None) -> tuple[LogLinear, float]:
    """:func:`fit_correction` and its leave-one-model-out mean squared error on the rows it was fitted
    on, at the ridge strength it chose (closed form; the error that chose the strength)."""
    if variant not in VARIANTS:
        raise PerfseerError(f"unknown loglinear variant {variant!r}", f"choose one of {', '.join(VARIANTS)}")
    use = VARIANTS[variant]
    if "embedding" in use and emb is None:
        raise PerfseerError(f"loglinear variant {variant} reads the source trunk's embeddings",
                            "use a SeerNet source, or another variant")
    base = base_column(logp, logy)
    columns = [j for j in range(logp.shape[1]) if j != base] if "diffs" in use else []
    cost = "cost" in use  # no source term: a fit of the K rows on their FLOPs and memory access
    # a constant column carries nothing; the live columns after the five globals (global_design) are
    # read by every variant: whether a device skips input-independent work is not in the source's columns
    n_glob = len(DOMAIN_FEATURES)
    keep = [i for i in range(glob.shape[1]) if np.ptp(glob[:, i]) > 1e-9
            and ("globals" in use or i >= n_glob or (cost and i in COST_GLOBALS))]
    slope = "slope" in use
    parts = ([logp[:, columns] - logp[:, [base]]] + ([logp[:, [base]]] if slope else []) + [glob[:, keep]]
             + ([np.asarray(emb, dtype=np.float64)] if "embedding" in use else []))
    X = np.hstack(parts)
    mean, std = X.mean(0), X.std(0)
    std[~(std > 1e-9)] = 1.0
    n_live = sum(1 for i in keep if i >= n_glob)
    if n_live and LIVE_RIDGE_WEIGHT != 1.0:  # the live columns' share of the ridge penalty: scale them up
        std[X.shape[1] - (emb.shape[1] if "embedding" in use else 0) - n_live:][:n_live] *= math.sqrt(LIVE_RIDGE_WEIGHT)
    Xs = (X - mean) / std
    r = logy - logp[:, base] if not cost else logy
    if lam is None:
        errs = [np.mean(_loo_ridge(Xs, r, groups, l) ** 2) for l in ridge]
        lam = float(ridge[int(np.argmin(errs))])
        loo_mse = float(np.min(errs))
    else:
        loo_mse = float(np.mean(_loo_ridge(Xs, r, groups, lam) ** 2))
    coef = _ridge_fit(Xs, r, lam)
    fitted = coef[0] + Xs @ coef[1:]
    pad = CLIP_MARGIN * float(np.ptp(fitted))
    # cost: the fit is the whole prediction, log-linear in the model's own cost; it extrapolates with it
    clip = None if cost else [float(fitted.min() - pad), float(fitted.max() + pad)]
    return LogLinear(base, columns, keep, mean.tolist(), std.tolist(), coef.tolist(), float(lam), slope, variant,
                     "embedding" in use, clip, source=not cost), loo_mse


def fit_loglinear(logp: np.ndarray, glob: np.ndarray, logy: np.ndarray, groups: np.ndarray,
                  ridge: Sequence[float], lam: float | None = None) -> LogLinear:
    """The ``full`` correction (:func:`fit_correction`)."""
    return fit_correction(logp, glob, logy, groups, ridge, "full", lam)


def nested_residuals(logp: np.ndarray, glob: np.ndarray, logy: np.ndarray, groups: np.ndarray,
                     variant: str, ridge: Sequence[float], emb: np.ndarray | None = None,
                     inner: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Leave-one-model-out residuals ``log y_i - log yhat_{-i}`` where everything the fit chooses
    (the base column, the ridge strength by its own inner leave-one-model-out) is chosen again
    without model ``i``: residuals as honest as a new model's, which the interval needs (choosing
    the ridge strength on the same residuals makes them optimistic).  ``inner``: also return, per
    row, the inner leave-one-model-out mean squared error of the fit that predicted it (on the
    other models' rows, at its chosen strength) -- what :func:`auto_residuals` compares."""
    res, err = np.empty(len(logy)), np.empty(len(logy))
    for g in np.unique(groups):
        out = groups == g
        e_in, e_out = (emb[~out], emb[out]) if emb is not None else (None, None)
        fit, err[out] = _fit_scored(logp[~out], glob[~out], logy[~out], groups[~out], ridge, variant, emb=e_in)
        res[out] = logy[out] - fit.predict_log(logp[out], glob[out], e_out)
    return (res, err) if inner else res


def auto_residuals(nested: dict[str, np.ndarray], inner: dict[str, np.ndarray]) -> tuple[np.ndarray, list[str]]:
    """The residuals of variant ``auto`` with its choice nested in the leave-one-model-out loop.

    ``auto`` keeps the variant of smallest nested RMS on all K rows; taking the interval's ``s``
    from that variant's residuals is optimistic (the smallest of several noisy RMS values,
    docs/calibration.md).  Here each left-out model ``i`` gets the residual of the variant that
    *its* fold would have chosen without it: the one of lowest inner leave-one-model-out error on
    the other K - 1 models' rows (``inner[v]``, from :func:`nested_residuals` with ``inner=True``;
    the closed-form error that also chose that fold's ridge strength).  ``nested`` and ``inner``:
    per candidate variant, per row.  Returns the residuals and, per row, the variant used."""
    names = list(nested)
    E = np.stack([np.asarray(inner[v], dtype=np.float64) for v in names])
    pick = np.argmin(E, axis=0)
    R = np.stack([np.asarray(nested[v], dtype=np.float64) for v in names])
    return R[pick, np.arange(R.shape[1])], [names[j] for j in pick]


def _loo_ridge(Xs, r, groups, lam) -> np.ndarray:
    """Leave-one-model-out residuals of ridge regression, in closed form: with the hat matrix
    ``H`` of the fit on all rows and its residuals ``e``, a left-out group's residuals are
    ``(I - H_gg)^-1 e_g`` (``e_i / (1 - h_ii)`` for a one-row group) -- one solve per strength
    instead of one refit per model."""
    A = np.hstack([np.ones((len(Xs), 1)), Xs])
    D = np.eye(A.shape[1]) * lam
    D[0, 0] = 0.0
    H = A @ np.linalg.solve(A.T @ A + D + 1e-9 * np.eye(A.shape[1]), A.T)
    e = r - H @ r
    _, first, counts = np.unique(groups, return_index=True, return_counts=True)
    if (counts == 1).all():
        return e / np.maximum(1 - np.diag(H), 1e-12)
    res = np.empty(len(r))
    for g in np.unique(groups):
        out = np.flatnonzero(groups == g)
        res[out] = np.linalg.lstsq(np.eye(len(out)) - H[np.ix_(out, out)], e[out], rcond=None)[0]
    return res


# -- fine-tuning ------------------------------------------------------------------------------------

def _adapt(params: list[torch.Tensor], loss_fn, steps: int, lr: float, l2sp: float) -> None:
    start = [p.detach().clone() for p in params]
    opt = torch.optim.Adam(params, lr=lr)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        if l2sp:
            loss = loss + l2sp * sum(((p - s) ** 2).sum() for p, s in zip(params, start))
        loss.backward()
        opt.step()


def adapt_head(head: torch.nn.Module, emb: torch.Tensor, z: torch.Tensor, steps: int, lr: float, l2sp: float,
               seed: int = 0) -> torch.nn.Module:
    """A copy of ``head`` fine-tuned on embeddings ``emb`` [K, H] to standardised targets ``z`` [K]."""
    torch.manual_seed(seed)
    h = copy.deepcopy(head)
    h.train()
    params = list(h.parameters())
    _adapt(params, lambda: ((h(emb).reshape(-1) - z) ** 2).mean(), steps, lr, l2sp)
    h.eval()
    return h


def meta_init(head: torch.nn.Module, tasks: Sequence[tuple[torch.Tensor, np.ndarray]], k: int = 10,
              iterations: int = 1000, inner_steps: int = 20, inner_lr: float = 3e-3, outer_lr: float = 0.1,
              seed: int = 0) -> torch.nn.Module:
    """A head initialisation meta-learned over source devices by Reptile (Nichol et al. 2018).

    Each task is a source device: ``(emb [N, H], log_y [N])``.  An iteration draws one task and ``k``
    of its rows, standardises their log targets by those ``k`` rows (as adaptation does), takes
    ``inner_steps`` Adam steps from the current initialisation and moves the initialisation
    ``outer_lr`` of the way towards the adapted weights.  HELP meta-learns with MAML and a
    hardware embedding; this is the first-order form on the frozen source trunk.
    """
    if not tasks:
        raise PerfseerError("meta-learning needs at least one source device", "pass source tasks")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    init = copy.deepcopy(head)
    init.train()
    for _ in range(iterations):
        emb, logy = tasks[int(rng.integers(len(tasks)))]
        idx = rng.choice(len(logy), size=min(k, len(logy)), replace=False)
        m, s = _kscale(logy[idx])
        z = torch.as_tensor((logy[idx] - m) / s, dtype=torch.float32)
        h = copy.deepcopy(init)
        _adapt(list(h.parameters()), lambda: ((h(emb[idx]).reshape(-1) - z) ** 2).mean(), inner_steps, inner_lr, 0.0)
        with torch.no_grad():
            for p, q in zip(init.parameters(), h.parameters()):
                p += outer_lr * (q - p)
    init.eval()
    return init


def _kscale(logy: np.ndarray) -> tuple[float, float]:
    """Mean and spread of K log targets (the spread floored: K equal values must not divide by 0)."""
    return float(np.mean(logy)), float(max(np.std(logy), 0.05))


# -- the interval -----------------------------------------------------------------------------------

# The ``scaled`` rule's c(K): the half-width is c(K) times the RMS of the nested
# leave-one-model-out residuals of the K calibration models, per way the K models were chosen
# (``spanning``: K-centre, as the shipped calibration set; ``random``: any other choice) and level.
# Learned by simulating K-shot calibration on the validation and source devices only, never a test
# device (docs/calibration.md).  Interpolated in log K, held constant outside the table.
SCALE_TABLE: dict[str, dict[float, dict[int, float]]] = {
    # python benchmarks/calibration_intervals.py learn rows_nb201.npz rows_timm3090.npz rows_timm4090.npz
    #   (its scaled_table: auto with the variant choice nested, train-only timm sources; 13 NAS-Bench-201
    #   and 2 x 3 timm simulated calibration targets, each calibration weighing the same;
    #   benchmarks/data/calibration/interval_learn_nested.json)
    "random": {0.9: {10: 2.0197, 20: 1.7162, 50: 1.6323}},
    "spanning": {0.9: {10: 1.3193, 20: 1.3767, 50: 1.4187}},
}
SELECTIONS = ("auto", "spanning", "random")

# The ``distance`` rule: the half-width grows linearly with the distance from the calibration set in
# the source trunk's embedding, ``beta`` per mean leave-one-model-out distance of the K rows; one c(K)
# for every way of choosing the K models.  Chosen and learned like SCALE_TABLE, on validation and
# source devices only: python benchmarks/calibration_intervals.py learn rows_nb201.npz
# rows_timm3090.npz rows_timm4090.npz (docs/calibration.md; auto's residuals with the variant choice
# nested; each calibration weighs the same in c(K); benchmarks/data/calibration/interval_learn_nested.json).
DISTANCE_RULE = {"space": "emb", "beta": 1.0, "form": "linear"}
# c(K) learned on the validation and source devices with 20 random and 20 K-centre calibrations per
# (device, K), the NAS-Bench-201 source trained on 2,000 architectures
# (benchmarks/data/calibration/interval_learn_20_src2000.json.gz; with the 600-architecture source,
# interval_learn_20.json.gz: 1.9019 / 1.7598 / 1.7379)
DISTANCE_TABLE: dict[str, dict[float, dict[int, float]]] = {
    "random": {0.9: {10: 1.9162, 20: 1.7554, 50: 1.7034}},
    "spanning": {0.9: {10: 1.9162, 20: 1.7554, 50: 1.7034}},  # one table: the same c(K)
}


def scale_factor(k: int, level: float, selection: str = "random", tables: dict | None = None) -> float | None:
    """c(K) of :data:`SCALE_TABLE` (or ``tables``) for ``k`` calibration models (None: no table for ``level``)."""
    table = (SCALE_TABLE if tables is None else tables).get(selection, {}).get(round(level, 3))
    if not table:
        return None
    ks = sorted(table)
    return float(np.interp(math.log(max(k, 1)), [math.log(x) for x in ks], [table[x] for x in ks]))


def scale_for(ratios: Sequence[np.ndarray], level: float, weights: Sequence[float] | None = None) -> float:
    """The smallest ``c`` at which the mean, over simulated calibrations, of the share of held-out
    rows with ``|r| <= c s`` reaches ``level``.  ``ratios``: per calibration, its held-out rows'
    ``|r| / s`` (``s`` that calibration's RMS nested residual; equally spaced quantiles of them do
    as well).  Each calibration weighs the same (or ``weights``), whatever its number of held-out
    rows: the level is then the expected coverage on a new device calibrated the same way."""
    keep = [i for i, r in enumerate(ratios) if len(r)]
    rs = [np.sort(np.asarray(ratios[i], dtype=float)) for i in keep]
    if not rs:
        raise PerfseerError("no simulated calibrations to learn the interval scale from", "run more draws")
    w = np.ones(len(rs)) if weights is None else np.asarray([weights[i] for i in keep], dtype=float)
    w = w / w.sum()

    def cover(c):
        return float(np.dot(w, [np.searchsorted(r, c, side="right") / len(r) for r in rs]))

    cand = np.unique(np.concatenate(rs))
    lo, hi = 0, len(cand) - 1
    if cover(cand[hi]) < level:
        return float(cand[hi])
    while lo < hi:
        mid = (lo + hi) // 2
        if cover(cand[mid]) >= level:
            hi = mid
        else:
            lo = mid + 1
    return float(cand[lo])


# -- distance from the calibration set --------------------------------------------------------------

# Spaces in which a model's distance from the K calibration models is measured: ``glob`` the five
# log global features (natural log units, unstandardised: a factor e in FLOPs is one unit whatever
# the calibration set), ``pred`` the source's log predictions (RMS over its columns), ``emb`` the
# source trunk's embedding (what its heads read).
DISTANCE_SPACES = ("glob", "pred", "emb")


def distance_coords(logp: np.ndarray, glob: np.ndarray, emb: np.ndarray | None) -> dict[str, np.ndarray]:
    """Each row's coordinates in :data:`DISTANCE_SPACES` (``emb`` absent without embeddings)."""
    logp = np.asarray(logp, dtype=np.float64)
    out = {"glob": np.asarray(glob, dtype=np.float64), "pred": logp / math.sqrt(max(logp.shape[1], 1))}
    if emb is not None:
        out["emb"] = np.asarray(emb, dtype=np.float64)
    return out


def nearest_distance(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per row of ``x``, the Euclidean distance to the nearest row of ``ref``."""
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    d2 = (x ** 2).sum(1)[:, None] - 2 * x @ ref.T + (ref ** 2).sum(1)[None, :]
    return np.sqrt(np.maximum(d2.min(1), 0.0))


def loo_distance(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per calibration row, the distance to the nearest row of *another* model: how far the row
    was from what its leave-one-model-out fit saw (the held-out analogue of :func:`nearest_distance`)."""
    x = np.asarray(x, dtype=np.float64)
    d2 = (x ** 2).sum(1)[:, None] - 2 * x @ x.T + (x ** 2).sum(1)[None, :]
    d2[np.asarray(groups)[:, None] == np.asarray(groups)[None, :]] = np.inf
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


SCALE_STATS = ("rms", "conformal", "median")


def residual_scale(a: np.ndarray, stat: str = "rms", level: float = 0.9) -> float:
    """One number for the spread of residuals ``a``: their RMS (``rms``), the split-conformal rank
    ``ceil((n + 1) level)`` of ``|a|`` capped at the largest (``conformal``), or the median
    ``|a|`` (``median``)."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    if stat == "rms":
        return float(np.sqrt(np.mean(a ** 2)))
    if stat == "conformal":
        s = np.sort(a)
        return float(s[min(math.ceil((len(s) + 1) * level), len(s)) - 1])
    if stat == "median":
        return float(np.median(a))
    raise PerfseerError(f"unknown residual scale {stat!r}", f"choose one of {', '.join(SCALE_STATS)}")


def row_scales(residuals: np.ndarray, cal_dist: np.ndarray, new_dist: np.ndarray, beta: float,
               form: str = "linear", stat: str = "rms") -> np.ndarray:
    """Half-width per unit ``c`` of new rows at distances ``new_dist``: ``s_w w(d)``, where ``s_w``
    is the spread (:func:`residual_scale`, the RMS by default) of the calibration rows' nested
    residuals divided by their own ``w`` (at their leave-one-model-out distances ``cal_dist``).
    ``beta = 0``: the plain spread ``s``."""
    residuals, cal_dist = np.asarray(residuals, dtype=np.float64), np.asarray(cal_dist, dtype=np.float64)
    d_ref = float(np.mean(cal_dist)) if len(cal_dist) else 0.0
    s_w = residual_scale(residuals / width_growth(cal_dist, d_ref, beta, form), stat)
    return max(s_w, 1e-6) * width_growth(new_dist, d_ref, beta, form)


def interval_halfwidth(residuals: np.ndarray, groups: np.ndarray, coverage: float,
                       rule: str = DEFAULT_INTERVAL, selection: str = "random",
                       coords: np.ndarray | None = None) -> dict:
    """Half-width ``q`` of the log-space interval from leave-one-model-out residuals (module doc).

    ``rule``: ``distance`` (per row, needs ``coords``: the calibration rows' source embeddings;
    ``q`` here is its value at the calibration rows' mean distance, the rows' own in
    :func:`row_halfwidths`), ``scaled`` (``c(K) s``, :data:`SCALE_TABLE`), ``conformal`` (the
    jackknife rank, the Student-t bound below 9 rows at 90 %) or ``student-t``.  ``distance``
    without ``coords`` or a table for the level is ``scaled``; a level without a scale table
    falls back to ``conformal``; every candidate is recorded."""
    from scipy import stats

    if rule not in INTERVAL_RULES:
        raise PerfseerError(f"unknown interval rule {rule!r}", f"choose one of {', '.join(INTERVAL_RULES)}")
    a = np.sort(np.abs(residuals))
    n = len(a)
    k = int(len(np.unique(groups)))
    alpha = 1 - coverage
    rank = math.ceil((n + 1) * (1 - alpha))
    conformal = float(a[rank - 1]) if rank <= n else None
    s = float(np.sqrt(np.mean(residuals ** 2)))
    t_bound = float(stats.t.ppf(1 - alpha / 2, max(n - 1, 1)) * s * math.sqrt(1 + 1 / n))
    c = scale_factor(k, coverage, selection)
    scaled = c * s if c is not None else None
    table = SCALE_TABLE.get(selection, {}).get(round(coverage, 3)) or {}
    below = bool(table) and k < min(table)  # fewer models than were simulated: never below Student-t
    dist = None
    c_d = scale_factor(k, coverage, selection, DISTANCE_TABLE)
    if rule == "distance" and coords is not None and c_d is not None and k >= 2:
        coords = np.asarray(coords, dtype=np.float64)
        loo = loo_distance(coords, groups)
        d_ref = float(np.mean(loo))
        beta, form = DISTANCE_RULE["beta"], DISTANCE_RULE["form"]
        s_w = float(row_scales(residuals, loo, np.zeros(1), beta, form)[0])
        dist = {**DISTANCE_RULE, "scale": c_d, "rms_weighted": s_w, "d_ref": d_ref, "far": float(np.max(loo)),
                "coords": np.round(coords, 5).tolist(), "groups": [int(g) for g in groups]}
    if dist is not None:
        q = c_d * dist["rms_weighted"] * float(width_growth(np.array([dist["d_ref"]]), dist["d_ref"], dist["beta"],
                                                            dist["form"])[0])
        if below and t_bound > q:  # fewer models than were simulated: never below Student-t
            dist["scale"] *= t_bound / q
            q, basis = t_bound, "distance (raised to student-t below the table's smallest K)"
        else:
            basis = "distance"
    elif rule in ("scaled", "distance") and scaled is not None and below and t_bound > scaled:
        q, basis = t_bound, "student-t (below the scale table's smallest K)"
    elif rule in ("scaled", "distance") and scaled is not None:
        q, basis = scaled, "scaled" if rule == "scaled" else "scaled (no source embeddings for distance)"
    elif rule == "student-t" or conformal is None:
        q, basis = t_bound, "student-t"
    else:
        q, basis = conformal, "conformal"
    return {"level": coverage, "log_halfwidth": q, "factor": math.exp(q), "rows": n, "models": k,
            "rule": rule, "basis": basis, "selection": selection, "rms_residual": s, "scale": c, "scaled": scaled,
            "conformal_rank": rank, "conformal": conformal, "t_bound": t_bound,
            "residuals": [round(float(r), 5) for r in residuals], "distance": dist}


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


# -- the calibration --------------------------------------------------------------------------------

@dataclass
class Calibration:
    """What :func:`calibrate` fitted: the method, the new network (or correction) and the interval."""

    method: str
    net: object  # NeuralPredictor (adapted) or CorrectedNet (loglinear)
    correction: LogLinear | None
    interval: dict
    domain: dict
    residuals: np.ndarray
    base_column: int
    extra: dict = field(default_factory=dict)

    def predict(self, graphs: Sequence) -> np.ndarray:
        return self.net.predict(list(graphs))[:, 0]


def _groups(models: Sequence[str]) -> np.ndarray:
    _, inv = np.unique(np.asarray(models, dtype=str), return_inverse=True)
    return inv


def calibrate(source, graphs: Sequence, y: np.ndarray, models: Sequence[str], metric: str = "latency_ms",
              config: CalibrationConfig | None = None, meta_head: torch.nn.Module | None = None,
              source_outputs: np.ndarray | None = None, embeddings: torch.Tensor | None = None,
              device: str | None = None) -> Calibration:
    """Fit ``config.method`` on K measured rows of the new device.

    Args:
        source: the source :class:`~perfseer.predictor.Predictor` (its ``net``).
        graphs: the rows' raw PyG graphs (at their batch sizes).
        y: ``[K]`` measurements of ``metric``, > 0.
        models: ``[K]`` the model of each row (leave-one-model-out groups).
        metric: the measured metric; the source's outputs for it are the correction's inputs.
        meta_head: the ``meta`` method's initialisation (:func:`meta_init`).
        source_outputs, embeddings: the source's predictions ``[K, T]`` and trunk embeddings
            ``[K, H]`` of ``graphs`` when already computed (benchmarks reuse them across draws).
        device: the new device's name.  When its kind (device registry) differs from the source's
            (:func:`cross_kind_warning`), ``loglinear``'s ``auto`` variant is
            :data:`CROSS_KIND_VARIANT` instead of a choice among :data:`AUTO_VARIANTS`; when
            both are CPUs (:func:`blend_kind`), ``auto`` also weighs :data:`BLEND_VARIANT`.

    Raises:
        PerfseerError: fewer than :data:`MIN_MODELS` models, non-positive values, a source without
            that metric, or a method the source cannot do.
    """
    cfg = config or CalibrationConfig()
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(graphs) != len(y) or len(models) != len(y):
        raise PerfseerError(f"{len(graphs)} graphs, {len(models)} model names and {len(y)} values", "pass one of each per row")
    if not (np.isfinite(y) & (y > 0)).all():
        raise PerfseerError(f"{int((~(np.isfinite(y) & (y > 0))).sum())} calibration values are missing or <= 0",
                            f"drop those rows; {metric} must be > 0")
    groups = _groups(models)
    if groups.max(initial=-1) + 1 < MIN_MODELS:
        raise PerfseerError(f"calibration needs at least {MIN_MODELS} distinct measured models, got "
                            f"{groups.max(initial=-1) + 1}",
                            "measure more models of the calibration set (perfseer collect, docs/calibration.md)")
    cols = [i for i, t in enumerate(source.targets) if t.metric == metric]
    if not cols:
        raise PerfseerError(f"predictor {source.name} predicts no {metric}",
                            f"calibrate a predictor of {metric}: its targets are {', '.join(t.key for t in source.targets)}")
    logy = np.log(y)
    selection = cfg.selection if cfg.selection != "auto" else (
        "spanning" if set(map(str, models)) <= calibration_set_models() else "random")
    outputs = source_outputs if source_outputs is not None else source.predict_graphs(list(graphs))
    logp = np.log(np.maximum(np.asarray(outputs)[:, cols], 1e-12))
    glob = global_design(graphs, cfg.live_features)
    domain = domain_of(glob[:, :len(DOMAIN_FEATURES)])
    domain["output_independent_rows"] = int((graph_liveness(graphs)[:, 2] > 0).sum())

    if cfg.method == "loglinear":
        extra = {"selection": selection}
        neural = has_embedding(source.net)
        candidates = [v for v in AUTO_VARIANTS if neural or "embedding" not in VARIANTS[v]] \
            if cfg.variant in ("auto", BLEND_VARIANT) else [cfg.variant]
        blend = "always" if cfg.variant == BLEND_VARIANT else None
        if cfg.variant == "auto" and device is not None and cross_kind_warning(source, device):
            candidates = [CROSS_KIND_VARIANT]  # a GPU's predictions mislead on a CPU (and back): the rows' own cost fit
            extra["variant_rule"] = f"{CROSS_KIND_VARIANT}: the source predictor is of another device kind"
        elif cfg.variant == "auto" and device is not None and (kind := blend_kind(source, device)):
            blend = "if lower"  # a CPU's latency may follow its FLOPs and bytes closely: the K rows tell
            extra["variant_rule"] = (f"{BLEND_VARIANT} considered: a {kind.upper()} source calibrated to a "
                                     f"{kind.upper()}")
        if not neural and "embedding" in VARIANTS[candidates[0]]:  # no trunk embedding: the same without it
            candidates = ["full"]
            extra["variant_fallback"] = f"{cfg.variant} -> full: the source has no trunk embedding"
        e = None
        if neural and (cfg.interval == "distance" or any("embedding" in VARIANTS[v] for v in candidates)):
            e = (embeddings if embeddings is not None else embed(source.net, list(graphs))).double().numpy()
        both = {v: nested_residuals(logp, glob, logy, groups, v, cfg.ridge,
                                    emb=e if "embedding" in VARIANTS[v] else None, inner=True) for v in candidates}
        nested = {v: r for v, (r, _) in both.items()}
        rms = {v: float(np.sqrt(np.mean(r ** 2))) for v, r in nested.items()}
        variant = min(candidates, key=lambda v: rms[v])
        extra.update({"variant": variant, "variant_rms": rms})
        ll = fit_correction(logp, glob, logy, groups, cfg.ridge, variant,
                            emb=e if "embedding" in VARIANTS[variant] else None)
        ll.live_features = list(cfg.live_features)
        if len(candidates) > 1:  # auto: the interval reads residuals whose variant choice is nested too
            res, per_row = auto_residuals(nested, {v: err for v, (_, err) in both.items()})
            extra["residual_variants"] = {v: per_row.count(v) for v in candidates}
            extra["rms_nested_choice"] = float(np.sqrt(np.mean(res ** 2)))
        else:
            res = nested[variant]
        if blend:  # the geometric mean with the rows' own cost fit; its residuals are the parts' means
            res_cost = nested_residuals(logp, glob, logy, groups, "cost", cfg.ridge)
            extra["blend_rms"] = {BLEND_VARIANT: residual_scale((nested[variant] + res_cost) / 2),
                                  variant: rms[variant], "cost": residual_scale(res_cost)}
            if blend == "always" or keeps_blend(nested[variant], res_cost):
                cost = fit_correction(logp, glob, logy, groups, cfg.ridge, "cost")
                cost.live_features = list(cfg.live_features)
                extra.update({"variant": BLEND_VARIANT, "blend_of": [variant, "cost"]})
                ll, res = BlendedCorrection([ll, cost]), (res + res_cost) / 2
        net = CorrectedNet(source.net, [cols[j] for j in range(len(cols))], ll)
        return Calibration("loglinear", net, ll, interval_halfwidth(res, groups, cfg.coverage, cfg.interval, selection,
                                                                    coords=e), domain, res, cols[ll.base], extra)

    model, heads = _parts(source.net)
    base = int(np.argmin([np.var(logy - logp[:, j]) for j in range(len(cols))]))
    ts = source.net.target_scaler
    if cfg.method == "meta":
        if meta_head is None:
            raise PerfseerError("method meta needs a meta-learned head", "pass meta_head=meta_init(...) "
                                "(perfseer calibrate --meta-data DATASET)")
        start_head = meta_head
        m, s = _kscale(logy)
    else:
        start_head = heads[cols[base]]
        m, s = float(ts.mean_[cols[base]]), float(ts.std_[cols[base]])
    z = torch.as_tensor((logy - m) / s, dtype=torch.float32)

    if cfg.method in ("head", "meta"):
        emb = embeddings if embeddings is not None else embed(source.net, list(graphs))

        def fit(idx):
            return adapt_head(start_head, emb[idx], z[idx], cfg.steps, cfg.lr_head, cfg.l2sp, cfg.seed)

        res = np.empty(len(y))
        for fold in _folds(groups, cfg.head_folds, cfg.seed):
            out = np.isin(groups, fold)
            h = fit(np.flatnonzero(~out))
            with torch.no_grad():
                res[out] = logy[out] - (h(emb[out]).reshape(-1).numpy() * s + m)
        head = fit(np.arange(len(y)))
        net = _single(source.net, head, None, metric, m, s)
    else:  # full
        def fit_full(idx):
            return _finetune_full(source.net, start_head, [graphs[i] for i in idx], z[idx], cfg)

        res = np.empty(len(y))
        for fold in _folds(groups, cfg.cv_folds, cfg.seed):
            out = np.isin(groups, fold)
            trunk_model = fit_full(np.flatnonzero(~out))
            pred = _single(source.net, None, trunk_model, metric, m, s).predict([graphs[i] for i in np.flatnonzero(out)])
            res[out] = logy[out] - np.log(pred[:, 0])
        net = _single(source.net, None, fit_full(np.arange(len(y))), metric, m, s)
    # the distance rule reads the source trunk's embeddings: head and meta keep that trunk, full does not
    coords = emb.double().numpy() if cfg.method in ("head", "meta") and cfg.interval == "distance" else None
    return Calibration(cfg.method, net, None, interval_halfwidth(res, groups, cfg.coverage, cfg.interval, selection,
                                                                 coords=coords),
                       domain, res, cols[base], {"selection": selection})


def _folds(groups: np.ndarray, n: int, seed: int) -> list[np.ndarray]:
    """At most ``n`` folds of whole models (one model per fold when there are ``n`` or fewer)."""
    uniq = np.unique(groups)
    return np.array_split(np.random.default_rng(seed).permutation(uniq), min(n, len(uniq)))


def _single(source_net, head, model, metric: str, mean: float, std: float):
    """A one-target SeerNet NeuralPredictor: the source trunk with ``head``, or a whole ``model``."""
    from perfseer.models.registry import build_model
    from perfseer.training.scaling import TargetScaler
    from perfseer.training.trainer import NeuralPredictor

    if model is None:
        src_model, _ = _parts(source_net)
        cfg = src_model.config.to_dict()
        cfg["num_targets"] = 1
        model = build_model("seernet", **cfg)
        model.trunk.load_state_dict(src_model.trunk.state_dict())
        model.head.load_state_dict(head.state_dict())
    model.eval()
    ts = TargetScaler([metric])
    ts.mean_, ts.std_ = np.array([mean]), np.array([std])
    return NeuralPredictor(model, source_net.feature_scaler, ts)


def _finetune_full(source_net, start_head, graphs, z, cfg: CalibrationConfig):
    from torch_geometric.data import Batch

    from perfseer.training.trainer import _model_input

    net = _single(source_net, start_head, None, "y", 0.0, 1.0)
    model = net.model
    batch = Batch.from_data_list([_model_input(source_net.feature_scaler.transform(g)) for g in graphs])
    torch.manual_seed(cfg.seed)
    model.train()
    _adapt(list(model.parameters()), lambda: ((model(batch).reshape(-1) - z) ** 2).mean(), cfg.steps_full, cfg.lr_full,
           cfg.l2sp)
    model.eval()
    return model


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


# -- choosing what to measure ----------------------------------------------------------------------

def spanning_set(glob: np.ndarray, k: int, start: int | None = None) -> list[int]:
    """Indices of ``k`` rows of ``glob`` ([N, F] log features, :func:`global_design`) that span them:
    greedy K-centre (Gonzalez 1985) on the standardised features, starting from the row nearest
    the median (or at row ``start``), each next pick the row farthest from those already picked.  Spanning the
    feature space keeps every later model near a calibration row (the domain check) and gives the
    correction's slopes leverage at both ends; deterministic for a given candidate list."""
    X = np.asarray(glob, dtype=np.float64)
    keep = np.ptp(X, axis=0) > 1e-9
    X = X[:, keep]
    if len(X) == 0:
        return []
    X = (X - X.mean(0)) / X.std(0) if X.shape[1] else np.zeros((len(X), 1))
    first = int(np.argmin(((X - np.median(X, axis=0)) ** 2).sum(1))) if start is None else int(start)
    picked = [first]
    dist = ((X - X[first]) ** 2).sum(1)
    while len(picked) < min(k, len(X)):
        nxt = int(np.argmax(dist))
        picked.append(nxt)
        dist = np.minimum(dist, ((X - X[nxt]) ** 2).sum(1))
    return picked


def quantile_set(logp: np.ndarray, k: int) -> list[int]:
    """Indices of ``k`` rows at evenly spaced quantiles, ``(i + 1/2) / k``, of the source's
    predicted log latency (``logp`` [N, T]: with several source columns, their first principal
    component, oriented so that it grows with the mean column): calibration models from the
    fastest to the slowest, as many in each stretch of the ranking."""
    X = np.asarray(logp, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if not len(X):
        return []
    Xc = X - X.mean(0)
    if X.shape[1] > 1:
        _, _, vt = np.linalg.svd(Xc, full_matrices=False)
        score = Xc @ vt[0]
        if np.corrcoef(score, Xc.mean(1))[0, 1] < 0:
            score = -score
    else:
        score = Xc[:, 0]
    order = np.argsort(score, kind="stable")
    k = min(k, len(X))
    pos = np.unique(np.minimum(((np.arange(k) + 0.5) / k * len(X)).astype(int), len(X) - 1))
    return [int(order[p]) for p in pos]


def calibration_set_models() -> set[str]:
    """The model names of the shipped calibration sets (``datasets/calibration/*.txt``; empty when
    the datasets are not installed)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "datasets" / "calibration"
    names: set[str] = set()
    for f in sorted(root.glob("*.txt")) if root.is_dir() else []:
        names |= {ln.strip() for ln in f.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    return names


# -- domain -----------------------------------------------------------------------------------------

def domain_of(glob: np.ndarray) -> dict:
    """The calibration rows' log ranges of :data:`DOMAIN_FEATURES`, widened by :data:`DOMAIN_MARGIN`."""
    lo, hi = glob.min(0), glob.max(0)
    pad = DOMAIN_MARGIN * (hi - lo)
    return {"features": list(DOMAIN_FEATURES), "margin": DOMAIN_MARGIN,
            "min": np.exp(lo).tolist(), "max": np.exp(hi).tolist(),
            "log_low": (lo - pad).tolist(), "log_high": (hi + pad).tolist()}


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


# -- the calibrated card ----------------------------------------------------------------------------

def _sha256(path) -> str | None:
    import hashlib
    from pathlib import Path

    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


# On the timm validation devices of docs/calibration.md (train-only sources; `calibration_sweep.py
# report`, "timm validation devices"), a GPU predictor calibrated to a CPU (i9-10940X, i7-12700H)
# with 10-50 rows erred by 15.6-207.1 % MAPE by variant and K models, to the RTX 5090 10.2-15.9 %.
CROSS_KIND = ("calibrated across device kinds: the source predictor was trained on a {src} and the new "
              "device is a {dst}; on the validation devices (docs/calibration.md) a GPU predictor calibrated to "
              "a CPU with 10-50 rows erred by 16-207 % MAPE, against 10-16 % from GPU to GPU, so the default "
              "correction across kinds is a fit of the rows on their FLOPs and memory access (variant cost: "
              "16-53 % there): calibrate a predictor of a {dst} instead where one exists (perfseer predictors)")
# The ``auto`` variant across device kinds (chosen on the timm validation devices: the RTX 3090 and
# RTX 4090 sources calibrated to the i9-10940X and i7-12700H; docs/calibration.md, "Across device kinds").
CROSS_KIND_VARIANT = "cost"
# Source and new device both of these kinds: ``auto`` also weighs :data:`BLEND_VARIANT` and keeps it
# when its nested leave-one-model-out RMS on the K rows is lower than that of the variant it chose
# (validated on the timm CPUs: train-only i9-10940X and i7-12700H sources calibrated to each other,
# 17.0 % mean MAPE against 18.9 %; docs/calibration.md, "Two CPUs both ways").  Between GPUs the
# same choice never helped (12.5 against 12.3 %, worse in 7 of 12 cells): it applies to CPUs only.
BLEND_KINDS = ("cpu",)


def device_kind(name: str) -> str | None:
    """``gpu`` / ``cpu`` of a device name or measurement-table device string, by the device
    registry, else by the setting the collection kit wrote after the ``/``
    (:func:`perfseer.profiling.backends.setting_kind`: ``torch-t1``, ``ort-t4``: a CPU backend;
    ``torch-cuda``: a GPU); ``None`` otherwise (HELP's devices, a
    user's own names)."""
    from perfseer.devices import get_device

    try:
        return get_device(str(name)).kind
    except Exception:  # noqa: BLE001 - any lookup failure means "kind unknown", never an error here
        pass
    from perfseer.profiling.backends import setting_kind

    return setting_kind(str(name).partition("/")[2])


def device_kinds(source, device: str) -> tuple[str | None, str | None]:
    """``(source kind, new device kind)``: :func:`device_kind` of the source's latency devices
    (when they agree) and of ``device``."""
    src = {device_kind(t.device) for t in source.targets} - {None}
    return (src.pop() if len(src) == 1 else None), device_kind(device)


def blend_kind(source, device: str) -> str | None:
    """The kind of :data:`BLEND_KINDS` that the source's devices and ``device`` share, else ``None``."""
    src, dst = device_kinds(source, device)
    return src if src == dst and src in BLEND_KINDS else None


def cross_kind_warning(source, device: str) -> str | None:
    """:data:`CROSS_KIND` filled in when the source's and the new device's kinds are both known and
    differ, else ``None``."""
    src, dst = device_kinds(source, device)
    return CROSS_KIND.format(src=src.upper(), dst=dst.upper()) if src and dst and src != dst else None


def calibrated_predictor(source, source_ref: str, cal: Calibration, target, rows: list[dict],
                         config: CalibrationConfig, name: str | None = None):
    """The calibrated :class:`~perfseer.predictor.Predictor`: a card like any other, plus a
    ``calibration`` section (method, source predictor and its file digests, the K rows, the
    correction, the interval and the domain).

    Args:
        source: the source predictor; ``source_ref`` how it was named (a bundled name or a path).
        cal: what :func:`calibrate` returned.
        target: the new :class:`~perfseer.predictor.Target`.
        rows: the calibration rows (model, input_shape, batch_size, device, phase and the metric).
    """
    from datetime import datetime, timezone

    from perfseer import __version__
    from perfseer.predictor import Predictor, _paths, slug
    from perfseer.training.metrics import evaluate

    card_path, weights_path = _paths(source_ref)
    y = np.array([float(r[target.metric]) for r in rows])
    loo = np.exp(np.log(y) - cal.residuals)
    src_card = source.card
    card = copy.deepcopy({k: v for k, v in src_card.items() if k not in ("scores", "training", "_path")})
    name = name or f"{slug(target.device, target.phase)}.calibrated"
    card.update({
        "name": name, "perfseer_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "targets": [dict(asdict(target), unit=target.unit)], "devices": [target.device], "phases": [target.phase],
        "training": {"dataset": f"{len(rows)} calibration rows of {target.device} (card: calibration.rows)",
                     "rows": {"calibration": len(rows)}, "split_column": None,
                     "calibrated_from": source.name, "source_training": src_card.get("training")},
        "scores": {"calibration_leave_one_model_out": {target.key: evaluate(y, loo)}},
    })
    if cal.correction is None:
        model = cal.net.model
        card["model"] = {"name": "seernet", "kind": "neural", "config": model.config.to_dict(),
                         "parameters": int(sum(p.numel() for p in model.parameters()))}
        card["scaling"] = {"features": cal.net.feature_scaler.to_dict(), "targets": cal.net.target_scaler.to_dict()}
    card["calibration"] = {
        "method": cal.method, "config": config.to_dict(), "base_column": cal.base_column,
        "source": {"name": source.name, "ref": str(source_ref), "card_sha256": _sha256(card_path),
                   "weights_sha256": _sha256(weights_path), "targets": [t.key for t in source.targets],
                   "test_scores": src_card.get("scores", {}).get("test")},
        "source_targets": src_card["targets"],
        "columns": list(getattr(cal.net, "columns", [cal.base_column])),
        "correction": cal.correction.to_dict() if cal.correction is not None else None,
        "extra": cal.extra,
        "interval": cal.interval, "domain": cal.domain, "rows": rows,
    }
    warning = cross_kind_warning(source, target.device)
    if warning:
        card["calibration"]["warnings"] = [warning]
    return Predictor(card, CalibratedNet(card, cal.net), name)


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


def wrap_loaded(card: dict, net):
    """The network of a loaded calibrated card (``load_predictor`` calls this)."""
    cal = card["calibration"]
    if cal.get("correction") is not None:
        net = CorrectedNet(net, list(cal["columns"]), correction_from_dict(cal["correction"]))
    return CalibratedNet(card, net)
