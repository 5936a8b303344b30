"""A roofline reference time per graph, and baselines that learn only what it misses.

The physics (Williams et al., 2009, applied per operator and summed): an operator that computes
(FLOPs > 0) takes the longer of its arithmetic and its memory traffic at the device's rates, one
that only moves data (``Reshape``, ``Transpose``, ``Concat``: FLOPs = 0) its traffic, and every
operator pays a fixed launch/overhead time:

    b(g) = sum_{n: F_n > 0} [max(F_n / P, B_n / W) + c_1] + sum_{n: F_n = 0} [a B_n / W + c_2]

with ``F_n`` the node's FLOPs and ``B_n`` its memory access (bytes read and written,
:data:`perfseer.features.schema.COST_FEATURES`), ``P`` the peak rate (FLOP/ms), ``W`` the memory
bandwidth (bytes/ms), ``a`` the share of a data-movement node's bytes that is real traffic and
``c_1``, ``c_2`` the per-node overheads (ms).  :class:`RooflineParams` holds the five; ``P`` and
``W`` come from a device's spec sheet (:func:`spec_params`, the device registry) or are fitted,
the overheads are fitted (:func:`fit_params`: least squares of ``log y`` on ``log b(g)`` over the
training graphs, a robust loss, every parameter in log space, the rates from a grid of starts).

**Per operator group** (``fit="groups"``, :func:`fit_group_params`): one ``P``, ``W`` and overhead
``c`` per operator group of :data:`perfseer.models.estimator.OP_GROUP_NAMES` (convolutions split
into depthwise / grouped, 1x1 and spatial; matrix products; norms; activations; ...), about 40
parameters, each pulled towards the shared roofline by a penalty.  A depthwise convolution, a GEMM
and a LayerNorm reach very different shares of a device's peak, most of all on a CPU; the
per-group fit learns each share from the training graphs' total times and still extrapolates
linearly in FLOPs and bytes.  On the timm leave-families-out folds it alone (times a constant) is at
15.1 % (RTX 3090) and 18.0 % (i9), against 27.9 / 25.8 % for the shared roofline
(docs/history.md, "Round 9").

**Recurrent steps** (``steps=True``; the estimator's ``recurrent_steps``, PMGNS's
``baseline_steps``): a recurrent node (``LSTM``, ``GRU``, ``RNN``) runs its time steps one after
the other, each a small product and a few element-wise kernels, so it pays its overhead once per
step and direction, ``T x D`` times (:func:`node_launches`), not once.  On the i9 leave-families-out
folds the per-group roofline with it predicts the held-out `sequencer2d` networks within 1.3 %
(63.3 / 81.1 / 125.9 ms against 63.0 / 80.3 / 127.5 ms measured), with the overhead per launch
fitted on families without a single recurrent node; without it they are 3.4-3.6x under-predicted
(docs/history.md, "Round 11").

Two uses:

- :class:`Roofline` (``roofline``, a baseline estimator): ``b(g)`` alone (times a fitted
  constant), or with a ridge or LightGBM model of the residual ``log y - log b(g)`` on the global
  features, ``log b`` and the roofline's terms (``residual="ridge"`` / ``"gbm"``);
- PMGNS's ``baseline="roofline"`` (:mod:`perfseer.models.pmgns`): the network predicts
  ``log y - log b(g)``; :func:`log_baseline_torch` (:func:`log_group_baseline_torch` with
  ``baseline_fit="groups"``) computes ``log b`` inside the model, and the parameters are buffers of
  its state, so a card predicts exactly what was trained.

Example::

    p = fit_params(train_graphs, y_ms, spec_params("rtx3090", "fp16"), free=("c1", "c2"))
    b = baseline_ms(test_graphs, p)          # [N] ms
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from perfseer.devices.registry import get_device
from perfseer.errors import PerfseerError
from perfseer.features.pyg import OP_VOCAB
from perfseer.features.schema import NODE_FEATURES
from perfseer.models.estimator import (OP_GROUP_NAMES, OP_GROUPS, EstimatorConfig, GraphEstimator, _group_lookup,
                                       floats, global_features, node_groups, signed_log1p)
from perfseer.models.gbm import _lightgbm

FLOPS_COL = NODE_FEATURES.index("flops")
BYTES_COL = NODE_FEATURES.index("memory_access_bytes")
STEPS_COLS = (NODE_FEATURES.index("axis_size"), NODE_FEATURES.index("mm_batch"))  # a recurrent node's T and D
PARAM_NAMES = ("P", "W", "a", "c1", "c2")
# bounds of the fitted parameters (log space): rates from 1 GFLOP/s and 1 GB/s up, overheads 1 ns - 10 ms
_BOUNDS = {"P": (1e6, 1e14), "W": (1e6, 1e14), "a": (1e-4, 1e3), "c1": (1e-9, 10.0), "c2": (1e-9, 10.0)}
# a start for devices without a spec: a few TFLOP/s, ~100 GB/s, 10 us and 1 us per node
GENERIC = (1e9, 1e8, 1.0, 1e-2, 1e-3)


@dataclass(frozen=True)
class RooflineParams:
    """``P`` FLOP/ms, ``W`` bytes/ms, ``a`` (share of a movement node's bytes), ``c1`` / ``c2`` ms per
    compute / movement node."""

    P: float
    W: float
    a: float = 1.0
    c1: float = 1e-2
    c2: float = 1e-3

    def as_array(self) -> np.ndarray:
        return np.array([self.P, self.W, self.a, self.c1, self.c2], dtype=np.float64)

    @classmethod
    def from_array(cls, v) -> RooflineParams:
        v = [float(x) for x in v]
        if len(v) != 5 or not all(math.isfinite(x) and x > 0 for x in v):
            raise PerfseerError(f"roofline parameters {v} are not five positive numbers",
                                "refit the baseline (fit_params)")
        return cls(*v)


def spec_params(device: str, precision: str = "fp32") -> RooflineParams:
    """``P`` and ``W`` of ``device`` (a registry name or a measurement-table device string) at
    ``precision`` from its spec sheet; the overheads at their generic start."""

    spec = get_device(device)
    if precision not in spec.peak_tflops:
        raise PerfseerError(f"device {spec.name!r} has no {precision} peak in its spec",
                            f"use one of {', '.join(spec.peak_tflops)}")
    if not spec.mem_bandwidth_gbs:
        raise PerfseerError(f"device {spec.name!r} has no memory bandwidth in its spec",
                            "add mem_bandwidth_gbs to its spec file, or fit the rates (fit='all')")
    return RooflineParams(spec.peak_tflops[precision] * 1e9, spec.mem_bandwidth_gbs * 1e6, *GENERIC[2:])


def node_costs(graph) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs and memory-access bytes of every node of a (raw-featured) graph, float64 ``[n]``."""
    x = np.asarray(graph.x, dtype=np.float64)
    return x[:, FLOPS_COL], x[:, BYTES_COL]


def recurrent_op_ids() -> np.ndarray:
    """The operator-vocabulary ids of the recurrent operators (``LSTM``, ``GRU``, ``RNN``)."""

    return np.array([OP_VOCAB.index(o) for o in OP_GROUPS["recurrent"] if o in OP_VOCAB], dtype=np.int64)


def node_launches(graph) -> np.ndarray:
    """How many times each node of a (raw-featured) graph pays its overhead, float64 ``[n]``: ``T x D``
    for a recurrent node (its sequence length ``axis_size`` times its directions ``mm_batch``: one
    step after the other), 1 for every other node."""
    x = np.asarray(graph.x, dtype=np.float64)
    op = np.asarray(graph.op_type, dtype=np.int64).reshape(-1)
    steps = np.maximum(np.round(x[:, STEPS_COLS[0]]), 1.0) * np.maximum(np.round(x[:, STEPS_COLS[1]]), 1.0)
    return np.where(np.isin(op, recurrent_op_ids()), steps, 1.0)


class _Costs:
    """The node costs of a list of graphs, concatenated, with each node's graph index and (with
    ``steps``) its launches (:func:`node_launches`; else 1 each)."""

    def __init__(self, graphs, steps: bool = False):
        parts = [node_costs(g) for g in graphs]
        self.n = len(parts)
        self.F = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0)
        self.B = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
        self.gid = np.concatenate([np.full(len(p[0]), i) for i, p in enumerate(parts)]) if parts else np.zeros(0, int)
        self.comp = self.F > 0
        self.L = (np.concatenate([node_launches(g) for g in graphs]) if steps and parts else np.ones(len(self.F)))
        self._graphs = graphs
        self._grp = None

    @property
    def grp(self) -> np.ndarray:
        """Every node's operator group (:func:`perfseer.models.estimator.node_groups`), computed once."""
        if self._grp is None:
            lookup = _group_lookup()
            parts = [node_groups(g, lookup) for g in self._graphs]
            self._grp = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return self._grp

    def per_graph(self, v: np.ndarray) -> np.ndarray:
        """The sum of a per-node value over each graph's nodes, ``[N]``."""
        return np.bincount(self.gid, weights=v, minlength=self.n)

    def _sums(self, t_comp, t_move) -> tuple:
        """Per graph: compute time, movement time, compute launches (nodes, recurrent ones counted per
        step with ``steps``), movement nodes."""
        return (self.per_graph(t_comp), self.per_graph(t_move), self.per_graph(self.comp * self.L),
                self.per_graph((~self.comp).astype(float)))

    def group_terms(self, theta: np.ndarray) -> np.ndarray:
        """:meth:`terms` of the per-group roofline: ``theta`` ``[G, 3]`` holds each operator group's
        ``P``, ``W`` and overhead ``c`` (a movement node of any group: its bytes at the group's ``W``)."""
        P, W, c = theta[self.grp, 0], theta[self.grp, 1], theta[self.grp, 2]
        t_comp = np.where(self.comp, np.maximum(self.F / P, self.B / W), 0.0)
        t_move = np.where(self.comp, 0.0, self.B / W)
        tc, tm, nc, nm = self._sums(t_comp, t_move)
        return np.column_stack([tc, tm, nc, nm, tc + tm + self.per_graph(c * self.L)])

    def terms(self, p: RooflineParams) -> np.ndarray:
        """``[N, 5]`` per graph: the roofline sum over compute nodes, movement bytes / W, compute
        nodes, movement nodes, and b(g)."""
        t_comp = np.where(self.comp, np.maximum(self.F / p.P, self.B / p.W), 0.0)
        t_move = np.where(self.comp, 0.0, self.B / p.W)
        tc, tm, nc, nm = self._sums(t_comp, t_move)
        return np.column_stack([tc, tm, nc, nm, tc + p.a * tm + p.c1 * nc + p.c2 * nm])


