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

from perfseer.cards import CardFormat
from perfseer.errors import PerfseerError
from perfseer.features import schema

CARD_FORMAT = "perfseer.predictor"
CARD_VERSION = 1
BUNDLED = Path(__file__).resolve().parent / "predictors"
UNITS = {"latency_ms": "ms", "memory_mb": "MiB", "util_pct": "%", "energy_j": "J"}
EMBEDDINGS_KEY = "domain.embeddings"  # the training graphs' embeddings, stored beside the weights


class PredictorError(PerfseerError):
    """A predictor file that cannot be used (missing, corrupt, incompatible), or a request it does
    not cover."""


PREDICTOR_CARD = CardFormat(CARD_FORMAT, CARD_VERSION, "predictor", writer="perfseer train",
                            remedy="re-train or re-download the predictor", schema=True, error=PredictorError)


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
        self.domain_embeddings = None  # [N, D] training-graph embeddings (card["domain"]["embedding"])
        self._specs: dict = {}

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_training(cls, name: str, model_name: str, net, targets: Sequence[Target], op_types_seen,
                      training: dict, scores: dict, extraction: dict | None = None) -> "Predictor":
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
            "extraction": dict(extraction or {"weight_work": False}),
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
            if self.domain_embeddings is not None:
                import torch

                state[EMBEDDINGS_KEY] = torch.from_numpy(np.ascontiguousarray(self.domain_embeddings, dtype=np.float32))
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

    def predict_with_embeddings(self, graphs: Sequence) -> tuple[np.ndarray, np.ndarray | None]:
        """:meth:`predict_graphs` and, when the card's domain check or a calibrated card's interval
        measures the embedding distance, the graphs' encoder embeddings ``[N, D]`` (else ``None``),
        the network run once for both where it can
        (:meth:`perfseer.training.trainer.NeuralPredictor.predict_with_embeddings`).  Pass them on to
        :meth:`assess` (and a calibrated card's ``annotate``)."""
        graphs = list(graphs)
        if not self._embedding_checked():
            if hasattr(self.net, "annotate") and hasattr(self.net, "predict_with_embeddings"):
                return self.net.predict_with_embeddings(graphs)  # the calibrated card's interval reads them
            return self.predict_graphs(graphs), None
        both = getattr(self.net, "predict_with_embeddings", None)
        values, emb = both(graphs) if both is not None else (self.predict_graphs(graphs), None)
        if emb is None:
            from perfseer.trust.calibrate import embeddings

            emb = embeddings(self.net, graphs)
        return values, emb

    @property
    def weight_work(self) -> bool:
        """Whether this predictor's training graphs kept the work models do on their own weights
        as device operators (the card's ``extraction``; cards without it learned from folded graphs).
        :meth:`predict` extracts the same way; a graph extracted the other way is out of domain."""
        return card_weight_work(self.card)

    def extraction_mismatch(self, pg) -> str | None:
        """Why ``pg`` was not extracted the way this predictor's training graphs were, or None."""
        kept = bool(getattr(pg.graph, "weight_work", False))
        if kept == self.weight_work:
            return None
        how = {True: "kept", False: "folded"}
        return (f"the graph was extracted with the work on weights {how[kept]}, predictor {self.name} learned from "
                f"graphs with it {how[self.weight_work]}: extract with weight_work={self.weight_work} "
                f"(PERFSEER_WEIGHT_WORK={int(self.weight_work)}) or pass the model itself")

    def _embedding_checked(self) -> bool:
        domain = self.card.get("domain")
        return bool(domain and domain.get("embedding") and self.domain_embeddings is not None)

    def predict(self, model, batch: int | Sequence[int] = 1, input_shape=None, dims=None,
                device: str | None = None, phase: str | None = None, seq_len: int | None = None) -> list[dict]:
        """Predict ``model``'s metrics at each batch size.

        Args:
            model: anything :func:`perfseer.extract` takes (ONNX path, reference, module...), or a
                :class:`~perfseer.features.perfgraph.PerfGraph`.
            batch: one batch size or several (the graph is extracted once and re-bound).
            input_shape, dims, seq_len: as for :func:`perfseer.extract`.
            device, phase: restrict to these targets (an error if not covered).

        Returns:
            One dict per (batch size, target): ``model``, ``batch_size``, ``metric``, ``unit``,
            ``device``, ``phase``, ``value``, ``basis`` (what the value comes from); plus ``unseen_ops`` (operator types no training graph
            had; a warning names them too).
        """
        from perfseer.api import extract
        from perfseer.features.perfgraph import PerfGraph

        batches = [batch] if isinstance(batch, int) else list(batch)
        if not batches or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1 for b in batches):
            raise PredictorError(f"batch sizes must be integers >= 1, got {batch!r}", "pass e.g. batch=[1, 8, 64]")
        self.columns(device, phase)  # an uncovered device fails before the extraction
        pg = model if isinstance(model, PerfGraph) else extract(model, batch=int(batches[0]), input_shape=input_shape,
                                                                 dims=dims, seq_len=seq_len,
                                                                 weight_work=self.weight_work)
        name = str(model) if not isinstance(model, PerfGraph) else pg.graph.name
        from perfseer.data.splits import model_family

        family = model_family(model) if isinstance(model, str) else None
        return self.predict_bound(pg, batches, device=device, phase=phase, name=name, family=family, _stacklevel=3)

    def predict_bound(self, pg, batches: Sequence[int], graphs: Sequence | None = None, device: str | None = None,
                      phase: str | None = None, name: str | None = None, family: str | None = None,
                      _stacklevel: int = 2) -> list[dict]:
        """The rows of :meth:`predict` for an extracted PerfGraph ``pg`` at each of ``batches``.

        Args:
            graphs: the PyG graphs of ``pg`` bound to each batch size, when the caller has them
                (``perfseer serve`` builds them once for all its predictors); ``None``: built here.
            name: the rows' ``model`` (default: the graph's name).
            family: the model's architecture family (:func:`perfseer.data.splits.model_family` of
                its reference), checked against the card's domain; ``None``: not checked.
        """
        cols = self.columns(device, phase)
        if graphs is None:
            graphs = [(pg if b == pg.batch_size else pg.with_batch(int(b))).to_pyg() for b in batches]
        elif len(graphs) != len(batches):
            raise PredictorError(f"{len(graphs)} graphs for {len(batches)} batch sizes", "pass one graph per batch size")
        if getattr(self.net, "reads_liveness", False) and any(getattr(g, "live", None) is None for g in graphs):
            from perfseer.features.pyg import attach_liveness

            attach_liveness(graphs, pg)  # once per model, for the cards that read it (calibrated)
        unseen = self.unseen_ops(pg.op_types)
        if unseen:
            warnings.warn(f"{pg.graph.name or 'the model'} has operator types never seen in training by predictor "
                          f"{self.name}: {', '.join(unseen)}; their cost features still count, but treat the "
                          f"prediction with care", UnseenOperatorWarning, stacklevel=_stacklevel)
        values, emb = self.predict_with_embeddings(graphs)
        name = pg.graph.name if name is None else name
        shape = _input_shape(pg)
        mismatch = self.extraction_mismatch(pg)
        verdicts, checked = self.assess(graphs, values, [pg.op_types] * len(graphs), [shape] * len(graphs),
                                        [family] * len(graphs), embeddings=emb,
                                        extra_reasons=[mismatch] if mismatch else ())
        rows = [{"model": name, "batch_size": int(b), "metric": self.targets[c].metric, "unit": self.targets[c].unit,
                 "device": self.targets[c].device, "phase": self.targets[c].phase, "value": checked[i][c]["value"],
                 "interval": checked[i][c]["interval"], "in_domain": verdicts[i][0],
                 "domain_reasons": verdicts[i][1], "flags": checked[i][c]["flags"], "unseen_ops": unseen,
                 "basis": self.card.get("basis") or f"measured-device predictor {self.name}"}
                for i, b in enumerate(batches) for c in cols]
        annotate = getattr(self.net, "annotate", None)  # calibrated cards: interval and domain per row
        if annotate is not None:
            at = [i for i, _ in enumerate(batches) for _ in cols]
            annotate(rows, [graphs[i] for i in at], embeddings=None if emb is None else np.asarray(emb)[at])
        return rows

    def assess(self, graphs: Sequence, values: np.ndarray, op_types: Sequence[Sequence[str]],
               input_shapes: Sequence | None = None,
               families: Sequence[str | None] | None = None,
               embeddings: np.ndarray | None = None,
               extra_reasons: Sequence[str] = ()) -> tuple[list[tuple[bool, list[str]]], list[list[dict]]]:
        """The trust in each prediction of :meth:`predict_graphs`.

        Args:
            graphs: PyG graphs of raw features; ``values`` their predictions ``[N, T]``.
            op_types: per graph, its operator types.
            input_shapes: per graph, one sample's input shape (``"3x224x224"``; ``None``: not checked).
            families: per graph its architecture family (``timm:`` / ``torchvision:`` references;
                ``None``: not checked); a family the card's domain does not list is out of domain.
            embeddings: the graphs' encoder embeddings from :meth:`predict_with_embeddings`
                (``None``: computed here when the domain check needs them).
            extra_reasons: reasons every graph is out of domain for (an extraction unlike the
                training graphs', :meth:`extraction_mismatch`).

        Returns:
            ``(verdicts, checked)``: per graph ``(in_domain, reasons)``
            (:func:`perfseer.trust.domain.verdicts`); per graph and target ``{"value", "interval":
            [lo, hi], "flags"}``: the value clipped to the physical bounds, its 90 % interval
            (widened by the card's ``ood_factor`` out of domain), and what was clipped.
        """
        from perfseer.trust import bounds as bnd
        from perfseer.trust import domain as dom
        from perfseer.trust import intervals as itv

        domain = self.card.get("domain")
        emb = None
        if self._embedding_checked():
            from perfseer.trust.calibrate import embeddings as embed

            emb = embed(self.net, list(graphs)) if embeddings is None else embeddings
        verdicts = dom.verdicts(domain, graphs, op_types, input_shapes, emb, self.domain_embeddings, families)
        if extra_reasons:
            verdicts = [(False, list(reasons) + list(extra_reasons)) for _, reasons in verdicts]
        inside = np.array([v[0] for v in verdicts], dtype=bool)
        cal = self.card.get("intervals") or {}
        factor = float(cal.get("ood_factor", itv.DEFAULT_OOD_FACTOR))
        costs = [bnd.graph_costs(g, ops) for g, ops in zip(graphs, op_types)]
        flops_range = None
        if domain and "flops_total" in (domain.get("globals") or {}).get("ranges", {}):
            flops_range = [10 ** v - 1 for v in domain["globals"]["ranges"]["flops_total"]]
        checked: list[list[dict]] = [[{} for _ in self.targets] for _ in graphs]
        for c, t in enumerate(self.targets):
            q = ((cal.get("targets") or {}).get(t.key) or {}).get("q")
            v = np.asarray(values[:, c], dtype=np.float64) if len(graphs) else np.zeros(0)
            if q is None:
                lo, hi = np.full(len(v), np.nan), np.full(len(v), np.nan)
            else:
                lo, hi = itv.bounds(v, q, inside, factor)
            spec = self._spec(t.device) if t.metric == "latency_ms" else None
            for i in range(len(graphs)):
                if spec is not None:
                    floor, ceiling, how = bnd.latency_bounds_ms(costs[i], spec, t.phase)
                    basis, floor_basis = f"{spec.name} spec", f"{spec.name} spec, set by {how}"
                else:
                    floor, ceiling = bnd.spec_free_bounds(t.metric, costs[i], (domain or {}).get("targets", {}).get(t.key),
                                                          flops_range)
                    basis = floor_basis = "no device spec: training range"
                value, l, h, flags = bnd.check(float(v[i]), float(lo[i]), float(hi[i]), floor, ceiling, t.unit, basis,
                                               floor_basis)
                if q is None:
                    flags.append("no interval: the card has no calibration (too few validation rows, or a card "
                                 "from before calibration: run scripts/calibrate_predictors.py)")
                interval = [l, h] if q is not None else None
                checked[i][c] = {"value": value, "interval": interval, "flags": flags}
        return verdicts, checked

    def _spec(self, device: str):
        if device not in self._specs:
            from perfseer.trust.bounds import device_spec

            self._specs[device] = device_spec(device)
        return self._specs[device]

    def describe(self) -> dict:
        """Name, network, coverage and test scores (what ``perfseer predictors`` shows)."""
        c = self.card
        return {"name": self.name, "model": c["model"]["name"], "parameters": c["model"].get("parameters"),
                "path": c.get("_path"), "role": c.get("role", "latency"),
                "targets": [Target(**{k: t[k] for k in ("metric", "device", "phase")}).key for t in c["targets"]],
                "devices": c["devices"], "phases": c["phases"],
                "extraction": {"weight_work": card_weight_work(c)},
                "training": {k: c["training"].get(k) for k in ("dataset", "split_column", "rows", "batch_sizes",
                                                                "fit_splits", "kfold", "calibrated_from")},
                "scores": c.get("scores", {}),
                "domain": _domain_summary(c.get("domain")),
                "intervals": {k: v["q"] for k, v in ((c.get("intervals") or {}).get("targets") or {}).items()}}


