"""Training a :class:`~perfseer.models.blend.Blend`: each member trained on its own with the same
data and recipe, then the weights (and, with ``fit_shift``, a constant log shift) fitted on the
validation rows; members can be reused warm from blend cards trained on the same rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from perfseer.atomic import atomic_write_text
from perfseer.errors import PerfseerError
from perfseer.fit.data import targets_of
from perfseer.fit.metrics import evaluate_targets
from perfseer.fit.trainer import FittedMethod, TrainConfig, TrainResult
from perfseer.models.blend import (Blend, BlendConfig, fit_log_shift, fit_tied_weights, fit_weights, member_groups,
                                   parse_seeds, split_members)
from perfseer.models.registry import config_class
from perfseer.runtime.net import NeuralPredictor
from perfseer.runtime.predictor import load_predictor
from perfseer.runtime.scaling import FeatureScaler, TargetScaler


def _member_key(name: str, config: dict, seed: int) -> str:
    """A member's identity: its name, its full config (normalised through its config class, so a field
    added since with its default compares equal) and its training seed."""

    full = config_class(name).from_dict(dict(config)).to_dict()
    return json.dumps([name, full, int(seed)], sort_keys=True)


def _warm_members(where: str, train_set, targets) -> dict:
    """``{member key: FittedMethod}`` of the members of the blend cards trained on ``train_set``:
    ``where`` is a blend card's .json, or a folder of them (e.g. a k-fold run's stages: the cards
    whose scalings match ``train_set``'s are those trained on these rows; the first card that has a
    member gives it).  Each member comes
    back as a :class:`~perfseer.runtime.net.NeuralPredictor` with the card's scalings
    (``train_result`` records 0 epochs run here; the card keeps its own history)."""

    path = Path(where)
    cards = sorted(path.glob("*.json")) if path.is_dir() else [path] if path.is_file() else []
    if not cards:
        raise PerfseerError(f"warm_from: no blend card at {path}", "point warm_from at a blend card's .json or a folder of them")
    ref_f = FeatureScaler().fit(train_set).to_dict()
    out = {}
    for card in cards:
        try:
            p = load_predictor(card)
        except PerfseerError:
            if path.is_dir():  # a folder may hold other JSON files besides cards
                continue
            raise
        model = getattr(p.net, "model", None) if p.net is not None else None
        if not isinstance(model, Blend):
            continue
        ts = p.net.target_scaler
        if list(ts.targets) != list(targets) or p.net.feature_scaler.to_dict() != ref_f or \
                ts.to_dict() != TargetScaler(ts.targets, ts.transforms).fit(targets_of(train_set)).to_dict():
            continue
        cfg = model.config
        specs = cfg.member_list()
        if not cfg.seeds:
            raise PerfseerError(f"warm_from: the blend card {card} does not record its members' seeds",
                                "reuse a blend trained with --set seeds=... (one per member), or drop warm_from")
        for (name, mcfg), seed, member in zip(specs, parse_seeds(cfg.seeds, len(specs)), model.members):
            net = NeuralPredictor(member, p.net.feature_scaler, p.net.target_scaler, device=p.net.device)
            result = TrainResult(net, {}, 0, 0, float("nan"), "reused", 0.0, [], None)
            out.setdefault(_member_key(name, mcfg, seed), FittedMethod(name, list(targets), net, 0.0, result, mcfg))
    if not out:
        raise PerfseerError(f"warm_from: no blend card at {path} was trained on these rows and targets (no card's "
                            "scalings match this training set's)", "drop warm_from, or point it at the blend "
                            "(or the stages folder) trained on the same data, split and targets")
    return out


def train_blend(train_set, val_set, config: dict, train_config, targets, test_set=None, *, train_member):
    """Train each member with ``train_member`` (:func:`perfseer.fit.methods.train_method`, which
    passes itself: a blend's members are methods; same data and recipe;
    the same seed unless ``seeds`` gives one per member), fit the weights on ``val_set`` unless
    ``config["weights"]`` fixes them (then the shift, with ``fit_shift``), and return the blend as a
    :class:`~perfseer.fit.trainer.FittedMethod`.

    With a ``checkpoint_dir`` member ``i`` checkpoints under ``<checkpoint_dir>/member<i>`` and,
    once trained, writes ``finished.json`` there (its epochs); resuming then restores a finished
    member at those epochs instead of giving it a new time limit, so an interrupted blend ends
    where an uninterrupted one would."""

    start = time.perf_counter()
    train_config = train_config or TrainConfig()
    cfg = BlendConfig.from_dict(config)
    members = cfg.member_list()
    seeds = parse_seeds(cfg.seeds, len(members)) if cfg.seeds else [train_config.seed] * len(members)
    warm = _warm_members(cfg.warm_from, train_set, targets) if cfg.warm_from else {}
    fitted = []
    for i, (name, member_cfg) in enumerate(members):
        key = _member_key(name, member_cfg, seeds[i])
        if key in warm:
            fitted.append(warm.pop(key))
            continue
        tc, done = replace(train_config, seed=seeds[i]), None
        if train_config.checkpoint_dir:
            folder = Path(train_config.checkpoint_dir) / f"member{i}"
            done = folder / "finished.json"
            tc = replace(tc, checkpoint_dir=str(folder))
            if train_config.resume and done.is_file():
                tc = replace(tc, max_epochs=int(json.loads(done.read_text())["epochs_run"]), time_limit_s=None)
        fitted.append(train_member(name, train_set, val_set, member_cfg, train_config=tc, targets=targets))
        if done is not None:
            r = fitted[-1].train_result
            atomic_write_text(done, json.dumps({"epochs_run": r.epochs_run, "stopped": r.stopped}))
    first = fitted[0].estimator
    for f in fitted[1:]:
        if f.estimator.target_scaler.to_dict() != first.target_scaler.to_dict() or \
                f.estimator.feature_scaler.to_dict() != first.feature_scaler.to_dict():
            raise PerfseerError("the blend's members were fitted with different scalings", "train them on the same rows")
    cfg.member_configs = json.dumps([{"name": f.name, "config": f.config} for f in fitted], sort_keys=True)
    model = Blend(cfg)
    for m, f in zip(model.members, fitted):
        m.load_state_dict(f.estimator.model.state_dict())
    y_val = targets_of(val_set)
    if not config.get("weights"):
        lv = np.log(np.stack([f.predict(val_set) for f in fitted]))
        specs = split_members(cfg.members)
        w = fit_tied_weights(lv, y_val, member_groups(specs)) if cfg.tie_seeds else fit_weights(lv, y_val)
        model.set_weights(w)
    device = first.device
    model.to(device).eval()
    net = NeuralPredictor(model, first.feature_scaler, first.target_scaler, device=device)
    if cfg.fit_shift and not config.get("shift"):
        ts = first.target_scaler
        if any(t != "log" for t in ts.transforms):
            raise PerfseerError(f"fit_shift needs log-transformed targets; {ts.targets} are {ts.transforms}",
                                "drop --set fit_shift=true for these targets")
        b = fit_log_shift(np.log(net.predict(val_set)), y_val)  # log units; the output is standardised
        model.set_shift(b / np.asarray(first.target_scaler.std_, dtype=np.float64).reshape(-1))
    metrics = {"train": evaluate_targets(targets_of(train_set), net.predict(train_set), targets),
               "val": evaluate_targets(y_val, net.predict(val_set), targets)}
    if test_set is not None and len(test_set):
        metrics["test"] = evaluate_targets(targets_of(test_set), net.predict(test_set), targets)
    results = [f.train_result for f in fitted]
    history = [dict(h, member=i) for i, r in enumerate(results) for h in r.history]
    result = TrainResult(net, metrics, sum(r.epochs_run for r in results), max(r.best_epoch for r in results),
                         float(np.nanmean([r.best_val_loss for r in results])) if any(r.epochs_run for r in results)
                         else float("nan"), "+".join(r.stopped for r in results),
                         time.perf_counter() - start, history, train_config)
    return FittedMethod("blend", list(targets), net, time.perf_counter() - start, result, model.config.to_dict())
