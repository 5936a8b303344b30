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

import copy
import json
import math
import os
import secrets
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from perfseer import __version__
from perfseer.cards import CardFormat, peek_card, read_card, read_weights
from perfseer.errors import PerfseerError
from perfseer.features import schema
from perfseer.features.perfgraph import PerfGraph
from perfseer.features.pyg import attach_liveness
from perfseer.runtime.answer import answers_at
from perfseer.trust import bounds as bnd
from perfseer.trust import domain as dom
from perfseer.trust import intervals as itv
from perfseer.trust import step as st
from perfseer.trust.bounds import device_spec

if TYPE_CHECKING:
    from perfseer.runtime.net import EstimatorNet

# The network, its scalings and the extraction import torch or onnx: each is imported in the function
# that needs it ("deferred"), so that listing and describing cards (perfseer predictors) stays light.

CARD_FORMAT = "perfseer.predictor"
CARD_VERSION = 1
BUNDLED = Path(__file__).resolve().parents[1] / "predictors"
UNITS = {"latency_ms": "ms", "memory_mb": "MiB", "util_pct": "%", "energy_j": "J"}
EMBEDDINGS_KEY = "domain.embeddings"  # the training graphs' embeddings, stored beside the weights


MEMO_SIZE = 32  # graph lists whose predictions a Predictor keeps (a repeated call skips the network)
MEMO_MAX_GRAPHS = 16  # longer lists (a NAS loop's batches) are not keyed: hashing them would only cost


class _Memo(dict):
    """A Predictor's remembered answers (a dict that :func:`forget_predictions` can find)."""


_MEMOS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id -> every live _Memo


def forget_predictions() -> None:
    """Empty every Predictor's remembered answers (to time a first call on a graph)."""
    for m in list(_MEMOS.values()):
        m.clear()


