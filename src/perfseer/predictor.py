"""The object users hold: a trained predictor, loaded by name, that predicts a model's metrics.

A predictor is two files side by side (never a pickle):

- ``NAME.safetensors``: the network's weights;
- ``NAME.json``: its **card**: the network (registry name and config), the feature-schema
  version, the feature and target scaling, the targets (metric, unit, device and phase of each),
  the operator types seen in training, the training data (dataset, manifest digest, split column,
  seed, rows per split), the training configuration and its test scores.

A target is one metric on one device in one phase (``latency_ms`` on ``rtx3090/amp-nchw-pt240``,
``infer``).  One predictor may hold several (SeerNet-Multi: several metrics, or several devices
measured on the same models), so ``predict`` answers for each target it covers, and refuses a
device or phase it does not cover rather than guessing.

Predictors shipped with perfseer live in ``perfseer/predictors/``; :func:`list_predictors` shows
them with their coverage and scores.

Example::

    import perfseer

    p = perfseer.load_predictor("rtx3090-infer")
    p.predict("timm:resnet50", batch=[1, 64])  # list of dicts: model, batch_size, target, value
"""

from __future__ import annotations

import json
import math
import os
import secrets
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from perfseer.errors import PerfseerError
from perfseer.features import schema

CARD_FORMAT = "perfseer.predictor"
CARD_VERSION = 1
BUNDLED = Path(__file__).resolve().parent / "predictors"
UNITS = {"latency_ms": "ms", "memory_mb": "MiB", "util_pct": "%", "energy_j": "J"}


class PredictorError(PerfseerError):
    """A predictor file that cannot be used (missing, corrupt, incompatible), or a request it does
    not cover."""


@dataclass(frozen=True)
class Target:
    """One predicted quantity: ``metric`` (a measurement-table column) on ``device`` in ``phase``."""

    metric: str
    device: str
    phase: str

    @property
    def unit(self) -> str:
        return UNITS.get(self.metric, "")

    @property
    def key(self) -> str:
        return f"{self.metric}@{self.device}:{self.phase}"


def slug(device: str, phase: str) -> str:
    """A file-name-safe predictor name for one device and phase: ``rtx3090-amp-nchw-pt240.infer``."""
    return f"{device.replace('/', '-')}.{phase}"


