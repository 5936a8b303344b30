"""The front door: the public functions that answer a user's questions.  The command line and the
service are thin callers of these.

- :func:`extract`: a model -> its PerfGraph (parameters, MACs, FLOPs, memory traffic);
- :func:`predict`: a model's step time on devices or with predictors, routed to the best basis;
- :func:`load_predictor` / :func:`list_predictors`: the predictor cards;
- ``perfseer.memory(...)``: peak GPU memory (:mod:`perfseer.memory`).
"""

from __future__ import annotations

from perfseer.features.extract import extract
from perfseer.runtime.predictor import list_predictors, load_predictor
from perfseer.runtime.route import predict

__all__ = ["extract", "list_predictors", "load_predictor", "predict"]