def _graphs_key(net, graphs: list) -> bytes | None:
    """A key of the content of PyG graphs (every attribute, tensors by their bytes) and the network
    they run through; ``None`` when a graph has an attribute it cannot key (then nothing is kept)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    h.update(str(id(net)).encode())
    for g in graphs:
        items = getattr(g, "items", None)
        if items is None:
            return None
        for k, v in sorted(items(), key=lambda kv: kv[0]):
            h.update(str(k).encode() + b"=")
            if hasattr(v, "detach") and hasattr(v, "numpy"):
                a = np.ascontiguousarray(v.detach().cpu().numpy())
                h.update(f"{a.dtype.str}{a.shape}".encode())
                h.update(a.tobytes())
            elif isinstance(v, np.ndarray):
                a = np.ascontiguousarray(v)
                h.update(f"np{a.dtype.str}{a.shape}".encode())
                h.update(a.tobytes())
            elif v is None or isinstance(v, (int, float, str, bool, tuple)):
                h.update(repr(v).encode())
            else:
                return None
        h.update(b"|")
    return h.digest()


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
        self.net = net  # perfseer.fit.trainer.NeuralPredictor
        self.name = name or card.get("name", "")
        self.targets = [Target(t["metric"], t["device"], t["phase"]) for t in card["targets"]]
        self._seen = set(card.get("op_types_seen", []))
        self.domain_embeddings = None  # [N, D] training-graph embeddings (card["domain"]["embedding"])
        self._specs: dict = {}

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_training(cls, name: str, model_name: str, net, targets: Sequence[Target], op_types_seen,
                      training: dict, scores: dict, extraction: dict | None = None) -> "Predictor":
        """A predictor from a trained :class:`~perfseer.fit.trainer.NeuralPredictor`."""

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
        from safetensors.torch import save_file  # deferred: heavy, loaded on first use

        name = name or self.name
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.card["model"].get("kind", "neural") == "neural":
            weights = directory / f"{name}.safetensors"
            tmp = weights.with_name(f".{weights.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            state = {k: v.detach().cpu().contiguous() for k, v in self.net.model.state_dict().items()}
            if self.domain_embeddings is not None:
                import torch  # deferred: heavy, loaded on first use

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
        (:meth:`perfseer.fit.trainer.NeuralPredictor.predict_with_embeddings`).  Pass them on to
        :meth:`assess` (and a calibrated card's ``annotate``)."""
        graphs = list(graphs)
        key = _graphs_key(self.net, graphs) if len(graphs) <= MEMO_MAX_GRAPHS else None
        memo = self.__dict__.get("_memo")
        if memo is None:
            memo = self.__dict__["_memo"] = _Memo()
            _MEMOS[id(memo)] = memo
        if key is not None and key in memo:
            values, emb = memo[key]
        else:
            values, emb = self._predict_with_embeddings(graphs)
            if key is not None:
                memo[key] = (values, emb)
                while len(memo) > MEMO_SIZE:
                    memo.pop(next(iter(memo)))
        return np.array(values, copy=True), (None if emb is None else np.array(emb, copy=True))

    def _predict_with_embeddings(self, graphs: list) -> tuple[np.ndarray, np.ndarray | None]:
        from perfseer.runtime.net import embeddings  # deferred: torch, onnx or pandas

        if not self._embedding_checked():
            if hasattr(self.net, "annotate") and hasattr(self.net, "predict_with_embeddings"):
                return self.net.predict_with_embeddings(graphs)  # the calibrated card's interval reads them
            return self.predict_graphs(graphs), None
        both = getattr(self.net, "predict_with_embeddings", None)
        values, emb = both(graphs) if both is not None else (self.predict_graphs(graphs), None)
        if emb is None:
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
            had; a warning names them too).  A latency never decreases with the batch
            (:mod:`perfseer.runtime.monotone`; :meth:`predict_bound` gives the network's own answers).
        """
        from perfseer.data.splits import model_family  # deferred: torch, onnx or pandas
        from perfseer.features.extract import extract  # deferred: torch, onnx or pandas

        batches = [batch] if isinstance(batch, int) else list(batch)
        if not batches or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1 for b in batches):
            raise PredictorError(f"batch sizes must be integers >= 1, got {batch!r}", "pass e.g. batch=[1, 8, 64]")
        self.columns(device, phase)  # an uncovered device fails before the extraction
        pg = model if isinstance(model, PerfGraph) else extract(model, batch=int(batches[0]), input_shape=input_shape,
                                                                 dims=dims, seq_len=seq_len,
                                                                 weight_work=self.weight_work)
        name = str(model) if not isinstance(model, PerfGraph) else pg.graph.name

        family = model_family(model) if isinstance(model, str) else None
        # never faster at a larger batch: the envelope over the powers of two (perfseer.runtime.monotone)
        from perfseer.runtime.monotone import envelope, ladder

        rows = self.predict_bound(pg, ladder(batches), device=device, phase=phase, name=name, family=family,
                                  _stacklevel=3)
        kept = envelope(rows, batches, usable=lambda r: not r.get("outside_space"))
        return [r for b in batches for r in kept if r["batch_size"] == int(b)]

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
            graphs = [pg.at_batch(int(b)).to_pyg() for b in batches]
        elif len(graphs) != len(batches):
            raise PredictorError(f"{len(graphs)} graphs for {len(batches)} batch sizes", "pass one graph per batch size")
        if getattr(self.net, "reads_liveness", False) and any(getattr(g, "live", None) is None for g in graphs):
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
        space = self.space_reasons([shape] * len(graphs), emb)
        step_domain = (self.card.get("domain") or {}).get("step")  # a training card's batch (trust.step)
        step = st.step_reasons(step_domain, graphs)
        rows = [{"model": name, "batch_size": int(b), "metric": self.targets[c].metric, "unit": self.targets[c].unit,
                 "device": self.targets[c].device, "phase": self.targets[c].phase, "value": checked[i][c]["value"],
                 "interval": checked[i][c]["interval"], "in_domain": verdicts[i][0],
                 "domain_reasons": verdicts[i][1], "flags": checked[i][c]["flags"] + [
                     f"outside the card's step domain: {x}" for x in step[i]], "unseen_ops": unseen,
                 "precision": row_precision(self.targets[c].device), "outside_space": space[i],
                 **({"outside_step": step[i]} if step_domain else {}),
                 "basis": self.card.get("basis") or f"measured-device predictor {self.name}",
                 "basis_kind": "measured", "basis_seen": True}
                for i, b in enumerate(batches) for c in cols]
        annotate = getattr(self.net, "annotate", None)  # calibrated cards: interval and domain per row
        if annotate is not None:
            at = [i for i, _ in enumerate(batches) for _ in cols]
            annotate(rows, [graphs[i] for i in at], embeddings=None if emb is None else np.asarray(emb)[at])
        return [bnd.refuse_above_ceiling(r) for r in rows]  # a value over the sanity ceiling is no answer

    def answer(self, pg, batches: Sequence[int], options, graphs: Sequence | None = None,
               family: str | None = None) -> list[dict]:
        """:class:`~perfseer.runtime.answer.Answerer`: :meth:`predict_bound` for the options' device
        and phase (``None``: every target the card covers).  A card answers at the precision it was
        measured at: asked for another, it refuses."""
        options.single_device(f"predictor {self.name}")
        if options.precision is not None:
            own = {setting_precision(t.device) for t in self.columns_targets(options.device, options.phase)}
            if not all(answers_at(options.precision, o) for o in own):
                raise PredictorError(f"predictor {self.name} was measured at {', '.join(sorted(own - {None}))}, "
                                     f"not {options.precision}", "drop the precision, or ask another basis "
                                     "(--basis spec)")
        return self.predict_bound(pg, batches, graphs=graphs, device=options.device, phase=options.phase,
                                  family=family, _stacklevel=4)

    def space_reasons(self, input_shapes: Sequence, embeddings: np.ndarray | None) -> list[list[str]]:
        """Why each graph lies outside this card's model space (:func:`perfseer.trust.domain.space_reasons`:
        its input far from the training inputs, or its embedding far from every training graph)."""
        domain = self.card.get("domain")
        ratios = None
        if embeddings is not None and self._embedding_checked():
            ratios = dom.nearest_distance(self.domain_embeddings, np.asarray(embeddings)) / float(
                domain["embedding"]["threshold"])
        return dom.space_reasons(domain, input_shapes, ratios, len(input_shapes))

    def columns_targets(self, device: str | None = None, phase: str | None = None) -> list[Target]:
        """The targets of :meth:`columns`."""
        return [self.targets[c] for c in self.columns(device, phase)]

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
                ``None``: not checked); a family the card's domain does not list widens the interval.
            embeddings: accepted and not used (the embedding distance decides the model space,
                :meth:`space_reasons`, not the verdict).
            extra_reasons: reasons every graph is out of domain for (an extraction unlike the
                training graphs', :meth:`extraction_mismatch`).

        Returns:
            ``(verdicts, checked)``: per graph ``(in_domain, reasons)``
            (:func:`perfseer.trust.domain.verdicts`); per graph and target ``{"value", "interval":
            [lo, hi], "flags"}``: the value clipped to the physical bounds, its 90 % interval
            (widened by the card's ``ood_factor`` out of domain, and in domain for the reasons of
            :func:`perfseer.trust.domain.interval_flags`, which are then among the flags), and what
            was clipped.
        """
        domain = self.card.get("domain")
        verdicts = dom.verdicts(domain, graphs, op_types, input_shapes)
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
            # an unseen family or a step outside the training steps: in domain, the interval widened
            widen = dom.interval_flags(domain, graphs, families, factor, v, t.key, t.unit)
            if q is None:
                lo, hi = np.full(len(v), np.nan), np.full(len(v), np.nan)
            else:
                lo, hi = itv.bounds(v, q, inside & np.array([not w for w in widen], dtype=bool), factor)
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
                else:
                    flags.extend(widen[i])
                interval = [l, h] if q is not None else None
                checked[i][c] = {"value": value, "interval": interval, "flags": flags}
        return verdicts, checked

    def _spec(self, device: str):
        if device not in self._specs:
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


