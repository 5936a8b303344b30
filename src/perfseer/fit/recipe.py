"""The training recipe that writes a predictor card: select the data, fit a method, score it on the
validation and test splits (and by k-fold cross-validation by architecture), calibrate its trust
annotations, and wrap it as a :class:`~perfseer.runtime.predictor.Predictor` with its card.

Stages (the final network, then each fold) are saved as they end, so an interrupted run resumes
after the last finished one.

Example::

    from perfseer.fit.recipe import train_predictor

    predictor, fitted = train_predictor("timm_rtx3090", method="seernet", phase="infer")
    predictor.save("preds/")
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from perfseer.data.dataset import BUNDLED_DATASETS, dataset_extraction, load_dataset, resolve_dataset
from perfseer.features.pyg import OP_VOCAB
from perfseer.fit.data import fit_splits, select, select_devices, subsample_models, targets_of
from perfseer.fit.intervals import calibrate
from perfseer.fit.methods import FittedMethod, evaluate_method, train_method
from perfseer.fit.metrics import evaluate
from perfseer.fit.trainer import TrainConfig, auto_batch_size
from perfseer.runtime.net import EstimatorNet
from perfseer.runtime.predictor import Predictor, PredictorError, Target, load_predictor, slug


def train_predictor(data, method: str = "seernet", devices: str | Sequence[str] | None = None,
                    phase: str | None = None, metrics: str | Sequence[str] = "latency_ms",
                    split_column: str = "split", name: str | None = None, model_config: dict | None = None,
                    train_config=None, max_train_models: int | None = None, fit: Sequence[str] = ("train",),
                    kfold: int | None = None, stage_dir: str | os.PathLike | None = None,
                    on_stage=None, pretrained: str | None = None,
                    only_stages: Sequence[str] | None = None) -> tuple[Predictor, object]:
    """Train ``method`` on a graph dataset and wrap it as a :class:`Predictor` with its card.

    Args:
        data: a dataset folder or committed dataset name (:func:`perfseer.data.dataset.resolve_dataset`),
            or a loaded :class:`~perfseer.data.dataset.GraphDataset`.
        method: a registered model or baseline (``seernet``, ``seernet-multi``, ``pmgns``, ``gbm``...).
        devices: one device (its metrics are the targets) or several (one target per device, for
            one metric: SeerNet-Multi over devices); ``None``: the dataset's only device.
        phase: ``infer`` or ``train`` (``None``: the only one present).
        metrics: the metric column(s) to predict.
        split_column: ``split`` (by architecture) or ``family_split`` (unseen families).
        name: the predictor's name (default from the device and phase).
        model_config: overrides of the model's config (e.g. ``{"hidden_dim": 128}``).
        train_config: a :class:`~perfseer.fit.trainer.TrainConfig`.
        max_train_models: train on at most this many of the training split's models (all their
            rows), chosen by a hash of the name: a cheaper predictor, same validation and test sets.
        fit: the splits the network is fitted on: ``("train",)`` (default; the test split is
            scored) or ``("train", "test")`` (all measured data but the validation split, which
            early stopping keeps reading; a shipped predictor).  ``max_train_models`` applies to
            the union.
        kfold: also score the recipe by a ``kfold``-fold cross-validation by architecture over
            the fitted rows: every model's rows are in one fold (by a hash of its name and the
            training seed); fold ``j``'s network is trained on the other folds with the same
            config and validation split and scored on fold ``j``.  The pooled out-of-fold scores
            go to ``scores["kfold"]``, per fold in ``training["kfold"]``.
        stage_dir: where each stage (the final network, then each fold) is saved as it ends, so
            that an interrupted run resumes after the last finished stage (with
            ``train_config.resume``); fold predictors stay there for interval benchmarks.
        on_stage: called as ``on_stage(predictor)`` with the card after the final network and
            after each fold (the CLI saves it, so a run stopped mid-way still leaves a predictor).
        pretrained: a pre-trained encoder card (``benchmarks/pretraining.py`` at tag research-2026-11): SeerNet's trunk starts
            from it (:func:`perfseer.fit.pretrain.init_from_pretrained`).
        only_stages: train only these stages (``final``, ``fold0`` ... ``fold{kfold-1}``) into
            ``stage_dir`` and return ``(None, None)``: several processes can train the stages of one
            run side by side, and a later call without it (``train_config.resume``) loads them all
            and builds the card.

    Returns:
        ``(predictor, fitted)``: ``fitted`` is the :class:`~perfseer.fit.methods.FittedMethod`
        (its ``result`` holds the training history for networks).
    """

    ds = data if hasattr(data, "labels") else load_dataset(resolve_dataset(data))
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    dev_list = [devices] if isinstance(devices, str) else (list(devices) if devices is not None else None)
    if dev_list is not None and len(dev_list) > 1:
        if len(metrics) != 1:
            raise PredictorError(f"{len(dev_list)} devices and {len(metrics)} metrics",
                                 "train one metric on several devices, or several metrics on one device")
        if phase is None:
            raise PredictorError("several devices need an explicit phase", "pass phase='infer' or 'train'")
        sel = select_devices(ds, metrics[0], dev_list, phase, split_column)
        targets = [Target(metrics[0], d, phase) for d in dev_list]
    else:
        sel = select(ds, metrics, dev_list, phase, split_column)
        targets = [Target(m, sel.devices[0], sel.phase) for m in metrics]
    fit = fit_splits(fit)
    if fit != ("train",):
        sel.train, sel.test = [g for s in fit for g in sel.split(s)], []
    if max_train_models is not None:
        sel.train = subsample_models(sel, max_train_models)

    train_config = train_config or TrainConfig()
    if kfold is not None and train_config.batch_size is None:  # the folds (fewer rows) keep the final network's

        train_config = replace(train_config, batch_size=auto_batch_size(len(sel.train)))
    keys = dict(zip(sel.targets, (t.key for t in targets)))
    stages = Path(stage_dir) if stage_dir is not None else None
    if only_stages:
        _train_only(only_stages, method, sel, model_config, train_config, kfold, targets, stages, pretrained)
        return None, None
    fitted = _train_stage(method, sel.train, sel.val, model_config, train_config, sel, targets, stages, "final",
                          pretrained)
    scores = {}
    for split in ("val", "test"):
        part = sel.split(split)
        if len(part):
            scores[split] = {keys[k]: v for k, v in evaluate_method(fitted, part).items()}
    seen = {OP_VOCAB[int(i)] for g in sel.train for i in g.op_type.unique().tolist()}
    batches = sorted({int(b) for b in sel.labels["batch_size"]}) if "batch_size" in sel.labels else []
    result = fitted.train_result
    manifest = getattr(ds, "manifest", {}) or {}
    training = {
        "dataset": _dataset_label(getattr(ds, "path", data)), "dataset_table_sha256": manifest.get("table", {}).get("sha256"),
        "split_column": split_column, "split_seed": manifest.get("splits", {}).get("seed"),
        "rows": {s: len(sel.split(s)) for s in ("train", "val", "test")}, "dropped": sel.dropped,
        "max_train_models": max_train_models, "fit_splits": list(fit),
        **({"pretrained": str(pretrained)} if pretrained is not None else {}),
        "batch_sizes": [batches[0], batches[-1]] if batches else None,
        "method_config": fitted.config,
        "train_config": result.config.to_dict() if result is not None and result.config is not None else None,
        "epochs_run": getattr(result, "epochs_run", None), "stopped": getattr(result, "stopped", None),
        "wall_time_s": round(fitted.fit_time_s, 1),
    }
    net = fitted.estimator if result is not None else EstimatorNet(fitted.estimator, len(targets))
    name = name or (slug(targets[0].device, targets[0].phase) if len({t.device for t in targets}) == 1
                    else f"{method}-{'+'.join(t.device.split('/')[0] for t in targets)}.{targets[0].phase}")

    predictor = Predictor.from_training(name, method, net, targets, seen, training, scores,
                                        extraction=dataset_extraction(manifest))

    calibrate(predictor, sel)
    if kfold is not None:
        if on_stage is not None:
            on_stage(predictor)
        _kfold(predictor, method, sel, model_config, train_config, kfold, targets, stages, on_stage, pretrained)
    return predictor, fitted


def _train_stage(method, train_set, val_set, model_config, train_config, sel, targets, stages, stage,
                 pretrained=None):
    """Train one stage (the final network or a fold), or load it when ``stages`` holds it finished."""

    if stages is not None:
        done = stages / f"{stage}.json"
        if done.is_file() and train_config.resume:
            p = load_predictor(done)
            cfg = p.card["training"]
            return FittedMethod(method, list(sel.targets), p.net, cfg.get("wall_time_s", 0.0), _Done(cfg),
                                p.card["model"].get("config", {}))
        train_config = replace(train_config, checkpoint_dir=str(stages / stage / ".checkpoint"))
    fitted = train_method(method, train_set, val_set, model_config, train_config=train_config, targets=sel.targets,
                          pretrained=pretrained)
    if stages is not None and fitted.train_result is not None:
        r = fitted.train_result
        Predictor.from_training(stage, method, fitted.estimator, targets, (),
                                {"epochs_run": r.epochs_run, "stopped": r.stopped, "wall_time_s": round(fitted.fit_time_s, 1),
                                 "rows": {"train": len(train_set), "val": len(val_set)}},
                                {}).save(stages)

        shutil.rmtree(stages / stage, ignore_errors=True)
    return fitted


def _train_only(names, method, sel, model_config, train_config, kfold, targets, stages, pretrained) -> None:
    """Train the named stages of a (k-fold) run into ``stages`` (:func:`train_predictor`'s ``only_stages``)."""
    valid = ["final"] + [f"fold{j}" for j in range(kfold or 0)]
    bad = [n for n in names if n not in valid]
    if stages is None or bad:
        raise PredictorError(f"cannot train stage(s) {bad or list(names)} alone" + ("" if stages is not None else
                             ": there is no stage folder"),
                             f"name stages of a staged run (--fit train+test or --kfold K): {', '.join(valid)}")
    fold = _fold_index(sel, kfold, train_config.seed) if kfold else None
    for name in dict.fromkeys(names):
        if name == "final":
            _train_stage(method, sel.train, sel.val, model_config, train_config, sel, targets, stages, "final", pretrained)
            continue
        j = int(name[len("fold"):])
        train = [g for g, f in zip(sel.train, fold) if f != j]
        _train_stage(method, train, sel.val, model_config, train_config, sel, targets, stages, name, pretrained)


class _Done:
    """What a finished stage loaded from disk needs to look like to :func:`train_predictor`."""

    def __init__(self, cfg: dict):
        self.epochs_run, self.stopped, self.config = cfg.get("epochs_run"), cfg.get("stopped"), None


def kfold_of(models, k: int, seed: int) -> np.ndarray:
    """The fold (``0 .. k-1``) of each model name: a hash of the name and ``seed``, so that all rows of
    one architecture share a fold and adding models never moves the others."""

    if not isinstance(k, int) or k < 2:
        raise PredictorError(f"k-fold cross-validation needs k >= 2 folds, got {k!r}", "pass e.g. kfold=3")
    return np.array([int(hashlib.sha256(f"perfseer-kfold:{seed}:{m}".encode()).hexdigest()[:12], 16) % k
                     for m in models], dtype=np.int64)


def _fold_index(sel, k: int, seed: int) -> np.ndarray:
    """The k-fold fold of each of ``sel.train``'s graphs (by its model's name); no fold may be empty."""
    models = sel.labels["model"].astype(str).to_numpy()
    fold = kfold_of([models[int(g.row)] for g in sel.train], k, seed)
    if any(not (fold == j).any() for j in range(k)):
        raise PredictorError(f"{k}-fold cross-validation over {len(set(models))} models leaves a fold empty",
                             "use fewer folds")
    return fold


def _kfold(predictor, method, sel, model_config, train_config, k, targets, stages, on_stage, pretrained=None) -> None:
    """Cross-validate the recipe by architecture over ``sel.train``; scores into ``predictor.card``."""

    models = sel.labels["model"].astype(str).to_numpy()
    fold = _fold_index(sel, k, train_config.seed)
    keys = dict(zip(sel.targets, (t.key for t in targets)))
    y = targets_of(sel.train)
    oof = np.full_like(y, np.nan)
    per_fold = []
    for j in range(k):
        held = np.flatnonzero(fold == j)
        train = [g for g, f in zip(sel.train, fold) if f != j]
        fitted = _train_stage(method, train, sel.val, model_config, train_config, sel, targets, stages, f"fold{j}",
                              pretrained)
        oof[held] = fitted.predict([sel.train[i] for i in held])
        per_fold.append({"fold": j, "rows_train": len(train), "rows_held": len(held),
                         "models_held": len({models[int(sel.train[i].row)] for i in held}),
                         "epochs_run": getattr(fitted.train_result, "epochs_run", None),
                         "stopped": getattr(fitted.train_result, "stopped", None),
                         "mape": {keys[t]: float(np.mean(np.abs(oof[held, c] / y[held, c] - 1)) * 100)
                                  for c, t in enumerate(sel.targets)},
                         "spearman": {keys[t]: evaluate(y[held, c], oof[held, c])["spearman"]
                                      for c, t in enumerate(sel.targets)}})
        done = j == k - 1
        predictor.card["training"]["kfold"] = {
            "k": k, "by": "model", "seed": train_config.seed, "fit_splits": list(predictor.card["training"]["fit_splits"]),
            "rule": "every model's (architecture's) rows in one fold, by a hash of its name and the seed; each fold's "
                    "network is trained on the other folds with the final network's config and validation split",
            "folds_done": j + 1, "folds": per_fold}
        if done:  # pooled out-of-fold scores, and the mean and sd over folds
            predictor.card["scores"]["kfold"] = {
                keys[t]: evaluate(y[:, c], oof[:, c]) | {
                    f"{m}_fold_{s}": float(f(np.array([f_[m][keys[t]] for f_ in per_fold]), **kw))
                    for m in ("mape", "spearman") for s, f, kw in (("mean", np.mean, {}), ("sd", np.std, {"ddof": 1}))}
                for c, t in enumerate(sel.targets)}
        if on_stage is not None:
            on_stage(predictor)


def _dataset_label(path) -> str:
    """How a card names its training data: ``datasets/NAME`` for a committed dataset (not this
    machine's absolute path), else the path as given."""

    try:
        return f"datasets/{Path(path).resolve().relative_to(BUNDLED_DATASETS.resolve()).as_posix()}"
    except (TypeError, ValueError, OSError):
        return str(path)


