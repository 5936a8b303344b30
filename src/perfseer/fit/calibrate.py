"""A predictor for a new device from K measurements: calibration of a trained source predictor.

A user with a device nobody benchmarked can afford K = 5-50 measurements.  :func:`calibrate` turns
them, with a *source* predictor trained on another device, into a predictor card for the new one.
Four methods, compared on the same splits by ``benchmarks/calibration.py`` at tag research-2026-11 (``docs/guide/calibrate.md``):

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
import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from perfseer import __version__
from perfseer.devices import get_device
from perfseer.errors import PerfseerError
from perfseer.fit.metrics import evaluate
from perfseer.models.registry import build_model
from perfseer.profiling.backends import setting_kind

# The loading half of a calibrated card lives in the runtime; its names stay importable from here.
from perfseer.runtime.corrections import (  # noqa: F401
    BLEND_VARIANT,
    DOMAIN_FEATURES,
    LIVE_DESIGN,
    LIVE_FEATURES,
    OUTPUT_INDEPENDENT,
    BlendedCorrection,
    CalibratedNet,
    CorrectedNet,
    LogLinear,
    _parts,
    correction_from_dict,
    domain_check,
    embed,
    global_design,
    graph_liveness,
    has_embedding,
    live_design,
    nearest_distance,
    row_halfwidths,
    width_growth,
    wrap_loaded,
)
from perfseer.runtime.net import NeuralPredictor, _model_input
from perfseer.runtime.predictor import Predictor, _paths, slug
from perfseer.runtime.scaling import TargetScaler

METHODS = ("loglinear", "head", "full", "meta")
# Chosen on the validation devices of benchmarks/calibration.py at tag research-2026-11 (NAS-Bench-201: HELP's meta-validation
# devices Titan X and Gold 6240; timm: RTX 3090 -> RTX 5090), never on the test devices.
DEFAULT_METHOD = "loglinear"
MIN_MODELS = 3  # fewer distinct models leave nothing to leave out (and no interval)
LIVE_RIDGE_WEIGHT = 1.0  # the live columns' ridge penalty relative to the other standardised columns
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
# Chosen on the validation devices (docs/guide/calibrate.md): no fixed feature set was best on both
# NAS-Bench-201 and timm; ``auto`` -- per calibration, the variant of lowest nested
# leave-one-model-out error on the K rows themselves -- was at or near the best on both.
DEFAULT_VARIANT = "auto"
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


def heads_output(net, emb: torch.Tensor) -> np.ndarray:
    """The source's predictions ``[N, T]`` in the targets' units from trunk embeddings ``[N, H]``."""
    _, heads = _parts(net)
    with torch.no_grad():
        z = torch.cat([h(emb) for h in heads], dim=1).double().numpy()
    return net.target_scaler.inverse_transform(z)


# -- loglinear --------------------------------------------------------------------------------------

def _ridge_fit(X: np.ndarray, r: np.ndarray, lam: float) -> np.ndarray:
    """Coefficients ``[1 + F]`` (intercept unpenalised) of ridge regression of ``r`` on ``X``."""
    A = np.hstack([np.ones((len(X), 1)), X])
    D = np.eye(A.shape[1]) * lam
    D[0, 0] = 0.0
    return np.linalg.solve(A.T @ A + D + 1e-9 * np.eye(A.shape[1]), A.T @ r)


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
    docs/guide/calibrate.md).  Here each left-out model ``i`` gets the residual of the variant that
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
# device (docs/guide/calibrate.md).  Interpolated in log K, held constant outside the table.
SCALE_TABLE: dict[str, dict[float, dict[int, float]]] = {
    # python benchmarks/calibration_intervals.py learn (at tag research-2026-11) rows_nb201.npz rows_timm3090.npz rows_timm4090.npz
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
# source devices only: python benchmarks/calibration_intervals.py learn (at tag research-2026-11) rows_nb201.npz
# rows_timm3090.npz rows_timm4090.npz (docs/guide/calibrate.md; auto's residuals with the variant choice
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


def loo_distance(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per calibration row, the distance to the nearest row of *another* model: how far the row
    was from what its leave-one-model-out fit saw (the held-out analogue of :func:`nearest_distance`)."""
    x = np.asarray(x, dtype=np.float64)
    d2 = (x ** 2).sum(1)[:, None] - 2 * x @ x.T + (x ** 2).sum(1)[None, :]
    d2[np.asarray(groups)[:, None] == np.asarray(groups)[None, :]] = np.inf
    return np.sqrt(np.maximum(d2.min(1), 0.0))


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
    from scipy import stats  # deferred: heavy, loaded on first use

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
        source: the source :class:`~perfseer.runtime.predictor.Predictor` (its ``net``).
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
                            "measure more models of the calibration set (perfseer collect, docs/guide/calibrate.md)")
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
    from torch_geometric.data import Batch  # deferred: heavy, loaded on first use

    net = _single(source_net, start_head, None, "y", 0.0, 1.0)
    model = net.model
    batch = Batch.from_data_list([_model_input(source_net.feature_scaler.transform(g)) for g in graphs])
    torch.manual_seed(cfg.seed)
    model.train()
    _adapt(list(model.parameters()), lambda: ((model(batch).reshape(-1) - z) ** 2).mean(), cfg.steps_full, cfg.lr_full,
           cfg.l2sp)
    model.eval()
    return model


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