def setting_precision(device_string: str) -> str | None:
    """The precision (:data:`perfseer.runtime.answer.PRECISIONS`) of a measurement-table device
    string's setting (``rtx3090/amp-nchw-pt240`` -> ``amp-fp16``), or ``None`` where it says none."""
    _, _, setting = device_string.partition("/")
    head = setting.split("-", 1)[0]
    return {"amp": "amp-fp16", "amp_fp16": "amp-fp16", "amp_bf16": "amp-bf16", "bf16": "bf16", "fp16": "fp16",
            "fp32": "fp32", "tf32": "tf32"}.get(head)


def row_precision(device_string: str) -> str:
    """The ``precision`` a measured row names: its setting's, or ``as measured`` where the setting
    does not record it."""
    return setting_precision(device_string) or "as measured"


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
            "precision": domain.get("precision"), "embedding_threshold": emb.get("threshold"),
            **({"step": [2 ** x for x in domain["step"]["range"]]} if domain.get("step") else {})}


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
        folder = next((f for f in predictor_folders() if (f / f"{text}.json").is_file()), None)
        if folder is not None:
            text = str(folder / text)
    return Path(text + ".json"), Path(text + ".safetensors")


# The sections of a predictor card and the JSON type each must have (absent or null: not recorded).
_SECTIONS = {"model": dict, "targets": list, "scaling": dict, "estimator": dict, "domain": dict, "intervals": dict,
             "calibration": dict, "extraction": dict, "training": dict, "scores": dict, "op_types_seen": list,
             "devices": list, "phases": list}


