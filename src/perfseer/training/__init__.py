"""Training and evaluating predictors: examples, scaling, the trainer, PCGrad, metrics.

- :mod:`~perfseer.training.data`: a dataset's rows of one device, phase and metric(s) -> examples
  per split (:func:`select`);
- :mod:`~perfseer.training.scaling`: log + standardise features and targets, fitted on train;
- :mod:`~perfseer.training.trainer`: PerfSeer's recipe (:func:`train`, :class:`TrainConfig`);
- :mod:`~perfseer.training.pcgrad`: projecting conflicting gradients for multi-task training;
- :mod:`~perfseer.training.metrics`: MAPE, RMSE, x % accuracy, rank correlations;
- :mod:`~perfseer.training.run`: train any method, neural or baseline, the same way.
"""

from perfseer.training.data import Selection, select
from perfseer.training.metrics import evaluate, evaluate_targets
from perfseer.training.run import FittedMethod, evaluate_method, train_method
from perfseer.training.scaling import FeatureScaler, TargetScaler
from perfseer.training.trainer import NeuralPredictor, TrainConfig, TrainResult, train

__all__ = [
    "FeatureScaler", "FittedMethod", "NeuralPredictor", "Selection", "TargetScaler", "TrainConfig", "TrainResult",
    "evaluate", "evaluate_method", "evaluate_targets", "select", "train", "train_method",
]