class Predictor:
    """A trained network with its card.  Build with :func:`load_predictor` or :meth:`from_training`.

    Attributes:
        card: the JSON card (a dict).
        targets: the :class:`Target` of each output column.
    """

    def __init__(self, card: dict, net, name: str = ""):
        self.card = card
        self.net = net  # perfseer.training.trainer.NeuralPredictor
        self.name = name or card.get("name", "")
        self.targets = [Target(t["metric"], t["device"], t["phase"]) for t in card["targets"]]
        self._seen = set(card.get("op_types_seen", []))

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_training(cls, name: str, model_name: str, net, targets: Sequence[Target], op_types_seen,
                      training: dict, scores: dict) -> "Predictor":
        """A predictor from a trained :class:`~perfseer.training.trainer.NeuralPredictor`."""
        from datetime import datetime, timezone

        from perfseer import __version__

        estimator = getattr(net, "estimator", None)
        if estimator is not None:
            model = {"name": model_name, "kind": "estimator", "config": estimator.to_dict()["config"]}
        else:
            model = {"name": model_name, "kind": "neural", "config": net.model.config.to_dict(),
                     "parameters": int(sum(p.numel() for p in net.model.parameters()))}
        card = {
            "format": CARD_FORMAT, "format_version": CARD_VERSION, "name": name,
            "perfseer_version": __version__, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "schema_version": schema.SCHEMA_VERSION,
            "model": model,
            "targets": [dict(asdict(t), unit=t.unit) for t in targets],
            "devices": sorted({t.device for t in targets}), "phases": sorted({t.phase for t in targets}),
            "op_types_seen": sorted(op_types_seen),
            "training": training,
            "scores": scores,
        }
        if estimator is not None:
            card["estimator"] = estimator.to_dict()
        else:
            card["scaling"] = {"features": net.feature_scaler.to_dict(), "targets": net.target_scaler.to_dict()}
        return cls(card, net, name)

    def save(self, directory: str | os.PathLike, name: str | None = None) -> Path:
        """Write ``NAME.json`` (and, for a network, ``NAME.safetensors``) into ``directory``, each
        atomically.  A fitted baseline is all in its card."""
        from safetensors.torch import save_file

        name = name or self.name
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.card["model"].get("kind", "neural") == "neural":
            weights = directory / f"{name}.safetensors"
            tmp = weights.with_name(f".{weights.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            state = {k: v.detach().cpu().contiguous() for k, v in self.net.model.state_dict().items()}
            save_file(state, str(tmp), metadata={"format": CARD_FORMAT, "name": name})
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # safetensors writes 0600; predictors are shared files
            os.replace(tmp, weights)
        card = directory / f"{name}.json"
        tmp = card.with_name(f".{card.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        tmp.write_text(json.dumps(dict(self.card, name=name), indent=1) + "\n")
        os.replace(tmp, card)
        return card

    # -- coverage ------------------------------------------------------------------------------
    def columns(self, device: str | None = None, phase: str | None = None) -> list[int]:
        """Output columns for ``device``/``phase`` (``None``: any).

        Raises:
            PredictorError: the predictor covers no such device or phase.
        """
        cols = [i for i, t in enumerate(self.targets)
                if (device is None or t.device == device) and (phase is None or t.phase == phase)]
        if not cols:
            covered = ", ".join(sorted({f"{t.device} ({t.phase})" for t in self.targets}))
            raise PredictorError(f"predictor {self.name} does not cover device {device or 'any'} in phase "
                                 f"{phase or 'any'}; it covers {covered}",
                                 "choose a predictor for that device (perfseer predictors lists them)")
        return cols

    def unseen_ops(self, op_types: Sequence[str]) -> list[str]:
        """Operator types of a graph that no training graph had."""
        return sorted({op for op in op_types if op not in self._seen})

    # -- prediction ----------------------------------------------------------------------------
    def predict_graphs(self, graphs: Sequence) -> np.ndarray:
        """Predictions ``[len(graphs), len(targets)]`` for PyG ``Data`` graphs of raw features."""
        return self.net.predict(list(graphs))

    def predict(self, model, batch: int | Sequence[int] = 1, input_shape=None, dims=None,
                device: str | None = None, phase: str | None = None) -> list[dict]:
        """Predict ``model``'s metrics at each batch size.

        Args:
            model: anything :func:`perfseer.extract` takes (ONNX path, reference, module...), or a
                :class:`~perfseer.features.perfgraph.PerfGraph`.
            batch: one batch size or several (the graph is extracted once and re-bound).
            input_shape, dims: as for :func:`perfseer.extract`.
            device, phase: restrict to these targets (an error if not covered).

        Returns:
            One dict per (batch size, target): ``model``, ``batch_size``, ``metric``, ``unit``,
            ``device``, ``phase``, ``value``; plus ``unseen_ops`` (operator types no training graph
            had; a warning names them too).
        """
        from perfseer.api import extract
        from perfseer.features.perfgraph import PerfGraph

        batches = [batch] if isinstance(batch, int) else list(batch)
        if not batches or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1 for b in batches):
            raise PredictorError(f"batch sizes must be integers >= 1, got {batch!r}", "pass e.g. batch=[1, 8, 64]")
        cols = self.columns(device, phase)
        pg = model if isinstance(model, PerfGraph) else extract(model, batch=int(batches[0]), input_shape=input_shape,
                                                                 dims=dims)
        graphs = [(pg if b == pg.batch_size else pg.with_batch(int(b))).to_pyg() for b in batches]
        unseen = self.unseen_ops(pg.op_types)
        if unseen:
            warnings.warn(f"{pg.graph.name or 'the model'} has operator types never seen in training by predictor "
                          f"{self.name}: {', '.join(unseen)}; their cost features still count, but treat the "
                          f"prediction with care", UnseenOperatorWarning, stacklevel=2)
        values = self.predict_graphs(graphs)
        name = str(model) if not isinstance(model, PerfGraph) else pg.graph.name
        return [{"model": name, "batch_size": int(b), "metric": self.targets[c].metric, "unit": self.targets[c].unit,
                 "device": self.targets[c].device, "phase": self.targets[c].phase, "value": float(values[i, c]),
                 "unseen_ops": unseen}
                for i, b in enumerate(batches) for c in cols]

    def describe(self) -> dict:
        """Name, network, coverage and test scores (what ``perfseer predictors`` shows)."""
        c = self.card
        return {"name": self.name, "model": c["model"]["name"], "parameters": c["model"].get("parameters"),
                "path": c.get("_path"),
                "targets": [Target(**{k: t[k] for k in ("metric", "device", "phase")}).key for t in c["targets"]],
                "devices": c["devices"], "phases": c["phases"],
                "training": {k: c["training"].get(k) for k in ("dataset", "split_column", "rows", "batch_sizes")},
                "scores": c.get("scores", {})}


class UnseenOperatorWarning(UserWarning):
    """A model has operator types that no graph in the predictor's training data had."""


def _paths(name_or_path: str | os.PathLike) -> tuple[Path, Path]:
    text = str(name_or_path)
    p = Path(text)
    if p.is_dir():
        raise PredictorError(f"{p} is a folder", "pass the predictor's .json card (or its name)")
    for suffix in (".json", ".safetensors"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]  # names hold dots ("rtx3090-amp-nchw-pt240.infer")
            break
    else:
        if (BUNDLED / f"{text}.json").is_file():
            text = str(BUNDLED / text)
    return Path(text + ".json"), Path(text + ".safetensors")


def _all_finite(obj) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(_all_finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(_all_finite(v) for v in obj)
    return True


def load_predictor(name_or_path: str | os.PathLike, device: str = "cpu") -> Predictor:
    """Load a predictor: a bundled one by name (:func:`list_predictors`), or a card path.

    Raises:
        PredictorError: no such predictor; a corrupt or truncated file; a card of another format
            version or feature schema; weights that do not fit the card's network.
    """
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from perfseer.models.registry import build_from_dict
    from perfseer.training.scaling import FeatureScaler, TargetScaler
    from perfseer.training.trainer import NeuralPredictor

    card_path, weights_path = _paths(name_or_path)
    if not card_path.is_file():
        names = ", ".join(p["name"] for p in list_predictors()) or "none"
        raise PredictorError(f"no predictor named or at {name_or_path}",
                             f"use a bundled name ({names}) or the path of a predictor's .json card")
    try:
        card = json.loads(card_path.read_text())
    except (OSError, ValueError) as e:
        raise PredictorError(f"predictor card {card_path} is unreadable ({e})", "re-train or re-download it") from e
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise PredictorError(f"{card_path} is not a perfseer predictor card", "pass a card written by perfseer train")
    version = card.get("format_version", 0)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise PredictorError(f"{card_path} has format_version {version!r}, not a version number",
                             "the card is corrupt: re-train or re-download the predictor")
    kind = card.get("model", {}).get("kind", "neural") if isinstance(card.get("model"), dict) else None
    if kind not in ("neural", "estimator"):
        raise PredictorError(f"{card_path} has model kind {kind!r} (expected 'neural' or 'estimator')",
                             "the card is corrupt: re-train or re-download the predictor")
    if not _all_finite(card.get("scaling")):
        raise PredictorError(f"{card_path} holds a non-finite (NaN or infinite) scaling value",
                             "the card is corrupt: re-train or re-download the predictor")
    if card.get("format_version", 0) > CARD_VERSION:
        raise PredictorError(f"{card_path} is predictor format {card.get('format_version')}, this perfseer reads "
                             f"up to {CARD_VERSION}", "upgrade perfseer")
    if card.get("schema_version") != schema.SCHEMA_VERSION:
        raise PredictorError(f"{card_path} was trained on feature schema {card.get('schema_version')}, this "
                             f"perfseer computes schema {schema.SCHEMA_VERSION}",
                             "use a perfseer version with that schema, or re-train the predictor")
    if card.get("model", {}).get("kind") == "estimator":
        return Predictor(card, _load_estimator(card, card_path), card.get("name") or card_path.stem)
    try:
        state = load_file(str(weights_path))
    except FileNotFoundError:
        raise PredictorError(f"predictor weights {weights_path} are missing",
                             "keep the .safetensors file next to its .json card") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise PredictorError(f"predictor weights {weights_path} are corrupt ({e})", "re-train or re-download them") from e
    try:
        model = build_from_dict(card["model"]["name"], card["model"]["config"])
        model.load_state_dict(state, strict=True)
        fs = FeatureScaler.from_dict(card["scaling"]["features"])
        ts = TargetScaler.from_dict(card["scaling"]["targets"])
    except (KeyError, RuntimeError, TypeError) as e:
        raise PredictorError(f"predictor {card_path} does not fit its network ({str(e).splitlines()[0]})",
                             "re-train it with this perfseer version") from e
    if len(ts.targets) != len(card["targets"]):
        raise PredictorError(f"predictor {card_path} lists {len(card['targets'])} targets but scales "
                             f"{len(ts.targets)}", "re-train it")
    model.eval()
    net = NeuralPredictor(model, fs, ts, device=torch.device(device))
    return Predictor(card, net, card.get("name") or card_path.stem)


class EstimatorNet:
    """A fitted baseline estimator behind the ``predict(graphs) -> [N, T]`` of a network."""

    def __init__(self, estimator, n_targets: int):
        self.estimator, self.n_targets = estimator, n_targets

    def predict(self, graphs) -> np.ndarray:
        return np.asarray(self.estimator.predict(graphs), dtype=np.float64).reshape(len(graphs), self.n_targets)


def _load_estimator(card: dict, card_path: Path) -> EstimatorNet:
    from perfseer.models.registry import MODELS

    try:
        cls = MODELS[card["model"]["name"]][1]
        est = cls.from_dict(card["estimator"])
    except (KeyError, TypeError, ValueError) as e:
        raise PredictorError(f"predictor {card_path} holds no usable estimator ({e})", "re-train it") from e
    except PerfseerError as e:
        raise PredictorError(f"predictor {card_path}: {e.problem}", e.fix) from e
    return EstimatorNet(est, len(card["targets"]))


def list_predictors(directory: str | os.PathLike | None = None) -> list[dict]:
    """The cards of the predictors in ``directory`` (default: the bundled ones), described."""
    folder = Path(directory) if directory is not None else BUNDLED
    out = []
    for card_path in sorted(folder.glob("*.json")):
        try:
            card = json.loads(card_path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(card, dict) and card.get("format") == CARD_FORMAT:
            card["_path"] = str(card_path)
            out.append(Predictor.describe(_CardOnly(card, card_path.stem)))
    return out


class _CardOnly:
    def __init__(self, card: dict, name: str):
        self.card, self.name = card, card.get("name", name)


def train_predictor(data, method: str = "seernet", devices: str | Sequence[str] | None = None,
                    phase: str | None = None, metrics: str | Sequence[str] = "latency_ms",
                    split_column: str = "split", name: str | None = None, model_config: dict | None = None,
                    train_config=None, max_train_models: int | None = None) -> tuple[Predictor, object]:
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
        train_config: a :class:`~perfseer.training.trainer.TrainConfig`.
        max_train_models: train on at most this many of the training split's models (all their
            rows), chosen by a hash of the name: a cheaper predictor, same validation and test sets.

    Returns:
        ``(predictor, fitted)``: ``fitted`` is the :class:`~perfseer.training.run.FittedMethod`
        (its ``result`` holds the training history for networks).
    """
    from perfseer.data.dataset import load_dataset, resolve_dataset
    from perfseer.features.pyg import OP_VOCAB
    from perfseer.training.data import select, select_devices
    from perfseer.training.run import evaluate_method, train_method

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
    if max_train_models is not None:
        sel.train = _subsample(sel, max_train_models)
    fitted = train_method(method, sel.train, sel.val, model_config, train_config=train_config,
                          targets=sel.targets, test_set=sel.test)
    keys = dict(zip(sel.targets, (t.key for t in targets)))
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
        "max_train_models": max_train_models,
        "batch_sizes": [batches[0], batches[-1]] if batches else None,
        "method_config": fitted.config,
        "train_config": result.config.to_dict() if result is not None and result.config is not None else None,
        "epochs_run": getattr(result, "epochs_run", None), "stopped": getattr(result, "stopped", None),
        "wall_time_s": round(fitted.fit_time_s, 1),
    }
    net = fitted.estimator if result is not None else EstimatorNet(fitted.estimator, len(targets))
    name = name or (slug(targets[0].device, targets[0].phase) if len({t.device for t in targets}) == 1
                    else f"{method}-{'+'.join(t.device.split('/')[0] for t in targets)}.{targets[0].phase}")
    return Predictor.from_training(name, method, net, targets, seen, training, scores), fitted


def _dataset_label(path) -> str:
    """How a card names its training data: ``datasets/NAME`` for a committed dataset (not this
    machine's absolute path), else the path as given."""
    from perfseer.data.dataset import BUNDLED_DATASETS

    try:
        return f"datasets/{Path(path).resolve().relative_to(BUNDLED_DATASETS.resolve()).as_posix()}"
    except (TypeError, ValueError, OSError):
        return str(path)


def _subsample(sel, n: int) -> list:
    import hashlib

    models = sel.labels["model"].astype(str).to_numpy()
    train_models = sorted({models[int(g.row)] for g in sel.train},
                          key=lambda m: hashlib.sha256(f"perfseer-subsample:{m}".encode()).hexdigest())
    keep = set(train_models[:n])
    return [g for g in sel.train if models[int(g.row)] in keep]
