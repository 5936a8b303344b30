"""perfseer: predict deep-learning model performance from the computational graph."""

__version__ = "0.1.0"

from perfseer.api import extract  # noqa: E402
from perfseer.errors import PerfseerError  # noqa: E402
from perfseer.features.perfgraph import PerfGraph  # noqa: E402
from perfseer import memory  # noqa: E402  (callable: perfseer.memory(model, batch=...))
from perfseer.predictor import Predictor, list_predictors, load_predictor  # noqa: E402

__all__ = ["extract", "memory", "PerfGraph", "PerfseerError", "Predictor", "load_predictor", "list_predictors", "__version__"]
