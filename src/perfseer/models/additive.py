"""Additive per-operator model: the nn-Meter family of predictors (PerfSeer §2).

nn-Meter (Zhang et al., 2021) splits a model into kernels, predicts each kernel's latency with a
regressor of its kind (convolution, pooling, ...) and sums them.  It trains each regressor on
kernels profiled one by one; a graph dataset has no per-operator labels, only the total.  So
this baseline learns the per-operator models *through* the sum:

    s_n    = w_{op(n)} . f_n + b_{op(n)}          (a linear model per operator type, per target)
    y_hat  = sum over nodes n of exp(s_n)
    loss   = mean over graphs of (log y_hat - log y)^2

where ``f_n = standardise(sign(x_n) log1p(|x_n|))`` are the node's 31 features (hyper-parameters
and costs), ``op(n)`` its ``op_type`` and the standardisation is fitted on the training nodes.

Why this form:

- **exp of a linear model on log features** makes each operator's cost a power law of its costs,
  ``e^b * FLOPs^w1 * bytes^w2 ...``, the form operator latencies take between the memory- and
  compute-bound regimes; a softplus or a linear link on log features cannot express
  ``c * FLOPs`` for the FLOPs spanning six orders of magnitude of one dataset;
- ``log y_hat`` is a ``logsumexp`` of the node scores, computed stably however large they are;
- a linear model per operator (31 weights) rather than nn-Meter's random forests: it can be
  trained through the sum by gradient descent, and it is the smallest model that is still
  per-operator.  Unlike nn-Meter it ignores kernel fusion: every ONNX node counts.

Operator types never seen in training get the mean of the learned operators' weights.

Example::

    est = Additive(epochs=50).fit(train_graphs, latency_ms)
    est.operator_weights_["Conv"]   # {"w": [31][T], "b": [T]}
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from perfseer.errors import PerfseerError
from perfseer.features.pyg import OP_VOCAB
from perfseer.features.schema import NODE_FEATURES
from perfseer.models.estimator import EstimatorConfig, GraphEstimator, floats, signed_log1p


@dataclass
class AdditiveConfig(EstimatorConfig):
    """Hyper-parameters of :class:`Additive` (chosen on synthetic data; Adam on the log loss)."""

    epochs: int = 100  # passes over the training graphs
    batch_size: int = 64  # graphs per Adam step
    lr: float = 0.05  # Adam's learning rate (a linear model tolerates a large one)
    weight_decay: float = 1e-4  # L2 on the weights w (not the biases): rare operators stay near the mean
    seed: int = 0  # seeds the order of the graphs in each epoch
    num_threads: int = 1  # torch CPU threads while fitting/predicting (0: leave torch's setting); small
    #                      per-operator matmuls gain nothing from threads and suffer on busy machines
    target_transform: str = "log"  # "log" (the sum of exp(s) is > 0); "log1p" for targets that can be 0


class Additive(GraphEstimator):
    """Sum over nodes of a per-operator power law, fitted through the graph totals.

    Attributes (after ``fit``): ``mean_``, ``std_`` ``[31]`` feature standardisation;
    ``W_`` ``[V, 31, T]`` and ``b_`` ``[V, T]`` per operator of :data:`OP_VOCAB`;
    ``default_w_``, ``default_b_``: the mean of the seen operators' weights, used for the others;
    ``seen_ops_``: the operator names present in training; ``loss_`` the last step's training loss.
    """

    name = "additive"
    config_class = AdditiveConfig

    def _features(self, graphs):
        import torch  # deferred: heavy, loaded on first use

        x = np.concatenate([np.asarray(g.x, dtype=np.float64).reshape(-1, len(NODE_FEATURES)) for g in graphs])
        op = np.concatenate([np.asarray(g.op_type, dtype=np.int64).reshape(-1) for g in graphs])
        counts = np.array([int(np.asarray(g.op_type).size) for g in graphs])
        if (counts == 0).any():
            raise PerfseerError(f"{int((counts == 0).sum())} graphs have no nodes", "the additive model needs nodes")
        if op.size and (op.min() < 0 or op.max() >= len(OP_VOCAB)):
            raise PerfseerError("op_type ids outside OP_VOCAB", "build graphs with perfseer.features.pyg")
        return signed_log1p(x), torch.from_numpy(op), counts

    @staticmethod
    def _graph_logsum(s, graph_index, num_graphs: int):
        """``log sum_n exp(s_n)`` per graph, for ``s`` [N, T]: a stable scatter-logsumexp."""
        import torch  # deferred: heavy, loaded on first use

        T = s.shape[1]
        idx = graph_index.unsqueeze(1).expand(-1, T)
        m = torch.full((num_graphs, T), -math.inf, dtype=s.dtype).scatter_reduce(0, idx, s, "amax", include_self=True)
        m = m.detach()
        total = torch.zeros((num_graphs, T), dtype=s.dtype).scatter_add(0, idx, torch.exp(s - m[graph_index]))
        return torch.log(total) + m

    def _scores(self, f, op, W, b):
        import torch  # deferred: heavy, loaded on first use

        return torch.einsum("nf,nft->nt", f, W[op]) + b[op]

    def _threads(self):
        import torch  # deferred: heavy, loaded on first use

        @contextlib.contextmanager
        def scope():
            before = torch.get_num_threads()
            if self.config.num_threads > 0:
                torch.set_num_threads(self.config.num_threads)
            try:
                yield
            finally:
                torch.set_num_threads(before)
        return scope()

    def _fit(self, graphs, z: np.ndarray) -> None:
        with self._threads():
            self._fit_torch(graphs, z)

    def _fit_torch(self, graphs, z: np.ndarray) -> None:
        import torch  # deferred: heavy, loaded on first use

        c = self.config
        x, op, counts = self._features(graphs)
        self.mean_ = x.mean(0)
        std = x.std(0)
        std[~(std > 1e-12)] = 1.0
        self.std_ = std
        f = torch.from_numpy((x - self.mean_) / self.std_)
        T = z.shape[1]
        V, F = len(OP_VOCAB), len(NODE_FEATURES)
        # start from "every node costs the same": exp(b) * mean nodes = the median target
        b0 = np.median(z, axis=0) - math.log(float(counts.mean()))
        W = torch.zeros((V, F, T), dtype=torch.float64, requires_grad=True)
        b = torch.tensor(np.tile(b0, (V, 1)), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([{"params": [W], "weight_decay": c.weight_decay}, {"params": [b], "weight_decay": 0.0}],
                               lr=c.lr)
        ptr = np.concatenate([[0], np.cumsum(counts)])
        zt = torch.from_numpy(z)
        gen = torch.Generator().manual_seed(c.seed)
        n = len(graphs)
        loss = torch.tensor(math.nan)
        for _ in range(c.epochs):
            for gids in torch.randperm(n, generator=gen).split(c.batch_size):
                g = gids.numpy()
                nodes = torch.from_numpy(np.concatenate([np.arange(ptr[i], ptr[i + 1]) for i in g]))
                gi = torch.from_numpy(np.repeat(np.arange(len(g)), counts[g]))
                s = self._scores(f[nodes], op[nodes], W, b)
                loss = ((self._graph_logsum(s, gi, len(g)) - zt[gids]) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        self.loss_ = float(loss.detach())
        seen = np.zeros(V, dtype=bool)
        seen[np.unique(op.numpy())] = True
        W_, b_ = W.detach().numpy().copy(), b.detach().numpy().copy()
        self.default_w_, self.default_b_ = W_[seen].mean(0), b_[seen].mean(0)
        W_[~seen], b_[~seen] = self.default_w_, self.default_b_
        self.W_, self.b_ = W_, b_
        self.seen_ops_ = [OP_VOCAB[i] for i in np.flatnonzero(seen)]

    def _predict(self, graphs) -> np.ndarray:
        with self._threads():
            return self._predict_torch(graphs)

    def _predict_torch(self, graphs) -> np.ndarray:
        import torch  # deferred: heavy, loaded on first use

        x, op, counts = self._features(graphs)
        f = torch.from_numpy((x - self.mean_) / self.std_)
        gi = torch.from_numpy(np.repeat(np.arange(len(graphs)), counts))
        with torch.no_grad():
            s = self._scores(f, op, torch.from_numpy(self.W_), torch.from_numpy(self.b_))
            return self._graph_logsum(s, gi, len(graphs)).numpy()

    @property
    def operator_weights_(self) -> dict:
        """``{op name: {"w": [31][T], "b": [T]}}`` for the operators seen in training."""
        if not hasattr(self, "W_"):
            self._check_fitted()
        return {name: {"w": floats(self.W_[OP_VOCAB.index(name)]), "b": floats(self.b_[OP_VOCAB.index(name)])}
                for name in self.seen_ops_}

    def _state(self) -> dict:
        # by operator name, so that a change of OP_VOCAB's order cannot swap operators
        default = {"w": floats(self.default_w_), "b": floats(self.default_b_)}
        return {"feature_mean": floats(self.mean_), "feature_std": floats(self.std_),
                "operators": self.operator_weights_, "default": default, "loss": self.loss_}

    def _load_state(self, state: dict) -> None:
        T, F = self.n_targets_, len(NODE_FEATURES)
        self.mean_ = np.asarray(state["feature_mean"], dtype=np.float64)
        self.std_ = np.asarray(state["feature_std"], dtype=np.float64)
        if self.mean_.shape != (F,):
            raise PerfseerError("the saved additive estimator has the wrong number of features", "refit the baseline")
        self.default_w_ = np.asarray(state["default"]["w"], dtype=np.float64).reshape(F, T)
        self.default_b_ = np.asarray(state["default"]["b"], dtype=np.float64).reshape(T)
        W = np.tile(self.default_w_[None], (len(OP_VOCAB), 1, 1))
        b = np.tile(self.default_b_[None], (len(OP_VOCAB), 1))
        seen = []
        for name, p in state["operators"].items():
            if name in OP_VOCAB:  # an operator this perfseer no longer names falls back to the default
                i = OP_VOCAB.index(name)
                W[i] = np.asarray(p["w"], dtype=np.float64).reshape(F, T)
                b[i] = np.asarray(p["b"], dtype=np.float64).reshape(T)
                seen.append(name)
        self.W_, self.b_, self.seen_ops_ = W, b, seen
        self.loss_ = float(state.get("loss", math.nan))
