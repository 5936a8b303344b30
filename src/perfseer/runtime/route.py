"""The one routing policy: which basis answers a request, and the rows it answers.

Which predictor answers for a device: a bundled measured-device predictor where one covers the
device (and phase, and precision if asked); else, for AMP inference on a GPU, the spec transfer
from the measured GPUs (:mod:`perfseer.runtime.transfer`) when its
leave-one-GPU-out beat the spec model's (the bundled card's ``logo``, written by
``benchmarks/spec_transfer_logo.py``); else the spec model.

A request is cut into :class:`Unit` s (:func:`plan`): a named predictor on one of its devices in
one phase, or a device as asked; each unit resolves to one basis (:func:`resolve`), which wants the
model extracted one way (:func:`extraction`) and answers through the
:class:`~perfseer.runtime.answer.Answerer` protocol (:func:`answer_units`).  ``perfseer.predict``,
``perfseer predict`` and ``perfseer serve`` all go through these functions.

Measured predictors win where both exist: on timm inference, leave-one-GPU-out, the spec model and
the transfer are further from the measurements than the measured-device SeerNets' test scores
(``benchmarks/spec_timm_logo.py``, ``benchmarks/spec_transfer_logo.py``, docs/concepts/spec-model.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from perfseer.data.splits import model_family
from perfseer.devices import UnknownDeviceError, get_device
from perfseer.errors import PerfseerError
from perfseer.features.extract import extract
from perfseer.features.perfgraph import PerfGraph
from perfseer.graph.extract import weight_work_enabled
from perfseer.runtime import transfer as xp
from perfseer.runtime.answer import Options
from perfseer.runtime.predictor import (Predictor, UnseenOperatorWarning, list_predictors, load_predictor,
                                        setting_precision)
from perfseer.runtime.spec import load_spec_model


def measured_predictors(device: str, phase: str = "infer", precision: str | None = None,
                        cards: list[dict] | None = None) -> list[tuple[str, str]]:
    """``(predictor name, table device string)`` of the bundled predictors covering ``device``
    (any alias) in ``phase`` at ``precision`` (``None``: any), latency target (``cards``: the
    bundled cards' :func:`~perfseer.runtime.predictor.list_predictors`, when the caller has read them)."""

    want = get_device(device)
    if want.parent is not None:
        return []  # a MIG slice is never the measured device
    out = []
    for p in list_predictors() if cards is None else cards:
        for key in p["targets"]:
            metric, _, rest = key.partition("@")
            dev, _, ph = rest.rpartition(":")
            if metric != "latency_ms" or ph != phase:
                continue
            try:
                if get_device(dev).name != want.name:
                    continue
            except (UnknownDeviceError, PerfseerError):
                continue
            if precision is not None and setting_precision(dev) not in (precision, None):
                continue
            out.append((p["name"], dev))
    return out


def routed_extraction(device: str, phase: str = "infer", precision: str | None = None,
                      prefer: str = "auto") -> bool | None:
    """How :func:`predict_on_device` wants the model extracted for ``device``: the routed measured
    predictor's ``weight_work`` (its card's extraction), or ``None`` (the spec model and the transfer
    take the default extraction)."""

    if prefer not in ("auto", "measured"):
        return None
    cards = list_predictors()
    found = measured_predictors(device, phase, precision, cards)
    return next(p for p in cards if p["name"] == found[0][0])["extraction"]["weight_work"] if found else None


BASES = ("auto", "spec", "transfer", "measured")


@dataclass(frozen=True)
class Unit:
    """What one set of rows is computed for: a named predictor (``kind="predictor"``) on one of
    its table devices in one phase, or a device as asked (``kind="device"``) with its phase,
    precision and the basis asked for (``auto``, ``spec``, ``transfer`` or ``measured``)."""

    kind: str
    name: str
    device: str | None
    phase: str
    precision: str | None = None
    basis: str = "auto"


@dataclass
class Resolved:
    """A unit's basis: who answers, with which options, extracted which way (``None``: the default)."""

    answerer: object
    options: Options
    weight_work: bool | None
    measured: str | None = None  # the table device string of a measured card answering for a device


def plan(devices: Sequence[str] = (), predictors: Sequence[str] = (), phase: str | None = None,
         precision: str | None = None, basis: str = "auto", load: Callable = load_predictor,
         strict: bool = True) -> tuple[list[Unit], list[str]]:
    """The units of a request, in the order its rows are answered, and notes on what was skipped.

    With ``predictors``: each predictor's targets on ``devices`` (table device strings; none: all)
    in ``phase`` (``None``: all); ``strict`` raises where a predictor covers none of them (else a
    note).  Without: one unit per device of ``devices`` (any registered device), phase ``infer``
    unless asked.

    Raises:
        PerfseerError: nothing to answer for, an unknown basis, or (``strict``) an uncovered device.
    """
    if basis not in BASES:
        raise PerfseerError(f"basis must be one of {', '.join(BASES)}, got {basis!r}", "pass basis='auto'")
    Options(phase=phase, precision=precision)  # validates both
    if not predictors:
        if not devices:
            raise PerfseerError("a prediction needs a device or a predictor",
                                "pass --device h100-sxm (perfseer devices lists them) or --predictor NAME")
        return [Unit("device", d, d, phase or "infer", precision, basis) for d in devices], []
    units, notes = [], []
    for name in predictors:
        p = load(name)
        if strict:
            for d in devices or [None]:
                p.columns(d, phase)  # names what the card covers when it does not cover this
        covered = [d for d in p.card["devices"] if not devices or d in devices]
        phases = [ph for ph in p.card["phases"] if phase is None or ph == phase]
        if not covered or not phases:
            notes.append(f"predictor {p.name} covers none of the devices/phase asked for")
        units += [Unit("predictor", p.name if name == p.name else str(name), d, ph, precision)
                  for d in covered for ph in phases]
    return units, notes


def resolve(unit: Unit, load: Callable = load_predictor, cards: list[dict] | None = None) -> Resolved:
    """The basis answering ``unit`` (see the module doc for the policy).

    Raises:
        PerfseerError: an unknown device; ``measured`` or ``transfer`` asked where it does not apply.
    """
    if unit.kind == "predictor":
        p = load(unit.name)
        return Resolved(p, Options(unit.device, unit.phase, unit.precision), p.weight_work)
    spec = get_device(unit.device)
    phase, precision, prefer = unit.phase, unit.precision, unit.basis
    found = measured_predictors(unit.device, phase, precision, cards) if prefer in ("auto", "measured") else []
    if found:
        name, dev = found[0]
        p = load(name)
        return Resolved(p, Options(dev, phase, None), p.weight_work, measured=dev)
    if prefer == "measured":
        raise PerfseerError(f"no bundled measured predictor covers {spec.name} ({phase})",
                            "drop --basis measured to use the spec model, or train one (perfseer train)")
    if prefer == "transfer" and not xp.applicable(spec, phase, precision):
        raise PerfseerError(f"the spec transfer does not cover {spec.name} {precision or ''} {phase}: it answers AMP "
                            "(fp16) inference on a full GPU with FP16 peak, bandwidth, SMs, clock and L2 in its spec",
                            "use --basis spec (the spec model) or --basis auto")
    if prefer == "transfer" or (prefer == "auto" and xp.applicable(spec, phase, precision) and xp.preferred()):
        return Resolved(xp.load_transfer(), Options(spec.name, phase, precision), None)
    return Resolved(load_spec_model(), Options(spec.name, phase, precision or "fp32"), None)


def extraction(unit: Unit, load: Callable = load_predictor) -> bool | None:
    """How ``unit``'s basis wants the model extracted: a measured card's ``weight_work`` (its
    card's extraction), or ``None`` (the default extraction)."""
    if unit.kind == "predictor":
        return load(unit.name).weight_work
    if unit.basis not in ("auto", "measured"):
        return None
    return routed_extraction(unit.device, unit.phase, unit.precision, unit.basis)


def answer_units(pg, wanted: Sequence[tuple[int, Unit]], family: str | None = None,
                 load: Callable = load_predictor, graph_at: Callable | None = None,
                 errors: str = "raise") -> dict[tuple[int, Unit], tuple[list[dict], list[str]]]:
    """Rows for each ``(batch size, unit)`` of ``wanted`` from the extracted PerfGraph ``pg``.

    The units of one predictor are answered together, so each batch size is bound and its
    features built once (``graph_at(b)``: ``pg``'s PyG graph at batch ``b``, when the caller keeps
    them) and the network runs once for all its devices and phases.  Each latency row gets its
    ``throughput_per_s`` (samples per second).  Warnings (operator types no training graph had)
    become the unit's notes.

    Args:
        errors: ``raise`` (a unit that cannot be answered raises) or ``note`` (a predictor that
            cannot answer gets empty rows and the error as its note: one failing predictor does not
            fail a whole request; a device that cannot be answered still raises).
    """
    bound: dict = {}

    def at(b: int):
        if graph_at is not None:
            return graph_at(b)
        if b not in bound:
            bound[b] = (pg if b == pg.batch_size else pg.with_batch(int(b))).to_pyg()
        return bound[b]

    asked = set(wanted)
    groups: dict = {}
    for b, unit in wanted:
        groups.setdefault((unit.kind, unit.name) if unit.kind == "predictor" else unit, []).append(b)
    out: dict = {}
    for group, bs in groups.items():
        bs = sorted(set(bs))
        units = [u for _, u in wanted if (u.kind, u.name) == group] if isinstance(group, tuple) else [group]
        units = list(dict.fromkeys(units))
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always", UnseenOperatorWarning)
                rows = _answer_group(group, units, pg, bs, family, load, at)
            notes = list(dict.fromkeys(str(w.message) for w in seen if issubclass(w.category, UnseenOperatorWarning)))
            for w in seen:
                if not issubclass(w.category, UnseenOperatorWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        except PerfseerError as e:
            if errors == "raise" or not isinstance(group, tuple):  # a device that cannot be answered: the request's error
                raise
            name = group[1] if isinstance(group, tuple) else group.name
            out.update({(b, u): ([], [f"{name}: {e}"]) for b, u in wanted if u in units})
            continue
        for r in rows:
            if r.get("metric") == "latency_ms" and r.get("value"):
                r["throughput_per_s"] = r["batch_size"] * 1000.0 / r["value"]
        for u in units:
            for b in bs:
                if (b, u) in asked:
                    mine = [r for r in rows if r["batch_size"] == b and (u.kind == "device" or
                            (r["device"] == u.device and r["phase"] == u.phase))]
                    out[b, u] = (mine, notes)
    return out


def _answer_group(group, units: list[Unit], pg, bs: list[int], family, load, at) -> list[dict]:
    if isinstance(group, Unit):  # a device as asked: its basis, latency rows only
        r = resolve(group, load)
        rows = r.answerer.answer(pg, bs, r.options, graphs=[at(b) for b in bs] if isinstance(r.answerer, Predictor)
                                 else None, family=family)
        if r.measured is not None:
            rows = [row for row in rows if row["metric"] == "latency_ms"]
            for row in rows:
                row["precision"] = setting_precision(r.measured) or "as measured"
        return rows
    p = load(group[1])  # every device and phase of the predictor in one forward pass
    rows = p.answer(pg, bs, Options(None, None, units[0].precision), graphs=[at(b) for b in bs], family=family)
    for row in rows:
        row["predictor"] = p.name
    return rows


def predict(model, *, device: str | Sequence[str] | None = None, predictor: str | Sequence[str] | None = None,
            batch: int | Sequence[int] = 1, phase: str | None = None, precision: str | None = None,
            basis: str = "auto", input_shape=None, dims: dict[str, int] | None = None, seq_len: int | None = None,
            gpus: int = 1, parallel: str | None = None, energy: bool = False) -> list[dict]:
    """Predict ``model``'s step time: what ``perfseer predict`` prints, as a list of rows.

    Args:
        model: anything :func:`perfseer.extract` takes (an ``.onnx`` path, ``timm:resnet50``,
            ``hf:gpt2``, an ``nn.Module`` with ``input_shape``...) or an extracted PerfGraph.
        device: one device or several (``perfseer devices``; a table device string with
            ``predictor``).  Alone, each is answered by the best basis: a bundled measured
            predictor covering it, else (AMP inference) the spec transfer, else the spec model.
        predictor: one predictor or several (a bundled name or a card path): their targets, on
            ``device`` only when given.
        batch: one batch size or several (the graph is extracted once and re-bound).
        phase: ``infer`` or ``train`` (default: a device alone ``infer``, a predictor all it covers).
        precision: ``fp32``, ``tf32``, ``fp16`` or ``bf16`` (default: a measured card's own, else fp32).
        basis: ``auto``, ``measured``, ``transfer`` or ``spec`` (devices alone).
        input_shape, dims, seq_len: as for :func:`perfseer.extract`.
        gpus, parallel, energy: several GPUs and energy are not predicted yet (refused, with the reason).

    Returns:
        One dict per (device or target, batch size): ``model``, ``batch_size``, ``metric``, ``unit``,
        ``device``, ``phase``, ``value``, ``interval``, ``in_domain``, ``domain_reasons``, ``flags``,
        ``basis`` and, for latency, ``throughput_per_s``.

    Raises:
        PerfseerError: a model that cannot be read, a device or predictor that does not exist or
            does not cover what was asked, bad batch sizes.

    Example::

        >>> rows = perfseer.predict("timm:resnet50", device="rtx4090", batch=[1, 32])  # doctest: +SKIP
    """
    devices = [device] if isinstance(device, str) else list(device or [])
    predictors = [predictor] if isinstance(predictor, (str, os.PathLike)) else list(predictor or [])
    batches = [batch] if isinstance(batch, int) else list(batch)
    if not batches or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1 for b in batches):
        raise PerfseerError(f"batch sizes must be integers >= 1, got {batch!r}", "pass e.g. batch=[1, 8, 64]")
    Options(gpus=gpus, parallel=parallel, energy=energy).single_device("perfseer")
    units, _ = plan(devices, [str(p) for p in predictors], phase, precision, basis)
    kept = {u: extraction(u) for u in units}
    default = weight_work_enabled()
    graphs: dict = {}
    for u in units:  # one extraction per setting the units need, the first unit's first
        k = default if kept[u] is None else kept[u]
        if k not in graphs:
            graphs[k] = model if isinstance(model, PerfGraph) else extract(
                model, batch=int(batches[0]), input_shape=input_shape, dims=dims, seq_len=seq_len, weight_work=k)
    name = model.graph.name if isinstance(model, PerfGraph) else str(model)
    family = model_family(model) if isinstance(model, str) else None
    rows, notes = [], []
    for k, pg in graphs.items():
        mine = [u for u in units if (default if kept[u] is None else kept[u]) == k]
        got = answer_units(pg, [(int(b), u) for u in mine for b in batches], family=family)
        for u in mine:
            for b in batches:
                unit_rows, unit_notes = got[int(b), u]
                rows += [dict(r, model=name) for r in unit_rows]
                notes += unit_notes
    for n in dict.fromkeys(notes):
        warnings.warn(n, UnseenOperatorWarning, stacklevel=2)
    return rows


def predict_on_device(model, device: str, batch: int | Sequence[int] = 1, phase: str = "infer",
                      precision: str | None = None, input_shape=None, dims=None, prefer: str = "auto",
                      seq_len: int | None = None) -> list[dict]:
    """:func:`predict` for one device (``prefer``: its ``basis``)."""
    return predict(model, device=device, batch=batch, phase=phase, precision=precision, basis=prefer,
                   input_shape=input_shape, dims=dims, seq_len=seq_len)
