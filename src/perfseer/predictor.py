"""Deprecated: :mod:`perfseer.runtime.predictor` (loading and answering) and
:mod:`perfseer.fit.recipe` (training).  Use ``perfseer.load_predictor`` / ``perfseer.predict``."""

from perfseer._deprecated import forward

_RUNTIME = "perfseer.runtime.predictor"
__getattr__ = forward(__name__, {
    **{n: _RUNTIME for n in ("Predictor", "PredictorError", "Target", "UnseenOperatorWarning", "load_predictor",
                             "list_predictors", "slug", "card_weight_work", "BUNDLED", "PREDICTOR_CARD", "UNITS")},
    "train_predictor": "perfseer.fit.recipe", "kfold_of": "perfseer.fit.recipe",
    "EstimatorNet": "perfseer.runtime.net",
})