def card_weight_work(card: dict) -> bool:
    """A card's ``extraction.weight_work`` (false for cards written before it was recorded)."""
    return bool((card.get("extraction") or {}).get("weight_work", False))


def _domain_summary(domain: dict | None) -> dict | None:
    """What ``perfseer predictors`` shows of a domain (the card holds the rest)."""
    if not domain:
        return None
    emb = domain.get("embedding") or {}
    return {"graphs": domain.get("graphs"), "op_types": len(domain.get("op_types", [])),
            "batch_sizes": domain.get("batch_sizes"), "inputs": domain.get("inputs"),
            "precision": domain.get("precision"), "embedding_threshold": emb.get("threshold")}


def _input_shape(pg) -> tuple[int, ...] | None:
    """One sample's shape of the graph's first input (``(3, 224, 224)``), or ``None``."""
    try:
        t = pg.graph.tensors[pg.graph.inputs[0]]
        return tuple(int(d) for d in t.shape[1:]) or None
    except (IndexError, KeyError, AttributeError, TypeError, ValueError):
        return None


class UnseenOperatorWarning(UserWarning):
    """A model has operator types that no graph in the predictor's training data had."""


def _paths(name_or_path: str | os.PathLike) -> tuple[Path, Path]:
    """The card and weights of a bundled name, a card path or a weights path."""
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

    from perfseer.cards import read_card, read_weights
    from perfseer.models.registry import build_from_dict
    from perfseer.training.scaling import FeatureScaler, TargetScaler
    from perfseer.training.trainer import NeuralPredictor

    card_path, weights = _paths(name_or_path)
    if not card_path.is_file():
        names = ", ".join(p["name"] for p in list_predictors()) or "none"
        raise PredictorError(f"no predictor named or at {name_or_path}",
                             f"use a bundled name ({names}) or the path of a predictor's .json card")
    card = read_card(card_path, PREDICTOR_CARD)
    kind = card.get("model", {}).get("kind", "neural") if isinstance(card.get("model"), dict) else None
    if kind not in ("neural", "estimator"):
        raise PredictorError(f"{card_path} has model kind {kind!r} (expected 'neural' or 'estimator')",
                             "the card is corrupt: re-train or re-download the predictor")
    if not _all_finite(card.get("scaling")):
        raise PredictorError(f"{card_path} holds a non-finite (NaN or infinite) scaling value",
                             "the card is corrupt: re-train or re-download the predictor")
    # a calibrated card (perfseer calibrate) whose correction reads the source network's outputs
    outputs = card.get("calibration", {}).get("source_targets") if card.get("calibration", {}).get("correction") \
        else None
    outputs = outputs or card["targets"]
    if kind == "estimator":
        return Predictor(card, _calibrated(card, _load_estimator(card, card_path, len(outputs))),
                         card.get("name") or card_path.stem)
    try:
        model = build_from_dict(card["model"]["name"], card["model"]["config"])
        fs = FeatureScaler.from_dict(card["scaling"]["features"])
        ts = TargetScaler.from_dict(card["scaling"]["targets"])
    except (KeyError, RuntimeError, TypeError) as e:
        raise PredictorError(f"predictor {card_path} does not fit its network ({str(e).splitlines()[0]})",
                             "re-train it with this perfseer version") from e
    state = read_weights(weights, PREDICTOR_CARD, required=model.state_dict())
    stored = state.pop(EMBEDDINGS_KEY, None)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise PredictorError(f"predictor {card_path} does not fit its network ({str(e).splitlines()[0]})",
                             "re-train it with this perfseer version") from e
    if len(ts.targets) != len(outputs):
        raise PredictorError(f"predictor {card_path} lists {len(outputs)} targets but scales "
                             f"{len(ts.targets)}", "re-train it")
    model.eval()
    net = NeuralPredictor(model, fs, ts, device=torch.device(device))
    predictor = Predictor(card, _calibrated(card, net), card.get("name") or card_path.stem)
    if stored is not None:
        predictor.domain_embeddings = stored.double().numpy()
    return predictor