def _check_sections(card: dict, path) -> None:
    """Refuse a card whose sections have the wrong JSON type (e.g. an integer ``domain``) or whose
    targets are not ``{"metric", "device", "phase"}`` strings, before anything reads them."""
    fix = "the card is corrupt: re-train or re-download the predictor"
    for key, kind in _SECTIONS.items():
        if card.get(key) is not None and not isinstance(card[key], kind):
            raise PredictorError(f"{path}: section {key!r} is a {type(card[key]).__name__}, not a "
                                 f"{'JSON object' if kind is dict else 'list'}", fix)
    targets = card.get("targets")
    if not targets or not all(isinstance(t, dict) and all(isinstance(t.get(k), str) for k in ("metric", "device", "phase"))
                              for t in targets):
        raise PredictorError(f"{path}: 'targets' must list objects with string metric, device and phase", fix)


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
    import torch  # deferred: heavy, loaded on first use

    from perfseer.models.registry import build_from_dict  # deferred: torch, onnx or pandas
    from perfseer.runtime.net import NeuralPredictor  # deferred: torch, onnx or pandas
    from perfseer.runtime.scaling import FeatureScaler, TargetScaler  # deferred: torch, onnx or pandas

    card_path, weights = _paths(name_or_path)
    if not card_path.is_file():
        names = ", ".join(p["name"] for p in list_predictors()) or "none"
        raise PredictorError(f"no predictor named or at {name_or_path}",
                             f"use a bundled name ({names}) or the path of a predictor's .json card")
    card = read_card(card_path, PREDICTOR_CARD)
    _check_sections(card, card_path)
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


_LOADED: dict = {}  # (card path, its and its weights' (mtime_ns, size)) -> Predictor, most recent last
_LOADED_MAX = 16  # predictors kept loaded: the bundled cards and a few of the user's