def _positive_times(graphs, y) -> np.ndarray:
    """``y`` as float64 ``[N]``, one positive time per graph, or a clear error."""
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if len(y) != len(graphs) or len(y) == 0 or not (y > 0).all():
        raise PerfseerError("fitting a roofline needs one positive time per graph", "pass the training latencies")
    return y


def baseline_ms(graphs, params: RooflineParams, steps: bool = False) -> np.ndarray:
    """``b(g)`` in milliseconds for each graph, ``[N]`` (``steps``: recurrent nodes pay their overhead
    per step, :func:`node_launches`)."""
    return _Costs(graphs, steps).terms(params)[:, 4]


def fit_params(graphs, y, init: RooflineParams, free=("c1", "c2"), steps: bool = False) -> RooflineParams:
    """The parameters named in ``free`` fitted to ``log y`` (milliseconds, ``[N]``) by robust least
    squares of ``log b(g) - log y`` (soft-L1, scale 0.3), from ``init``; the others stay.  ``steps``:
    as :func:`baseline_ms`."""
    from scipy.optimize import least_squares  # deferred: heavy, loaded on first use

    free = tuple(free)
    bad = [f for f in free if f not in PARAM_NAMES]
    if bad:
        raise PerfseerError(f"unknown roofline parameter(s) {bad}", f"choose from {', '.join(PARAM_NAMES)}")
    y = _positive_times(graphs, y)
    if not free:
        return init
    costs, th0 = _Costs(graphs, steps), np.log(init.as_array())
    idx = [PARAM_NAMES.index(f) for f in free]
    lo = np.log([_BOUNDS[f][0] for f in free])
    hi = np.log([_BOUNDS[f][1] for f in free])
    start = np.clip(th0[idx], lo + 1e-9, hi - 1e-9)

    def full(p):
        th = th0.copy()
        th[idx] = p
        return RooflineParams(*np.exp(th))

    def res(p):
        return np.log(np.maximum(costs.terms(full(p))[:, 4], 1e-30)) - np.log(y)

    # max() is flat where every node sits on one side of the ridge point: start from a grid of
    # rates around init (x 1/30, 1, 30 for P and W when free) and keep the best fit
    starts = [start]
    rates = [i for i, f in enumerate(free) if f in ("P", "W")]
    if rates:
        steps = np.log([1 / 30, 1.0, 30.0])
        starts = []
        for combo in np.array(np.meshgrid(*[steps] * len(rates))).T.reshape(-1, len(rates)):
            s = start.copy()
            s[rates] += combo
            starts.append(np.clip(s, lo + 1e-9, hi - 1e-9))
    best = min((least_squares(res, s0, bounds=(lo, hi), loss="soft_l1", f_scale=0.3) for s0 in starts),
               key=lambda r: r.cost)
    return full(best.x)