def _calibrated(card: dict, net):
    """The network of a calibrated card (interval, domain and, for ``loglinear``, its correction)."""
    if "calibration" not in card:
        return net
    from perfseer.training.calibrate import wrap_loaded

    return wrap_loaded(card, net)


class EstimatorNet:
    """A fitted baseline estimator behind the ``predict(graphs) -> [N, T]`` of a network."""

    def __init__(self, estimator, n_targets: int):
        self.estimator, self.n_targets = estimator, n_targets

    def predict(self, graphs) -> np.ndarray:
        return np.asarray(self.estimator.predict(graphs), dtype=np.float64).reshape(len(graphs), self.n_targets)


def _load_estimator(card: dict, card_path: Path, n_targets: int | None = None) -> EstimatorNet:
    from perfseer.models.registry import MODELS

    try:
        cls = MODELS[card["model"]["name"]][1]
        est = cls.from_dict(card["estimator"])
    except (KeyError, TypeError, ValueError) as e:
        raise PredictorError(f"predictor {card_path} holds no usable estimator ({e})", "re-train it") from e
    except PerfseerError as e:
        raise PredictorError(f"predictor {card_path}: {e.problem}", e.fix) from e
    return EstimatorNet(est, n_targets or len(card["targets"]))


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
        train_config: a :class:`~perfseer.training.trainer.TrainConfig`.
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
        pretrained: a pre-trained encoder card (``benchmarks/pretraining.py``): SeerNet's trunk starts
            from it (:func:`perfseer.training.pretrain.init_from_pretrained`).
        only_stages: train only these stages (``final``, ``fold0`` ... ``fold{kfold-1}``) into
            ``stage_dir`` and return ``(None, None)``: several processes can train the stages of one
            run side by side, and a later call without it (``train_config.resume``) loads them all
            and builds the card.

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
    fit = _fit_splits(fit)
    if fit != ("train",):
        sel.train, sel.test = [g for s in fit for g in sel.split(s)], []
    if max_train_models is not None:
        sel.train = _subsample(sel, max_train_models)
    from perfseer.training.trainer import TrainConfig

    train_config = train_config or TrainConfig()
    if kfold is not None and train_config.batch_size is None:  # the folds (fewer rows) keep the final network's
        from dataclasses import replace

        from perfseer.training.trainer import auto_batch_size

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
    from perfseer.data.dataset import dataset_extraction

    predictor = Predictor.from_training(name, method, net, targets, seen, training, scores,
                                        extraction=dataset_extraction(manifest))
    from perfseer.trust.calibrate import calibrate

    calibrate(predictor, sel)
    if kfold is not None:
        if on_stage is not None:
            on_stage(predictor)
        _kfold(predictor, method, sel, model_config, train_config, kfold, targets, stages, on_stage, pretrained)
    return predictor, fitted


def _fit_splits(fit) -> tuple[str, ...]:
    fit = (fit,) if isinstance(fit, str) else tuple(fit)
    if not fit or "val" in fit or any(s not in ("train", "test") for s in fit) or len(set(fit)) != len(fit):
        raise PredictorError(f"cannot fit on splits {list(fit)}",
                             "fit on train, or on train and test (validation is kept for early stopping)")
    return tuple(s for s in ("train", "test") if s in fit)


def _train_stage(method, train_set, val_set, model_config, train_config, sel, targets, stages, stage,
                 pretrained=None):
    """Train one stage (the final network or a fold), or load it when ``stages`` holds it finished."""
    from dataclasses import replace

    from perfseer.training.run import FittedMethod, train_method

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
        import shutil

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
    import hashlib

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
    from perfseer.training.data import targets_of
    from perfseer.training.metrics import evaluate

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
