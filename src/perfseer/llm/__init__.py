"""LLM inference: prefill, decode, KV cache and serving throughput on any registered GPU.

``perfseer.llm(model, device=..., prompt_len=..., output_len=..., batch=...)`` answers one batch
(:func:`perfseer.llm.predict.llm`); :func:`perfseer.llm.serving.simulate` a stream of requests
under vLLM-style continuous batching.  The pieces, one idea each:

- :mod:`~perfseer.llm.config`: model shapes (bundled facts with sources, or a local config.json);
- :mod:`~perfseer.llm.precision`: weights / activations / KV-cache formats;
- :mod:`~perfseer.llm.cost`: the operators of a step with their FLOPs and bytes;
- :mod:`~perfseer.llm.timing`: operator time from the GPU's spec sheet and fitted constants;
- :mod:`~perfseer.llm.predict`: a batch's TTFT, TPOT, KV capacity, memory;
- :mod:`~perfseer.llm.serving`: the continuous-batching simulator.

See ``docs/guide/llm.md``.
"""

from __future__ import annotations

import sys
import types


class _CallableModule(types.ModuleType):
    """Lets ``perfseer.llm(...)`` call :func:`perfseer.llm.predict.llm` while the submodules stay
    importable (as ``perfseer.memory`` does)."""

    def __call__(self, *args, **kwargs):
        from perfseer.llm.predict import llm

        return llm(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


def __getattr__(name):
    if name in ("llm", "LLMEstimate", "Engine", "LLMInputError"):
        from perfseer.llm import predict

        return getattr(predict, name)
    if name in ("simulate", "ServingResult"):
        from perfseer.llm import serving

        return getattr(serving, name)
    if name in ("load_config", "list_models", "ModelConfig"):
        from perfseer.llm import config

        return getattr(config, name)
    raise AttributeError(name)