def group_start(graphs, shared: RooflineParams) -> np.ndarray:
    """``[G, 3]``: every operator group starts at the shared roofline: ``P``, ``W`` and ``c_1`` for a
    group whose training nodes mostly compute, ``W / a`` and ``c_2`` for one that mostly moves data.
    A group without training nodes starts as one that computes (until 2026-11-28 it started as a
    movement group, with the movement overhead ``c_2``, often ~0: a recurrent node, absent from
    every training family, then cost nothing but its FLOPs)."""

    costs = _Costs(graphs)
    G = len(OP_GROUP_NAMES)
    comp = np.bincount(costs.grp, weights=costs.comp.astype(float), minlength=G)
    total = np.bincount(costs.grp, minlength=G)
    moves = comp < 0.5 * total
    theta = np.empty((G, 3))
    theta[:, 0] = shared.P
    theta[:, 1] = np.where(moves, shared.W / shared.a, shared.W)
    theta[:, 2] = np.where(moves, shared.c2, shared.c1)
    return theta


def fit_group_params(graphs, y, start: np.ndarray, penalty: float = 0.3, steps: bool = False) -> np.ndarray:
    """Each operator group's ``P``, ``W`` and ``c`` (``[G, 3]``) fitted to ``log y`` by robust least
    squares (soft-L1, scale 0.3), with ``penalty * |log theta - log start|^2`` pulling every group
    towards ``start`` (:func:`group_start`): a group with few or no training nodes stays at the
    shared roofline, one with many moves as far as its nodes' times say.  Per-group rates and
    overheads are what a single roofline misses on a CPU, where a depthwise convolution, a GEMM
    and a LayerNorm reach very different shares of the peak."""
    from scipy.optimize import least_squares  # deferred: heavy, loaded on first use

    y = _positive_times(graphs, y)
    costs = _Costs(graphs, steps)
    shape = start.shape
    th0 = np.log(start).reshape(-1)
    lo = np.log(np.tile([_BOUNDS["P"][0], _BOUNDS["W"][0], _BOUNDS["c1"][0]], shape[0]))
    hi = np.log(np.tile([_BOUNDS["P"][1], _BOUNDS["W"][1], _BOUNDS["c1"][1]], shape[0]))
    root = math.sqrt(penalty)

    def res(p):
        b = costs.group_terms(np.exp(p).reshape(shape))[:, 4]
        return np.concatenate([np.log(np.maximum(b, 1e-30)) - np.log(y), root * (p - th0)])

    r = least_squares(res, np.clip(th0, lo + 1e-9, hi - 1e-9), bounds=(lo, hi), loss="soft_l1", f_scale=0.3,
                      x_scale=1.0)
    return np.exp(r.x).reshape(shape)