# -- the calibrated card ----------------------------------------------------------------------------

def _sha256(path) -> str | None:
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


# On the timm validation devices of docs/guide/calibrate.md (train-only sources; `calibration_sweep.py
# report`, "timm validation devices"), a GPU predictor calibrated to a CPU (i9-10940X, i7-12700H)
# with 10-50 rows erred by 15.6-207.1 % MAPE by variant and K models, to the RTX 5090 10.2-15.9 %.
CROSS_KIND = ("calibrated across device kinds: the source predictor was trained on a {src} and the new "
              "device is a {dst}; on the validation devices (docs/guide/calibrate.md) a GPU predictor calibrated to "
              "a CPU with 10-50 rows erred by 16-207 % MAPE, against 10-16 % from GPU to GPU, so the default "
              "correction across kinds is a fit of the rows on their FLOPs and memory access (variant cost: "
              "16-53 % there): calibrate a predictor of a {dst} instead where one exists (perfseer predictors)")
# The ``auto`` variant across device kinds (chosen on the timm validation devices: the RTX 3090 and
# RTX 4090 sources calibrated to the i9-10940X and i7-12700H; docs/guide/calibrate.md, "Across device kinds").
CROSS_KIND_VARIANT = "cost"
# Source and new device both of these kinds: ``auto`` also weighs :data:`BLEND_VARIANT` and keeps it
# when its nested leave-one-model-out RMS on the K rows is lower than that of the variant it chose
# (validated on the timm CPUs: train-only i9-10940X and i7-12700H sources calibrated to each other,
# 17.0 % mean MAPE against 18.9 %; docs/guide/calibrate.md, "Two CPUs both ways").  Between GPUs the
# same choice never helped (12.5 against 12.3 %, worse in 7 of 12 cells): it applies to CPUs only.
BLEND_KINDS = ("cpu",)


def device_kind(name: str) -> str | None:
    """``gpu`` / ``cpu`` of a device name or measurement-table device string, by the device
    registry, else by the setting the collection kit wrote after the ``/``
    (:func:`perfseer.profiling.backends.setting_kind`: ``torch-t1``, ``ort-t4``: a CPU backend;
    ``torch-cuda``: a GPU); ``None`` otherwise (HELP's devices, a
    user's own names)."""

    try:
        return get_device(str(name)).kind
    except Exception:  # noqa: BLE001 - any lookup failure means "kind unknown", never an error here
        pass

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
    """The calibrated :class:`~perfseer.runtime.predictor.Predictor`: a card like any other, plus a
    ``calibration`` section (method, source predictor and its file digests, the K rows, the
    correction, the interval and the domain).

    Args:
        source: the source predictor; ``source_ref`` how it was named (a bundled name or a path).
        cal: what :func:`calibrate` returned.
        target: the new :class:`~perfseer.runtime.predictor.Target`.
        rows: the calibration rows (model, input_shape, batch_size, device, phase and the metric).
    """

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