def cached_predictor(name_or_path: str | os.PathLike) -> Predictor:
    """:func:`load_predictor` (on the CPU), kept loaded: a card is read and its network built again
    only when its card or weights file changed.  The routing (:mod:`perfseer.runtime.route`) loads
    cards through this, so a program (or the warm process of the CLI) that predicts many times
    pays a card's loading once.  Callers must not modify the returned predictor.

    Raises:
        PredictorError: as :func:`load_predictor`.
    """
    card_path, weights = _paths(name_or_path)
    stamps = []
    for f in (card_path, weights):
        try:
            st = f.stat()
            stamps.append((st.st_mtime_ns, st.st_size))
        except OSError:
            stamps.append(None)
    key = (str(card_path.resolve()) if stamps[0] else str(card_path), *stamps)
    hit = _LOADED.pop(key, None)
    if hit is None:
        hit = load_predictor(name_or_path)
        for old in [k for k in _LOADED if k[0] == key[0]]:  # an older version of the same file
            del _LOADED[old]
        while len(_LOADED) >= _LOADED_MAX:
            del _LOADED[next(iter(_LOADED))]
    _LOADED[key] = hit
    return hit


def _calibrated(card: dict, net):
    """The network of a calibrated card (interval, domain and, for ``loglinear``, its correction)."""
    from perfseer.runtime.corrections import wrap_loaded  # deferred: torch, onnx or pandas

    if "calibration" not in card:
        return net

    return wrap_loaded(card, net)


def _load_estimator(card: dict, card_path: Path, n_targets: int | None = None) -> EstimatorNet:
    from perfseer.models.registry import MODELS  # deferred: torch, onnx or pandas
    from perfseer.runtime.net import EstimatorNet  # deferred: torch, onnx or pandas

    try:
        cls = MODELS[card["model"]["name"]][1]
        est = cls.from_dict(card["estimator"])
    except (KeyError, TypeError, ValueError) as e:
        raise PredictorError(f"predictor {card_path} holds no usable estimator ({e})", "re-train it") from e
    except PerfseerError as e:
        raise PredictorError(f"predictor {card_path}: {e.problem}", e.fix) from e
    return EstimatorNet(est, n_targets or len(card["targets"]))


def list_predictors(directory: str | os.PathLike | None = None) -> list[dict]:
    """The cards of the predictors in ``directory`` (default: the bundled ones, then those of the
    folders in ``$PERFSEER_PREDICTORS``; a name already found is not listed again), described."""
    return [copy.deepcopy(item) for item in listed_predictors(directory)]


def listed_predictors(directory: str | os.PathLike | None = None) -> list[dict]:
    """:func:`list_predictors` without copying the descriptions: for the routing, which reads them
    several times a request and never modifies them (callers must not)."""
    out, seen = [], set()
    for folder in [Path(directory)] if directory is not None else predictor_folders():
        for card_path in sorted(folder.glob("*.json")):
            item = _described(card_path)
            if item is not None and item["name"] not in seen:
                seen.add(item["name"])
                out.append(item)
    return out


_DESCRIBED: dict = {}  # card path -> ((mtime_ns, size), description or None): routing lists the cards often


def _described(card_path: Path) -> dict | None:
    """:meth:`Predictor.describe` of the card at ``card_path`` (``None``: not a predictor card),
    read again only when the file changed."""
    try:
        st = card_path.stat()
    except OSError:
        return None
    key = (st.st_mtime_ns, st.st_size)
    hit = _DESCRIBED.get(card_path)
    if hit is None or hit[0] != key:
        card = peek_card(card_path, PREDICTOR_CARD)
        if card is not None:
            card["_path"] = str(card_path)
        hit = _DESCRIBED[card_path] = (key, None if card is None else Predictor.describe(_CardOnly(card, card_path.stem)))
    return hit[1]


#: Folders of user predictor cards (e.g. ``perfseer calibrate --out DIR``), separated by the
#: system's path separator: searched by name, and by ``--device``, after the bundled ones.
PREDICTORS_ENV = "PERFSEER_PREDICTORS"


def predictor_folders() -> list[Path]:
    """The bundled folder, then each existing folder of ``$PERFSEER_PREDICTORS``."""
    user = [Path(p).expanduser() for p in os.environ.get(PREDICTORS_ENV, "").split(os.pathsep) if p.strip()]
    return [BUNDLED] + [p for p in user if p.is_dir()]


class _CardOnly:
    def __init__(self, card: dict, name: str):
        self.card, self.name = card, card.get("name", name)