def log_baseline_torch(F, B, batch, num_graphs: int, params, launches=None):
    """``log b(g)`` ``[G]`` from raw node FLOPs ``F`` and bytes ``B`` ``[N]`` (float64 tensors),
    ``batch`` ``[N]`` and ``params`` ``[5]`` (``P, W, a, c1, c2``): what :func:`baseline_ms`
    computes, in torch, for a model's forward; ``launches`` ``[N]`` (:func:`node_launches`) for
    ``steps``."""
    import torch  # deferred: heavy, loaded on first use

    P, W, a, c1, c2 = params.unbind()
    comp = F > 0
    L = 1.0 if launches is None else launches
    t = torch.where(comp, torch.maximum(F / P, B / W) + c1 * L, a * B / W + c2)
    total = torch.zeros(num_graphs, dtype=t.dtype, device=t.device).index_add_(0, batch, t)
    return torch.log(total.clamp_min(1e-30))


def log_group_baseline_torch(F, B, grp, batch, num_graphs: int, theta, launches=None):
    """``log b(g)`` ``[G]`` of the per-group roofline (:meth:`_Costs.group_terms`) in torch: ``grp``
    ``[N]`` every node's operator group, ``theta`` ``[groups, 3]`` (``P``, ``W``, ``c`` per group),
    ``launches`` ``[N]`` as in :func:`log_baseline_torch`."""
    import torch  # deferred: heavy, loaded on first use

    P, W, c = theta[grp, 0], theta[grp, 1], theta[grp, 2]
    L = 1.0 if launches is None else launches
    t = torch.where(F > 0, torch.maximum(F / P, B / W), B / W) + c * L
    total = torch.zeros(num_graphs, dtype=t.dtype, device=t.device).index_add_(0, batch, t)
    return torch.log(total.clamp_min(1e-30))


