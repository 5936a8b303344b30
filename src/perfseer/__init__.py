"""perfseer: predict deep-learning model performance from the computational graph.

The public names are imported on first use (PEP 562), so that ``import perfseer`` and the
command line start without loading torch: ``perfseer --help`` answers in a fraction of a second.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "extract": "perfseer.api",
    "predict": "perfseer.api",
    "compare": "perfseer.comparison",
    "PerfseerError": "perfseer.errors",
    "PerfGraph": "perfseer.features.perfgraph",
    "Predictor": "perfseer.runtime.predictor",
    "load_predictor": "perfseer.api",
    "list_predictors": "perfseer.api",
    "train_predictor": "perfseer.fit.recipe",
    "memory": None,  # the subpackage itself, callable: perfseer.memory(model, batch=...)
    "llm": None,  # the subpackage itself, callable: perfseer.llm(model, device=..., prompt_len=...)
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'perfseer' has no attribute {name!r}")
    module = _EXPORTS[name]
    value = importlib.import_module(f"perfseer.{name}") if module is None else getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
