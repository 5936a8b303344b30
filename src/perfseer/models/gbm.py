"""Global-feature gradient boosting: the Liquid / Horus family of predictors (PerfSeer §2).

Liquid (Gu et al., 2021) and Horus (Yeung et al., 2021) predict a model's GPU utilisation and
memory from whole-model features (batch size, FLOPs, parameters, ...) with tree ensembles.  This
baseline is that, on PerfSeer's 20 global features ``u`` (:data:`perfseer.features.schema.GLOBAL_FEATURES`):
a LightGBM regressor per target on ``sign(u) log1p(|u|)`` (trees do not need the log, but it keeps
the inputs readable and identical to what the networks see), predicting ``log y``.  It sees no
operator, no edge and no topology beyond the counts in ``u``.

Needs the optional ``lightgbm`` package: ``pip install 'perfseer[baselines]'``.  The fitted
boosters are stored as LightGBM's own text format (``Booster.model_to_string``), not pickled.

Example::

    est = GBM(n_estimators=300).fit(train_graphs, y_train, eval_set=(val_graphs, y_val))
    est.best_iterations_   # rounds kept per target (early stopping on eval_set)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from perfseer.errors import MissingDependencyError, PerfseerError
from perfseer.models.estimator import EstimatorConfig, GraphEstimator, global_features, op_group_features, signed_log1p


def _lightgbm():
    try:
        import lightgbm  # deferred: an optional extra
    except ImportError as e:
        raise MissingDependencyError("lightgbm", "baselines", "the gbm baseline") from e
    return lightgbm


@dataclass
class GBMConfig(EstimatorConfig):
    """Hyper-parameters of :class:`GBM` (LightGBM's names; defaults are LightGBM's unless noted)."""

    n_estimators: int = 500  # boosting rounds (LightGBM: 100; more, with a lower rate)
    learning_rate: float = 0.05  # shrinkage (LightGBM: 0.1; lower for smoother fits)
    num_leaves: int = 31  # leaves per tree
    min_child_samples: int = 5  # rows per leaf (LightGBM: 20; a few hundred architectures is small data)
    subsample: float = 1.0  # row fraction per tree (bagging off)
    colsample_bytree: float = 1.0  # feature fraction per tree
    reg_lambda: float = 0.0  # L2 on leaf values
    early_stopping_rounds: int = 50  # with an eval_set: stop after this many rounds without improvement
    seed: int = 0  # LightGBM's seed (with deterministic=True, fits are reproducible)
    num_threads: int = 1  # LightGBM threads (1: reproducible and polite on shared machines; 0 = all)
    target_transform: str = "log"  # "log", or "log1p" for targets that can be 0 (utilisation)
    # "global": the 20 global features; "global+ops": also the bag of operator costs (count, FLOPs and
    # memory access per operator group, estimator.op_group_features)
    features: str = "global"

    def __post_init__(self) -> None:
        if self.features not in ("global", "global+ops"):
            raise PerfseerError(f"GBMConfig.features is {self.features!r}", "use global or global+ops")


class GBM(GraphEstimator):
    """LightGBM on the log-scaled global features, one booster per target.

    Attributes (after ``fit``): ``boosters_`` (list of ``lightgbm.Booster``, one per target) and
    ``best_iterations_`` (rounds used for prediction per target).
    """

    name = "gbm"
    config_class = GBMConfig

    def _params(self) -> dict:
        c = self.config
        return {"objective": "regression", "learning_rate": c.learning_rate, "num_leaves": c.num_leaves,
                "min_data_in_leaf": c.min_child_samples, "bagging_fraction": c.subsample,
                "bagging_freq": 1 if c.subsample < 1 else 0, "feature_fraction": c.colsample_bytree,
                "lambda_l2": c.reg_lambda, "seed": c.seed, "num_threads": c.num_threads,
                "deterministic": True, "force_col_wise": True, "verbosity": -1,
                # tiny training sets: allow bins and leaves from few rows
                "min_data_in_bin": 1}

    def fit(self, graphs, y, eval_set=None):
        """Fit; ``eval_set=(graphs, y)`` enables early stopping on it (``early_stopping_rounds``)."""
        return super().fit(graphs, y, eval_set=eval_set)

    def _fit(self, graphs, z: np.ndarray, eval_set=None) -> None:
        lgb = _lightgbm()
        X = self._X(graphs)
        zv = Xv = None
        if eval_set is not None:
            gv, yv = eval_set
            yv2 = self._check_y(gv, yv)
            if yv2.shape[1] != z.shape[1]:
                raise PerfseerError(f"eval_set has {yv2.shape[1]} targets, training {z.shape[1]}", "pass the same targets")
            Xv, zv = self._X(gv), self._forward(yv2)
        self.boosters_, self.best_iterations_ = [], []
        for t in range(z.shape[1]):
            train = lgb.Dataset(X, z[:, t], free_raw_data=False)
            kwargs = {}
            if Xv is not None:
                kwargs = {"valid_sets": [lgb.Dataset(Xv, zv[:, t], reference=train)],
                          "callbacks": [lgb.early_stopping(self.config.early_stopping_rounds, verbose=False)]}
            booster = lgb.train(self._params(), train, num_boost_round=self.config.n_estimators, **kwargs)
            best = booster.best_iteration if booster.best_iteration > 0 else booster.current_iteration()
            self.boosters_.append(booster)
            self.best_iterations_.append(int(best))

    def _X(self, graphs) -> np.ndarray:
        X = global_features(graphs)
        if self.config.features == "global+ops":
            X = np.concatenate([X, op_group_features(graphs)], axis=1)
        return signed_log1p(X)

    def _predict(self, graphs) -> np.ndarray:
        X = self._X(graphs)
        return np.stack([b.predict(X, num_iteration=it) for b, it in zip(self.boosters_, self.best_iterations_)], axis=1)

    def _state(self) -> dict:
        return {"boosters": [b.model_to_string(num_iteration=it) for b, it in zip(self.boosters_, self.best_iterations_)],
                "best_iterations": list(self.best_iterations_)}

    def _load_state(self, state: dict) -> None:
        lgb = _lightgbm()
        self.boosters_ = [lgb.Booster(model_str=s) for s in state["boosters"]]
        self.best_iterations_ = [int(i) for i in state["best_iterations"]]
        if len(self.boosters_) != self.n_targets_:
            raise PerfseerError("the saved gbm estimator has the wrong number of boosters", "refit the baseline")
