"""LLM inference: prefill, decode, KV cache and serving throughput on any registered GPU
(``docs/guide/llm.md``; the serving simulator is :func:`perfseer.llm.serving.simulate`)."""

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
