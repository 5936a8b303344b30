"""The front door: the public functions that answer a user's questions.  The command line and the
service are thin callers of these.

- :func:`extract`: a model -> its PerfGraph (parameters, MACs, FLOPs, memory traffic);
- :func:`predict`: a model's step time on devices or with predictors, routed to the best basis;
- :func:`load_predictor` / :func:`list_predictors`: the predictor cards;
- ``perfseer.memory(...)``: peak GPU memory (:mod:`perfseer.memory`).
"""

from __future__ import annotations

from perfseer.features.extract import extract
from perfseer.runtime import route as _route
from perfseer.runtime.predictor import list_predictors, load_predictor

__all__ = ["extract", "list_predictors", "load_predictor", "predict"]


def predict(model, *, memory: bool = False, checkpoint: bool = False, **kwargs) -> list[dict]:
    # the signature and docstring are route.predict's with memory and checkpoint (set below)
    rows = _route.predict(model, **kwargs)
    if not memory and not checkpoint:
        return rows
    from perfseer.memory.parallel import with_memory  # deferred: loads torch

    if not memory:
        from perfseer.errors import PerfseerError

        raise PerfseerError("checkpoint changes only the simulated memory", "add memory=True, or drop checkpoint")
    return with_memory(model, rows, checkpoint=checkpoint, **kwargs)


def _document() -> None:
    """``predict``'s signature and docstring: :func:`perfseer.runtime.route.predict`'s with ``memory``."""
    import inspect

    sig = inspect.signature(_route.predict)
    extra = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=False, annotation="bool")
             for n in ("memory", "checkpoint")]
    params = list(sig.parameters.values())
    predict.__signature__ = sig.replace(parameters=params[:-1] + extra + params[-1:])
    text = ("        memory: also the simulated memory (:mod:`perfseer.memory`): with several GPUs\n"
            "            ``memory_per_gpu_bytes`` and ``memory_fits`` on each row (one GPU's share of the\n"
            "            step, :func:`perfseer.memory` with ``gpus``); on one GPU a ``memory_sim`` row (MiB)\n"
            "            per batch size, GPU and phase.  checkpoint: with several GPUs, activation\n"
            "            checkpointing for that memory.\n")
    doc = _route.predict.__doc__ or ""
    anchor = "        cache: "
    predict.__doc__ = doc.replace(anchor, text + anchor, 1) if anchor in doc else doc + "\n" + text


_document()