# -- the baseline estimator ------------------------------------------------------------------------

FITS = {"none": (), "overheads": ("c1", "c2"), "all": PARAM_NAMES, "groups": ()}
RESIDUALS = ("none", "ridge", "gbm")


@dataclass
class RooflineConfig(EstimatorConfig):
    """Hyper-parameters of :class:`Roofline`."""

    device: str = ""  # registry name for P and W (e.g. rtx3090, i9-10940x); "" starts from generic rates, fit='all'
    precision: str = "fp32"  # which peak of the spec (fp16 for AMP)
    fit: str = "overheads"  # parameters fitted on the training graphs: none, overheads (c1, c2), all five, or
    # groups (P, W and an overhead per operator group, pulled towards the shared roofline: fit_group_params)
    group_penalties: str = "0.03,0.3,3"  # fit=groups: the pull towards the shared roofline; the validation rows choose
    recurrent_steps: bool = False  # a recurrent node pays its overhead per time step and direction (node_launches)
    residual: str = "none"  # model of log y - log b: none (a constant), ridge or gbm, on u, log b and its terms
    ridge_alphas: str = "0.001,0.01,0.1,1,10,100,1000"  # ridge penalties; the validation rows choose (else 1)
    n_estimators: int = 500  # the gbm residual: boosting rounds (early-stopped on validation), as the gbm
    learning_rate: float = 0.05
    num_leaves: int = 31
    min_child_samples: int = 5
    early_stopping_rounds: int = 50
    seed: int = 0
    num_threads: int = 1
    target_transform: str = "log"  # log only: b(g) is a time

    def check(self) -> None:
        if self.fit not in FITS:
            raise PerfseerError(f"roofline fit {self.fit!r}", f"use one of {', '.join(FITS)}")
        if self.residual not in RESIDUALS:
            raise PerfseerError(f"roofline residual {self.residual!r}", f"use one of {', '.join(RESIDUALS)}")
        if self.target_transform != "log":
            raise PerfseerError("the roofline baseline models log y", "leave target_transform='log'")
        if not self.device and self.fit not in ("all", "groups"):
            raise PerfseerError("a roofline without a device needs its rates fitted",
                                "set device (a name from 'perfseer devices') or fit='all'")


