"""Predictors by name: ``MODELS[name] = (ConfigClass, ModelClass)``.

Neural models are ``torch.nn.Module`` classes built as ``ModelClass(ConfigClass(...))``.
Non-neural baselines (``additive``, ``gbm``, ``flops``) register here too, with :func:`register`
in the section marked below; :func:`is_neural` tells the two kinds apart.
"""

from __future__ import annotations

import dataclasses
import json

from torch import nn

from perfseer.errors import PerfseerError
from perfseer.models.base import ModelConfig
from perfseer.models.gnn import GAT, GCN, GIN, GATConfig, GCNConfig, GINConfig
from perfseer.models.mlp import MLPNode, MLPNodeConfig
from perfseer.models.pmgns import PMGNS, PMGNSConfig
from perfseer.models.seernet import SeerNet, SeerNetConfig, SeerNetMulti, SeerNetMultiConfig

MODELS: dict[str, tuple[type, type]] = {}


def register(name: str, config_class: type, model_class: type, *, replace: bool = False) -> None:
    """Make ``model_class`` (built from a ``config_class`` instance) available as ``name``.

    ``config_class`` must provide ``to_dict()`` and a ``from_dict()`` classmethod.  Registering a
    taken name raises unless ``replace``.
    """
    if name in MODELS and not replace and MODELS[name] != (config_class, model_class):
        raise PerfseerError(f"a model named {name!r} is already registered ({MODELS[name][1].__name__})",
                            "pick another name, or pass replace=True")
    for attr in ("to_dict", "from_dict"):
        if not hasattr(config_class, attr):
            raise PerfseerError(f"{config_class.__name__} has no {attr}()", "give the config to_dict/from_dict")
    MODELS[name] = (config_class, model_class)


for _config, _model in ((SeerNetConfig, SeerNet), (SeerNetMultiConfig, SeerNetMulti), (MLPNodeConfig, MLPNode),
                        (PMGNSConfig, PMGNS), (GCNConfig, GCN), (GATConfig, GAT), (GINConfig, GIN)):
    register(_model.name, _config, _model)

# Non-neural baselines (fit/predict estimators, see models/estimator.py); lightgbm is imported only
# when a GBM is fitted or loaded.
from perfseer.models.additive import Additive, AdditiveConfig  # noqa: E402
from perfseer.models.flops_only import FlopsOnly, FlopsOnlyConfig  # noqa: E402
from perfseer.models.gbm import GBM, GBMConfig  # noqa: E402
from perfseer.models.roofline import Roofline, RooflineConfig  # noqa: E402

for _config, _model in ((AdditiveConfig, Additive), (GBMConfig, GBM), (FlopsOnlyConfig, FlopsOnly),
                        (RooflineConfig, Roofline)):
    register(_model.name, _config, _model)



def _lookup(name: str) -> tuple[type, type]:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise PerfseerError(f"unknown model {name!r}", f"choose one of {', '.join(sorted(MODELS))}") from None


def is_neural(name: str) -> bool:
    """Whether ``name`` is a ``torch.nn.Module`` model (trained by gradient descent)."""
    return issubclass(_lookup(name)[1], nn.Module)


def neural_models() -> list[str]:
    """Names of the registered neural models, sorted."""
    return sorted(n for n in MODELS if is_neural(n))


def config_class(name: str) -> type:
    """The config dataclass of model ``name``."""
    return _lookup(name)[0]


def build_model(name: str, **overrides):
    """Build model ``name`` from its default config with ``overrides`` applied.

    Example::

        model = build_model("seernet", num_targets=2, gnpb=False)

    Raises:
        PerfseerError: unknown name (the message lists the choices) or a bad config field.
    """
    cfg_cls, model_cls = _lookup(name)
    return model_cls(cfg_cls.from_dict(overrides) if issubclass(cfg_cls, ModelConfig) else cfg_cls(**overrides))


def build_from_dict(name: str, cfg_dict: dict):
    """Build model ``name`` from a config dict written by its ``config.to_dict()`` (a checkpoint card)."""
    cfg_cls, model_cls = _lookup(name)
    return model_cls(cfg_cls.from_dict(cfg_dict))


def config_fields(name: str) -> set[str]:
    """The config field names of model ``name`` (empty for an unknown name)."""
    return {f.name for f in dataclasses.fields(MODELS[name][0])} if name in MODELS else set()


def parse_override(item: str) -> tuple[str, object]:
    """``"FIELD=VALUE"`` to ``(field, value)``; the value is read as JSON (``0.1``, ``true``,
    ``16``), else kept as text (``relu``).

    Raises:
        PerfseerError: no ``=`` or no field name.
    """
    name, sep, text = item.partition("=")
    if not sep or not name.strip():
        raise PerfseerError(f"config setting {item!r} is not FIELD=VALUE", "write e.g. dropout=0.1 or head_globals=true")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    return name.strip(), value


def parse_overrides(name: str, items) -> dict:
    """``FIELD=VALUE`` strings to config overrides of model ``name``.

    Example::

        parse_overrides("seernet", ["head_globals=true", "dropout=0.1"])  # {"head_globals": True, "dropout": 0.1}

    Raises:
        PerfseerError: a malformed item, or a field model ``name`` does not have (the message
        lists its fields).
    """
    if not items:
        return {}
    _lookup(name)  # an unknown model: its own clear error
    fields = config_fields(name)
    out = dict(parse_override(i) for i in items)
    unknown = sorted(set(out) - fields)
    if unknown:
        raise PerfseerError(f"{name} has no config field(s) {', '.join(unknown)}", f"its fields: {', '.join(sorted(fields))}")
    return out
