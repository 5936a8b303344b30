"""FLOPs-only: the honest one-feature baseline, ``log y = a + b log FLOPs``.

The first family of predictors in PerfSeer §2 (and the roofline intuition) reads a model by its
FLOPs alone.  This baseline is that and nothing else: ordinary least squares of the log target on
the log of the graph's total FLOPs (``u[flops_total]``, which already scales with the batch size),

    log y = a + b * log(max(FLOPs, 1))          (one (a, b) per target)

i.e. a power law ``y = e^a * FLOPs^b``.  It knows nothing of memory traffic, parallelism or the
operators, so any predictor worth its parameters must beat it.

Example::

    est = FlopsOnly().fit(train_graphs, latency_ms)
    est.coef_       # [[a], [b]]: intercept and exponent per target
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfseer.features.schema import GLOBAL_FEATURES
from perfseer.models.estimator import EstimatorConfig, GraphEstimator, floats, global_features

FLOPS_COLUMN = GLOBAL_FEATURES.index("flops_total")


@dataclass
class FlopsOnlyConfig(EstimatorConfig):
    """Hyper-parameters of :class:`FlopsOnly`: only the target transform."""

    target_transform: str = "log"  # "log", or "log1p" for targets that can be 0 (utilisation)


def _design(graphs) -> np.ndarray:
    flops = global_features(graphs)[:, FLOPS_COLUMN]
    return np.stack([np.ones_like(flops), np.log(np.maximum(flops, 1.0))], axis=1)


class FlopsOnly(GraphEstimator):
    """Least squares of ``log y`` on ``[1, log FLOPs]``.

    Attributes (after ``fit``): ``coef_`` ``[2, T]``: intercept ``a`` and exponent ``b`` per target.
    """

    name = "flops"
    config_class = FlopsOnlyConfig

    def _fit(self, graphs, z: np.ndarray) -> None:
        # lstsq gives the minimum-norm solution when all graphs have the same FLOPs (b = 0 then
        # only if that is what minimises the norm; predictions are the mean either way)
        self.coef_ = np.linalg.lstsq(_design(graphs), z, rcond=None)[0]

    def _predict(self, graphs) -> np.ndarray:
        return _design(graphs) @ self.coef_

    def _state(self) -> dict:
        return {"coef": floats(self.coef_)}

    def _load_state(self, state: dict) -> None:
        self.coef_ = np.asarray(state["coef"], dtype=np.float64).reshape(2, self.n_targets_)