class Roofline(GraphEstimator):
    """``log y = log b(g) + r(g)``: the roofline reference time and a learned residual ``r``
    (a constant, a ridge or a LightGBM on ``[signed_log1p(u), log b, log terms]``).

    Attributes (after ``fit``): ``params_`` (:class:`RooflineParams`), ``shift_`` (the constant
    residual), ``ridge_`` (``mean``, ``std``, ``w``) or ``booster_`` per residual kind.
    """

    name = "roofline"
    config_class = RooflineConfig

    def fit(self, graphs, y, eval_set=None):
        """Fit; ``eval_set=(graphs, y)`` picks the ridge penalty and early-stops the gbm."""
        return super().fit(graphs, y, eval_set=eval_set)

    def _terms(self, graphs) -> np.ndarray:
        costs = _Costs(graphs, self.config.recurrent_steps)
        return costs.terms(self.params_) if self.groups_ is None else costs.group_terms(self.groups_)

    def _features(self, graphs) -> tuple[np.ndarray, np.ndarray]:
        T = self._terms(graphs)
        logb = np.log(np.maximum(T[:, 4], 1e-30))
        X = np.column_stack([signed_log1p(global_features(graphs)), logb, np.log(T[:, 0] + 1e-9),
                             np.log(T[:, 1] + 1e-9), np.log1p(T[:, 2]), np.log1p(T[:, 3])])
        return X, logb

    def _fit(self, graphs, z: np.ndarray, eval_set=None) -> None:
        c = self.config
        c.check()
        if z.shape[1] != 1:
            raise PerfseerError("the roofline baseline predicts one time", "fit it on latency_ms alone")
        init = spec_params(c.device, c.precision) if c.device else RooflineParams(*GENERIC)
        y = np.exp(z[:, 0])
        steps = c.recurrent_steps
        if c.fit != "groups":
            self.params_, self.groups_ = fit_params(graphs, y, init, FITS[c.fit], steps), None
            self._fit_residual(graphs, z, eval_set)
            return
        # per-group rates and overheads from the shared roofline (its overheads fitted; all five
        # without a spec); the pull towards it chosen on the validation rows
        self.params_ = fit_params(graphs, y, init, FITS["overheads" if c.device else "all"], steps)
        start = group_start(graphs, self.params_)
        penalties = [float(a) for a in c.group_penalties.split(",")] if eval_set is not None else [1.0]
        best = None
        for lam in penalties:
            self.groups_ = fit_group_params(graphs, y, start, lam, steps)
            err = self._fit_residual(graphs, z, eval_set)
            if best is None or err < best[0]:
                best = (err, self.groups_, lam)
        self.groups_, self.group_penalty_ = best[1], best[2]
        self._fit_residual(graphs, z, eval_set)

    def _fit_residual(self, graphs, z: np.ndarray, eval_set=None) -> float:
        """Fit the residual model on top of the fitted roofline; its validation MAPE (0 without
        ``eval_set``)."""
        c = self.config
        X, logb = self._features(graphs)
        r = z[:, 0] - logb
        self.shift_ = float(np.median(r))
        self.ridge_ = self.booster_ = None
        Xv = rv = None
        if eval_set is not None:
            gv, yv = eval_set
            Xv, lbv = self._features(gv)
            rv = np.log(np.asarray(yv, dtype=np.float64).reshape(-1)) - lbv
        if c.residual == "ridge":
            mu, sd = X.mean(0), X.std(0)
            sd[~(sd > 1e-12)] = 1.0
            A = np.column_stack([np.ones(len(X)), (X - mu) / sd])
            best = None
            alphas = [float(a) for a in c.ridge_alphas.split(",")] if Xv is not None else [1.0]
            for alpha in alphas:
                R = alpha * np.eye(A.shape[1])
                R[0, 0] = 0.0
                w = np.linalg.solve(A.T @ A + R, A.T @ r)
                err = 0.0 if Xv is None else float(np.mean(np.abs(np.exp(np.column_stack(
                    [np.ones(len(Xv)), (Xv - mu) / sd]) @ w - rv) - 1)))
                if best is None or err < best[0]:
                    best = (err, w, alpha)
            self.ridge_ = {"mean": mu, "std": sd, "w": best[1], "alpha": best[2]}
            return best[0]
        if c.residual == "gbm":
            lgb = _lightgbm()
            params = {"objective": "regression", "learning_rate": c.learning_rate, "num_leaves": c.num_leaves,
                      "min_data_in_leaf": c.min_child_samples, "seed": c.seed, "num_threads": c.num_threads,
                      "deterministic": True, "force_col_wise": True, "verbosity": -1, "min_data_in_bin": 1}
            train = lgb.Dataset(X, r, free_raw_data=False)
            kw = {}
            if Xv is not None:
                kw = {"valid_sets": [lgb.Dataset(Xv, rv, reference=train)],
                      "callbacks": [lgb.early_stopping(c.early_stopping_rounds, verbose=False)]}
            b = lgb.train(params, train, num_boost_round=c.n_estimators, **kw)
            self.booster_ = (b, int(b.best_iteration if b.best_iteration > 0 else b.current_iteration()))
            if Xv is None:
                return 0.0
            return float(np.mean(np.abs(np.exp(b.predict(Xv, num_iteration=self.booster_[1]) - rv) - 1)))
        return 0.0 if rv is None else float(np.mean(np.abs(np.exp(self.shift_ - rv) - 1)))

    def _predict(self, graphs) -> np.ndarray:
        X, logb = self._features(graphs)
        if self.ridge_ is not None:
            A = np.column_stack([np.ones(len(X)), (X - self.ridge_["mean"]) / self.ridge_["std"]])
            return (logb + A @ self.ridge_["w"])[:, None]
        if self.booster_ is not None:
            b, it = self.booster_
            return (logb + b.predict(X, num_iteration=it))[:, None]
        return (logb + self.shift_)[:, None]

    def _state(self) -> dict:
        st = {"params": floats(self.params_.as_array()), "shift": self.shift_}
        if self.groups_ is not None:
            st["groups"] = [floats(row) for row in self.groups_]
        if self.ridge_ is not None:
            st["ridge"] = {k: (floats(v) if isinstance(v, np.ndarray) else v) for k, v in self.ridge_.items()}
        if self.booster_ is not None:
            st["booster"] = self.booster_[0].model_to_string(num_iteration=self.booster_[1])
        return st

    def _load_state(self, state: dict) -> None:
        self.params_ = RooflineParams.from_array(state["params"])
        self.shift_ = float(state["shift"])
        self.groups_ = np.asarray(state["groups"], dtype=np.float64) if "groups" in state else None
        self.ridge_ = self.booster_ = None
        if "ridge" in state:
            self.ridge_ = {k: (np.asarray(v, dtype=np.float64) if isinstance(v, list) else v)
                           for k, v in state["ridge"].items()}
        if "booster" in state:
            b = _lightgbm().Booster(model_str=state["booster"])
            self.booster_ = (b, b.current_iteration())
