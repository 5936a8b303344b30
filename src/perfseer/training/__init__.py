"""Deprecated: the fitting code moved to :mod:`perfseer.fit` (the scalers to
:mod:`perfseer.runtime.scaling`, the network wrapper to :mod:`perfseer.runtime.net`)."""

from perfseer._deprecated import forward

__getattr__ = forward(__name__, {
    "Selection": "perfseer.fit.data", "select": "perfseer.fit.data",
    "evaluate": "perfseer.fit.metrics", "evaluate_targets": "perfseer.fit.metrics",
    "FittedMethod": "perfseer.fit.trainer", "evaluate_method": "perfseer.fit.methods", "train_method": "perfseer.fit.methods",
    "FeatureScaler": "perfseer.runtime.scaling", "TargetScaler": "perfseer.runtime.scaling",
    "NeuralPredictor": "perfseer.runtime.net", "TrainConfig": "perfseer.fit.trainer", "TrainResult": "perfseer.fit.trainer",
    "train": "perfseer.fit.trainer",
}, modules={
    "calibrate": "perfseer.fit.calibrate", "data": "perfseer.fit.data", "metrics": "perfseer.fit.metrics",
    "pcgrad": "perfseer.fit.pcgrad", "pretrain": "perfseer.fit.pretrain", "run": "perfseer.fit.methods",
    "scaling": "perfseer.runtime.scaling", "trainer": "perfseer.fit.trainer",
})
