"""One way to train any method, neural or not, on the same split: what benchmarks call.

:func:`train_method` takes a method name — a neural model of :mod:`perfseer.models.registry`
(``seernet``, ``seernet-multi``, ``mlp-node``, ``pmgns``, ``gcn``, ``gat``, ``gin``) or a baseline
of :data:`BASELINES` (``additive``, ``gbm``, ``flops``) — and the train / val examples of
:func:`perfseer.fit.data.select`, and returns a :class:`FittedMethod` whose ``predict``
gives ``[N, T]`` metrics in their units for either kind; :func:`evaluate_method` scores it with
:mod:`perfseer.fit.metrics`.

- neural models are built with ``num_targets = T`` after ``torch.manual_seed(train_config.seed)``
  and trained by :func:`perfseer.fit.trainer.train` (validation picks the epoch);
- baselines are fitted on the training examples (``gbm`` also early-stops on the validation
  examples; the others do not use them).

Example::

    sel = select("runs-dataset", "latency_ms", devices="rtx3090/amp", phase="infer")
    for name in ("flops", "gbm", "additive", "seernet"):
        fitted = train_method(name, sel.train, sel.val, targets=sel.targets,
                              train_config=TrainConfig(max_epochs=50, progress=False))
        print(name, evaluate_method(fitted, sel.test)["latency_ms"]["mape"])
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from perfseer.errors import PerfseerError
from perfseer.fit.blend import train_blend
from perfseer.fit.data import targets_of
from perfseer.fit.metrics import evaluate_targets
from perfseer.fit.pretrain import init_from_pretrained, pretrained_config
from perfseer.fit.trainer import FittedMethod, TrainConfig, train
from perfseer.models.additive import Additive
from perfseer.models.flops_only import FlopsOnly
from perfseer.models.gbm import GBM
from perfseer.models.registry import MODELS, build_model, neural_models
from perfseer.models.roofline import Roofline


def _baselines() -> dict[str, type]:
    return {"additive": Additive, "gbm": GBM, "flops": FlopsOnly, "roofline": Roofline}


BASELINES = ("additive", "gbm", "flops", "roofline")
ALIASES = {"flops-only": "flops", "flops_only": "flops"}


def method_names() -> list[str]:
    """Every method :func:`train_method` knows: baselines, then the registry's neural models."""

    return list(BASELINES) + [n for n in neural_models() if n not in BASELINES]


def train_method(name: str, train_set: Sequence, val_set: Sequence, config: dict | None = None, *,
                 train_config: TrainConfig | None = None, targets: Sequence[str] | None = None,
                 test_set: Sequence | None = None, pretrained: str | None = None) -> FittedMethod:
    """Train method ``name`` on ``train_set`` (validation on ``val_set``).

    Args:
        name: a baseline (``additive``, ``gbm``, ``flops``; ``flops-only`` is an alias) or a
            registered neural model.
        train_set, val_set: ``Data`` lists with ``y`` ``[1, T]`` (:func:`perfseer.fit.data.select`).
        config: overrides of the model's or baseline's config fields, e.g. ``{"hidden_dim": 64}``
            (``num_targets`` is set from the data).
        train_config: how to train a neural model (default :class:`TrainConfig`); ignored by baselines.
        targets: target names (default ``target0, ...``).
        test_set: passed to the trainer so that its result carries test metrics (neural only).
        pretrained: a pre-trained encoder card (:mod:`perfseer.fit.pretrain`): SeerNet's trunk
            starts from it, with its feature scaling; its config fills the fields ``config`` leaves out.

    Raises:
        PerfseerError: an unknown method (the message lists them), empty or mismatched data.
    """
    name = ALIASES.get(name, name)
    config = dict(config or {})
    if len(train_set) == 0:
        raise PerfseerError(f"no training examples for {name}", "check the selection and split")
    y_train = targets_of(train_set)
    T = y_train.shape[1]
    targets = list(targets) if targets is not None else [f"target{i}" for i in range(T)]
    if len(targets) != T:
        raise PerfseerError(f"{len(targets)} target names for {T} target columns", "pass one name per column of y")
    start = time.perf_counter()
    if name in BASELINES:
        est = _baselines()[name](**config)
        kwargs = {}
        if name in ("gbm", "roofline") and len(val_set):
            kwargs["eval_set"] = (val_set, targets_of(val_set))
        est.fit(train_set, y_train, **kwargs)
        return FittedMethod(name, targets, est, time.perf_counter() - start, None, est.config.to_dict())

    import torch  # deferred: heavy, loaded on first use

    if name not in MODELS:
        raise PerfseerError(f"unknown method {name!r}", f"choose one of {', '.join(method_names())}")
    train_config = train_config or TrainConfig()
    if name == "blend":  # members trained one by one, weights fitted on validation
        if pretrained is not None:
            raise PerfseerError("a pre-trained trunk needs seernet or seernet-multi, not blend",
                                "leave --pretrained out")
        return train_blend(train_set, val_set, config | {"num_targets": T}, train_config, targets, test_set,
                           train_member=train_method)
    if "num_targets" in config and config["num_targets"] != T:
        raise PerfseerError(f"config sets num_targets={config['num_targets']} but the data has {T} targets",
                            "leave num_targets out: it is set from the data")
    config["num_targets"] = T
    fs = None
    if pretrained is not None:
        if name not in ("seernet", "seernet-multi"):
            raise PerfseerError(f"a pre-trained trunk needs seernet or seernet-multi, not {name}",
                                "pass --model seernet, or leave --pretrained out")
        config = {**pretrained_config(pretrained), **config}
    torch.manual_seed(train_config.seed)
    model = build_model(name, **config)
    if pretrained is not None:
        fs = init_from_pretrained(model, pretrained)
    result = train(model, train_set, val_set, train_config, targets=targets, test_set=test_set, feature_scaler=fs)
    cfg = model.config.to_dict() if hasattr(getattr(model, "config", None), "to_dict") else config
    return FittedMethod(name, targets, result.predictor, time.perf_counter() - start, result, cfg)


def evaluate_method(fitted: FittedMethod, graphs: Sequence) -> dict[str, dict]:
    """``{target: metrics}`` of ``fitted`` on ``graphs`` (their ``y``), in the targets' units."""
    if len(graphs) == 0:
        raise PerfseerError("no graphs to evaluate on", "check the split")
    return evaluate_targets(targets_of(graphs), fitted.predict(graphs), fitted.targets)
