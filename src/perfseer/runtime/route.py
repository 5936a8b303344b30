"""The one routing policy: which basis answers a request, and the rows it answers.

Which predictor answers for a device: a bundled measured-device predictor where one covers the
device (and phase, and precision if asked); else, for AMP inference on a GPU, the spec transfer
from the measured GPUs (:mod:`perfseer.runtime.transfer`) when its
leave-one-GPU-out beat the spec model's (the bundled card's ``logo``, written by
``benchmarks/lib/spec_transfer_logo.py``); else the spec model.

A request is cut into :class:`Unit` s (:func:`plan`): a named predictor on one of its devices in
one phase, or a device as asked; each unit resolves to one basis (:func:`resolve`), which wants the
model extracted one way (:func:`extraction`) and answers through the
:class:`~perfseer.runtime.answer.Answerer` protocol (:func:`answer_units`).  ``perfseer.predict``,
``perfseer predict`` and ``perfseer serve`` all go through these functions.

**Honest answers.**  A measured card answers a device by default only for models inside its model
space (:func:`perfseer.trust.domain.space_reasons`); for the others, and for a value that hit a
sanity bound (:data:`SANITY_FLAGS`), the routing falls through to the next basis (the transfer, the
spec model), whose row names the basis it fell back from and why (``fallback_from``); so does a
training card's row outside its step domain (:mod:`perfseer.trust.step`), answered then by the card
scaled by the spec model's batch ratio (:mod:`perfseer.runtime.anchor`).  A value that
hit a sanity bound is never shown: its row has ``"value": None`` and a ``reason``.  Asked for
explicitly (``--predictor``, ``--basis measured``), a card refuses a model outside its space unless
forced (``force=True``, ``--force``).  Several devices in one request share one precision: the one
asked, else the first measured card's setting (:func:`plan`).

Measured predictors win where both exist: on timm inference, leave-one-GPU-out, the spec model and
the transfer are further from the measurements than the measured-device SeerNets' test scores
(``benchmarks/lib/spec_timm_logo.py``, ``benchmarks/lib/spec_transfer_logo.py``, docs/concepts/spec-model.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from perfseer.data.dataset import SkeletonCache, default_cache_dir, exporter_versions
from perfseer.data.splits import model_family
from perfseer.devices import UnknownDeviceError, get_device
from perfseer.errors import PerfseerError
from perfseer.features.extract import extract, extract_skeleton
from perfseer.features.perfgraph import PerfGraph
from perfseer.graph.detection import DETECTION_DIM
from perfseer.graph.extract import weight_work_enabled
from perfseer.runtime import anchor, monotone
from perfseer.runtime import transfer as xp
from perfseer.runtime.answer import Options, answers_at
from perfseer.runtime.predictor import Predictor, UnseenOperatorWarning, setting_precision

# a request reads the cards' descriptions several times and loads a card up to three times: both cached
from perfseer.runtime.predictor import cached_predictor as load_predictor
from perfseer.runtime.predictor import listed_predictors as list_predictors
from perfseer.runtime.spec import load_spec_model
from perfseer.runtime.threads import limited
from perfseer.sources import split_reference
from perfseer.sources.hf import is_local_config
from perfseer.sources.load import load_skeleton


def measured_predictors(device: str, phase: str = "infer", precision: str | None = None,
                        cards: list[dict] | None = None) -> list[tuple[str, str]]:
    """``(predictor name, table device string)`` of the bundled predictors covering ``device``
    (any alias) in ``phase`` at ``precision`` (``None``: any), latency target (``cards``: the
    bundled cards' :func:`~perfseer.runtime.predictor.list_predictors`, when the caller has read them)."""

    try:
        want = get_device(device)
    except UnknownDeviceError:  # a device only a user card (PERFSEER_PREDICTORS) was measured on
        want = None
    if want is not None and want.parent is not None:
        return []  # a MIG slice is never the measured device
    out = []
    for p in list_predictors() if cards is None else cards:
        for key in p["targets"]:
            metric, _, rest = key.partition("@")
            dev, _, ph = rest.rpartition(":")
            if metric != "latency_ms" or ph != phase:
                continue
            if want is None:  # by the card's own device string: "mybox" finds "mybox/amp"
                if device.lower() not in (dev.lower(), dev.split("/")[0].lower()):
                    continue
            else:
                try:
                    if get_device(dev).name != want.name:
                        continue
                except (UnknownDeviceError, PerfseerError):
                    continue
            if not answers_at(precision, setting_precision(dev)):
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
    force: bool = False  # a measured card answers even outside its model space


@dataclass
class Resolved:
    """A unit's basis: who answers, with which options, extracted which way (``None``: the default)."""

    answerer: object
    options: Options
    weight_work: bool | None
    measured: str | None = None  # the table device string of a measured card answering for a device


def plan(devices: Sequence[str] = (), predictors: Sequence[str] = (), phase: str | None = None,
         precision: str | None = None, basis: str = "auto", load: Callable = load_predictor,
         strict: bool = True, force: bool = False) -> tuple[list[Unit], list[str]]:
    """The units of a request, in the order its rows are answered, and notes on what was skipped.

    With ``predictors``: each predictor's targets on ``devices`` (table device strings; none: all)
    in ``phase`` (``None``: all); ``strict`` raises where a predictor covers none of them (else a
    note).  Without: one unit per device of ``devices`` (any registered device), phase ``infer``
    unless asked.  Several devices without a precision are compared at one: the setting of the
    first measured card that would answer one of them (:func:`comparison_precision`).

    Raises:
        PerfseerError: nothing to answer for, an unknown basis, or (``strict``) an uncovered device.
    """
    if basis not in BASES:
        raise PerfseerError(f"basis must be one of {', '.join(BASES)}, got {basis!r}", "pass basis='auto'")
    precision = Options(phase=phase, precision=precision).precision  # validates both, aliases mapped
    if not predictors:
        if not devices:
            raise PerfseerError("a prediction needs a device or a predictor",
                                "pass --device h100-sxm (perfseer devices lists them) or --predictor NAME")
        if precision is None and len(set(devices)) > 1:
            precision = comparison_precision(devices, phase or "infer", basis)
        units = [Unit("device", d, d, phase or "infer", precision, basis, force) for d in devices]
        cards = list_predictors()
        for u in units:  # an impossible request fails here, before the model is exported
            check_unit(u, cards)
        return units, []
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
        units += [Unit("predictor", p.name if name == p.name else str(name), d, ph, precision, force=force)
                  for d in covered for ph in phases]
    return units, notes


def comparison_precision(devices: Sequence[str], phase: str, basis: str = "auto") -> str | None:
    """The one precision a comparison of ``devices`` uses when none was asked: the setting of the
    first measured card that would answer one of them (``None``: no measured card records one, so
    each basis takes its default, fp32 for the spec model)."""
    if basis not in ("auto", "measured"):
        return None
    cards = list_predictors()
    for d in devices:
        try:
            found = measured_predictors(d, phase, None, cards)
        except (UnknownDeviceError, PerfseerError):
            continue  # an unknown device fails later, with its own error
        for _, dev in found[:1]:
            own = setting_precision(dev)
            if own is not None:
                return own
    return None


def resolve(unit: Unit, load: Callable = load_predictor, cards: list[dict] | None = None) -> Resolved:
    """The basis answering ``unit`` (see the module doc for the policy).

    Raises:
        PerfseerError: an unknown device; ``measured`` or ``transfer`` asked where it does not apply.
    """
    if unit.kind == "predictor":
        p = load(unit.name)
        return Resolved(p, Options(unit.device, unit.phase, unit.precision), p.weight_work)
    phase, precision, prefer = unit.phase, unit.precision, unit.basis
    found = measured_predictors(unit.device, phase, precision, cards) if prefer in ("auto", "measured") else []
    if found:
        name, dev = found[0]
        p = load(name)
        return Resolved(p, Options(dev, phase, None, force=unit.force), p.weight_work, measured=dev)
    return _unmeasured(unit, get_device(unit.device))


def _unmeasured(unit: Unit, spec) -> Resolved:
    """:func:`resolve` where no measured card answers: the transfer or the spec model."""
    phase, precision, prefer = unit.phase, unit.precision, unit.basis
    _check_unmeasured(unit, spec)
    if prefer == "transfer" or (prefer == "auto" and xp.applicable(spec, phase, precision) and xp.preferred()):
        return Resolved(xp.load_transfer(), Options(spec.name, phase, precision), None)
    return Resolved(load_spec_model(), Options(spec.name, phase, precision or "fp32"), None)


def _check_unmeasured(unit: Unit, spec) -> None:
    """Raise where the basis asked for cannot answer ``unit`` without a measured card."""
    phase, precision, prefer = unit.phase, unit.precision, unit.basis
    if prefer == "measured":
        raise PerfseerError(f"no bundled measured predictor covers {spec.name} ({phase})",
                            "drop --basis measured to use the spec model, or train one (perfseer train)")
    if prefer == "transfer" and not xp.applicable(spec, phase, precision):
        raise PerfseerError(f"the spec transfer does not cover {spec.name} {precision or ''} {phase}: it answers AMP "
                            "(fp16) inference on a full GPU with FP16 peak, bandwidth, SMs, clock and L2 in its spec",
                            "use --basis spec (the spec model) or --basis auto")


def check_unit(unit: Unit, cards: list[dict] | None = None) -> None:
    """Raise, before any model is exported, where a device unit cannot be answered as asked: an
    unknown device, ``measured`` where no bundled card covers the device and phase, ``transfer``
    where it does not apply (a predictor unit is checked by :func:`plan`)."""
    if unit.kind != "device":
        return
    if unit.basis in ("auto", "measured") and measured_predictors(unit.device, unit.phase, unit.precision, cards):
        return
    _check_unmeasured(unit, get_device(unit.device))


def fallbacks(unit: Unit, first: Resolved) -> list[Resolved]:
    """The bases tried after ``first`` (a device unit's :func:`resolve`) for rows it does not
    answer: a measured card's, the transfer or the spec model (at the card's precision when none
    was asked); the transfer's, the spec model.  An explicit basis has none."""
    if unit.kind != "device" or unit.basis != "auto":
        return []
    try:
        get_device(unit.device)
    except UnknownDeviceError:  # a user card's own device: no spec sheet to fall back on
        return []
    if unit.precision is None and first.measured is not None:  # the fall-back answers at the card's precision
        unit = dataclasses.replace(unit, precision=setting_precision(first.measured))
    spec = get_device(unit.device)
    out = [_unmeasured(unit, spec)] if first.measured is not None else []
    if out and anchor.adopted(first.answerer):  # outside a training card's step domain: anchored on it
        out.insert(0, Resolved(anchor.Anchored(first.answerer, first.measured, out[0].answerer, out[0].options),
                               Options(first.measured, unit.phase, None), first.weight_work))
    if isinstance((out[-1] if out else first).answerer, xp.TransferPredictor):
        out.append(Resolved(load_spec_model(), Options(spec.name, unit.phase, unit.precision or "fp32"), None))
    return out


#: The words of the flags that say a value hit a physical or sanity bound (perfseer.trust.bounds.check).
SANITY_FLAGS = ("above the sanity ceiling", "below the physical floor", "the network returned")


def refusal(row: dict, force: bool = False) -> tuple[str, str] | None:
    """``(why, kind)`` ``row`` is not shown as a prediction, or ``None``: a measured card's model
    lies outside its model space (``kind`` ``space``; unless ``force``), or the value hit a sanity
    bound (``sanity``)."""
    space = [] if force else list(row.get("outside_space") or [])
    if space:
        return "the model is outside the model space of " + _who(row) + ": " + "; ".join(space), "space"
    hit = [f for f in row.get("flags") or [] if any(k in f for k in SANITY_FLAGS)]
    if hit:
        return f"{_who(row)} gave a value that hit a sanity bound: " + "; ".join(hit), "sanity"
    return None


FIXES = {"space": "pass --force (force=True) to answer with it anyway, or ask with --device alone so that the "
                  "routing takes a basis that covers the model",
         "sanity": "read the fall-back row beside it where there is one; else ask another basis (--basis spec) "
                   "or check the model's input shape"}


def _who(row: dict) -> str:
    basis = str(row.get("basis") or "the basis")
    return basis.split(" (")[0]


def refused(row: dict, reason: str, fix: str) -> dict:
    """``row`` as a refusal: no value, no interval, the reason and what to do."""
    out = dict(row, value=None, interval=None, reason=f"{reason}; {fix}")
    out.pop("throughput_per_s", None)
    return out


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
            bound[b] = pg.at_batch(int(b)).to_pyg()
        return bound[b]

    asked = set(wanted)
    many = errors == "note" or len({u for _, u in wanted}) > 1  # a device no basis answers: refused rows
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
                rows = _answer_group(group, units, pg, bs, family, load, at, many)
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
        skipped = {p["basis"] for r in rows for p in r.get("passed_over") or []} - {r.get("basis") for r in rows}
        notes = [n for n in notes if not any(f"predictor {str(b).rpartition(' ')[2]}:" in n for b in skipped)]
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


def _answer_group(group, units: list[Unit], pg, bs: list[int], family, load, at, many: bool = False) -> list[dict]:
    if isinstance(group, Unit):  # a device as asked: its bases in turn, latency rows only
        return _answer_device(group, pg, bs, family, load, at, many)
    p = load(group[1])  # every device and phase of the predictor in one forward pass
    u0 = units[0]
    rows = monotone.answer(p, pg, bs, Options(None, None, u0.precision, force=u0.force), at=at, family=family,
                           usable=lambda row: refusal(row, u0.force) is None)  # never faster at a larger batch
    for row in rows:
        row["predictor"] = p.name
    return _screened(rows, u0.force, f"predictor {p.name}", pg)


def _screened(rows: list[dict], force: bool, who: str, pg) -> list[dict]:
    """The rows of a basis asked for explicitly: refused where :func:`refusal` says so; a model
    outside its model space at every batch size is refused as a whole (an error)."""
    outside = [] if force else [r for r in rows if r.get("outside_space")]
    if rows and len(outside) == len(rows):
        why = "; ".join(dict.fromkeys(x for r in rows for x in r["outside_space"]))
        raise PerfseerError(f"{who} does not answer for {pg.graph.name or 'the model'}: it lies outside its model "
                            f"space ({why})", FIXES["space"])
    out = []
    for r in rows:
        why = refusal(r, force)
        out.append(r if why is None else refused(r, why[0], FIXES[why[1]]))
    return out


def _rows_of(r: Resolved, pg, bs: list[int], family, at, unit: Unit | None = None) -> list[dict]:
    """One basis's rows for a device unit at ``bs``."""
    reads = isinstance(r.answerer, (Predictor, anchor.Anchored))
    rows = monotone.answer(r.answerer, pg, bs, r.options, at=at if reads else None, family=family,
                           usable=lambda row: (refusal(row, r.options.force) or _off_step(row, unit)) is None)
    if r.measured is not None:
        rows = [row for row in rows if row["metric"] == "latency_ms"]
    return rows


def _answer_device(unit: Unit, pg, bs: list[int], family, load, at, many: bool) -> list[dict]:
    """A device unit's rows: each basis of its chain (:func:`resolve`, then :func:`fallbacks`) in
    turn answers the batch sizes the ones before it did not: those outside a measured card's model
    space (passed over, not shown) or whose value hit a sanity bound (shown refused).  The row that
    answers names the first basis it fell back from (``fallback_from``: ``{"basis", "reason"}``) and
    every one passed over (``passed_over``, in order).  A basis that raises is skipped
    for the next; where none answers, the rows are refusals (``many``: the request has other
    units) or the first error is raised."""
    first = resolve(unit, load)
    chain = [first] + fallbacks(unit, first)
    shown: dict[int, list[dict]] = {b: [] for b in bs}
    prior: dict[int, list[dict]] = {}  # batch -> the bases passed over or refused, and why
    last: dict[int, dict] = {}  # batch -> the last row passed over (shown refused when nothing answers)
    pending, error = list(bs), None
    for k, r in enumerate(chain):
        if not pending:
            break
        try:
            rows = _rows_of(r, pg, pending, family, at, unit)
        except PerfseerError as e:
            error = error or e
            continue
        nxt = []
        insane = _sanity_hit(rows, unit.force) if k < len(chain) - 1 else None
        for row in rows:
            b = row["batch_size"]
            if b in prior:
                row["fallback_from"], row["passed_over"] = prior[b][0], list(prior[b])
            why = refusal(row, unit.force) or _off_step(row, unit)
            if why is None and insane is not None:  # one basis for the call: the next answers every batch size
                why = (f"{_who(row)} hit a sanity bound at batch {insane} of this call, so its answers at the other "
                       "batch sizes are not used either (one basis answers a device across the batch sizes)", "space")
            if why is None:
                shown[b].append(row)
                continue
            nxt.append(b)
            prior.setdefault(b, []).append({"basis": row.get("basis"), "reason": why[0]})
            if why[1] == "space" and unit.basis == "auto":
                last[b] = dict(refused(row, why[0], ""), reason=why[0])  # passed over: shown only if nothing answers
            else:
                shown[b].append(refused(row, why[0], FIXES[why[1]]))
        pending = list(dict.fromkeys(nxt))
    if unit.basis == "measured" and not many and bs and all(
            r.get("value") is None and (r.get("outside_space") and not unit.force) for b in bs for r in shown[b]):
        raise PerfseerError(shown[bs[0]][0]["reason"].split("; pass --force")[0], FIXES["space"])
    for b in pending:
        if b in last:
            other = f"no other basis answers ({getattr(error, 'problem', error)}); " if error is not None else ""
            shown[b].append(dict(last[b], reason=f"{last[b]['reason']}; {other}pass --force (force=True) to "
                                                 "answer with it anyway"))
        elif not shown[b]:
            if error is not None and not many:
                raise error
            shown[b].append(_no_answer(unit, pg, b, error))
    return monotone.across([row for b in bs for row in shown[b]])


def _off_step(row: dict, unit: Unit | None) -> tuple[str, str] | None:
    """``(why, "space")`` where a measured training card's row lies outside its step domain
    (:mod:`perfseer.trust.step`) and the routing may pass it over (``auto``, not forced)."""
    if unit is None or unit.kind != "device" or unit.basis != "auto" or unit.force or not row.get("outside_step"):
        return None
    return f"the step is outside the step domain of {_who(row)}: " + "; ".join(row["outside_step"]), "space"


def _sanity_hit(rows: list[dict], force: bool) -> int | None:
    """The first batch size at which a basis's value hit a sanity bound, or ``None``.  A basis
    whose value is physically impossible at one batch size of a model is passed over at all of
    them when another basis follows (:func:`_answer_device`): answering the other batch sizes with
    it and that one with the next would mix two bases along the batch axis, and their different
    levels made latency fall as the batch grew (AlexNet on an RTX 4060: 2.15 ms at batch 1 from
    the spec model, 0.88 ms at batch 2 from the transfer)."""
    for row in rows:
        why = refusal(row, force)
        if why is not None and why[1] == "sanity":
            return int(row["batch_size"])
    return None


def _no_answer(unit: Unit, pg, b: int, error) -> dict:
    """The row of a device no basis answered for (a comparison keeps its other devices)."""
    return {"model": pg.graph.name, "batch_size": int(b), "metric": "latency_ms", "unit": "ms",
            "device": unit.device, "phase": unit.phase, "precision": unit.precision, "value": None,
            "interval": None, "in_domain": None, "domain_reasons": [], "flags": [], "basis": None,
            "basis_kind": None, "basis_seen": None, "reason": str(error) if error is not None else "no basis answers this device"}


GRAPH_CACHE_ENV = "PERFSEER_GRAPH_CACHE"  # 0: export the model on every call
GRAPH_CACHE_MB_ENV = "PERFSEER_GRAPH_CACHE_MB"  # the most the skeleton cache keeps, least recently used out
GRAPH_CACHE_MB = 1024
CACHED_SCHEMES = ("timm", "torchvision", "hf", "ofa", "space")  # the references that are exported (seconds)


def cached_extract(model, batch: int, input_shape=None, dims: dict[str, int] | None = None,
                   seq_len: int | None = None, weight_work: bool | None = None, cache: bool = True) -> PerfGraph:
    """:func:`perfseer.extract`, with the export of a ``timm:``, ``torchvision:``, ``hf:``, ``ofa:`` or
    ``space:`` reference kept in the skeleton cache (:class:`perfseer.data.dataset.SkeletonCache`,
    ``$PERFSEER_CACHE/skeletons`` or ``~/.cache/perfseer/skeletons``) under a key of the reference,
    the input shape (``seq_len`` for ``hf:``, the detector's boxes) and the versions of perfseer and
    the exporters: a second call on the same model reads the export instead of exporting again.
    The cache keeps at most ``PERFSEER_GRAPH_CACHE_MB`` (default 1,024) MB, the least recently used
    entries removed first.  ``cache=False`` or ``PERFSEER_GRAPH_CACHE=0`` turns it off; a cache that
    cannot be written is skipped."""
    ref = split_reference(model) if isinstance(model, str) else None
    if (not cache or ref is None or ref[0] not in CACHED_SCHEMES
            or os.environ.get(GRAPH_CACHE_ENV, "1").strip() == "0"
            or ref[0] == "hf" and is_local_config(ref[1])):  # a local config can change under the same name
        return extract(model, batch=batch, input_shape=input_shape, dims=dims, seq_len=seq_len,
                       weight_work=weight_work)
    is_hf, boxes = ref[0] == "hf", (dims or {}).get(DETECTION_DIM)
    key = json.dumps({"input_shape": list(input_shape) if input_shape is not None else None,
                      "seq_len": seq_len if is_hf else None, "boxes": boxes, "versions": exporter_versions()},
                     sort_keys=True)
    store = SkeletonCache(default_cache_dir())
    try:
        skel = store.get(model, key)
    except OSError:
        skel = None
    if skel is None:
        skel = load_skeleton(model, input_shape=input_shape, seq_len=seq_len if is_hf else None, boxes=boxes)
        try:
            store.put(model, key, skel)
            store.prune(_cache_bytes())
        except OSError:
            pass  # a read-only or full cache: answered all the same, exported again next time
    return extract_skeleton(skel, batch, input_shape, dims, seq_len, weight_work, is_hf)


def _cache_bytes() -> int:
    try:
        mb = float(os.environ.get(GRAPH_CACHE_MB_ENV, GRAPH_CACHE_MB))
    except ValueError:
        mb = GRAPH_CACHE_MB
    return int(max(0.0, mb) * 2**20)


def predict(model, *, device: str | Sequence[str] | None = None, predictor: str | Sequence[str] | None = None,
            batch: int | Sequence[int] = 1, phase: str | None = None, precision: str | None = None,
            basis: str = "auto", input_shape=None, dims: dict[str, int] | None = None, seq_len: int | None = None,
            gpus: int = 1, parallel: str | None = None, energy: bool = False, force: bool = False,
            power_limit_w: float | None = None,
            tp: int | None = None, pp: int | None = None, dp: int | None = None, microbatches: int | None = None,
            nodes: int = 1, node: str | None = None, interconnect: str | None = None, schedule: str = "1f1b",
            sequence_parallel: bool = False, cache: bool = True) -> list[dict]:
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
        precision: a name of :data:`perfseer.runtime.answer.PRECISIONS` (``fp32``, ``amp-fp16``...) or
            an alias (``amp``); default: a measured card's own, else fp32; several devices share one,
            the first measured card's when not given.
        basis: ``auto``, ``measured``, ``transfer`` or ``spec`` (devices alone).
        input_shape, dims, seq_len: as for :func:`perfseer.extract`.
        gpus, parallel: the step on several GPUs of ``device`` (``batch`` is then the global batch;
            ``phase`` defaults to ``train``): ``parallel`` ``dp`` (DDP), ``fsdp``, ``zero1``-``zero3``,
            ``dataparallel`` (``torch.nn.DataParallel``), or ``tp`` / ``pp`` alone; see
            docs/guide/several-gpus.md.  Rows add ``compute_ms``, ``comm_ms`` (exposed), ``bubble_ms``.
        tp, pp, dp, microbatches, schedule, sequence_parallel: the layout (``gpus = tp x pp x dp``;
            ``schedule`` ``1f1b`` or ``gpipe``; microbatches default ``4 pp``).
        nodes, node, interconnect: nodes the GPUs span, the node type (``dgx-a100``, ``hgx-h100``,
            ``pcie-8``...), a forced path (``nvlink``, ``pcie``) or network (``ib-ndr``, ``ib-hdr``, ``roce``).
        energy: also answer ``power_w``, ``energy_j`` (per step), ``energy_j_per_sample`` and
            ``util_pct`` on GPU rows (:mod:`perfseer.runtime.power`; a CPU is refused).
        power_limit_w: a GPU power limit below the TDP, W (implies ``energy``): the step slows by
            the power model's clock rule (physics only: not measured).
        force: let a measured card answer for a model outside its model space (else it is passed
            over for the next basis, or, asked for by name, refuses).
        cache: keep and reuse the export of a zoo reference on disk (:func:`cached_extract`).

    Returns:
        One dict per (device or target, batch size): ``model``, ``batch_size``, ``metric``, ``unit``,
        ``device``, ``phase``, ``value``, ``interval``, ``in_domain``, ``domain_reasons``, ``flags``,
        ``basis``, ``precision`` and, for latency, ``throughput_per_s``.  A refused row has
        ``"value": None`` and a ``reason``; a row answered by a fall-back basis has
        ``fallback_from`` (``{"basis", "reason"}``) and ``passed_over`` (every basis passed over);
        one answered outside a training card's step domain, ``anchor_batch`` and ``anchor_scale``.

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
    if gpus != 1 or parallel is not None or tp or pp or dp:  # several GPUs: perfseer.runtime.several
        from perfseer.runtime.several import predict_several

        if energy or power_limit_w is not None:
            raise PerfseerError("energy on several GPUs is not predicted yet",
                                "drop --energy/--power-limit, or ask for one GPU")
        return predict_several(predict, cached_extract, model, device=device, predictor=predictor, batches=batches, phase=phase,
                               precision=precision, basis=basis, input_shape=input_shape, dims=dims, seq_len=seq_len,
                               force=force, gpus=gpus, parallel=parallel, tp=tp, pp=pp, dp=dp,
                               microbatches=microbatches, nodes=nodes, node=node, interconnect=interconnect,
                               schedule=schedule, sequence_parallel=sequence_parallel)
    Options(gpus=gpus, parallel=parallel).single_device("perfseer")
    energy = energy or power_limit_w is not None
    units, _ = plan(devices, [str(p) for p in predictors], phase, precision, basis, force=force)
    if energy:  # an impossible energy request fails here, before the model is exported
        from perfseer.runtime.power import check_energy_request, energy_rows  # deferred: only with energy
        check_energy_request([u.device for u in units if u.device is not None], power_limit_w)
    kept = {u: extraction(u) for u in units}
    default = weight_work_enabled()
    graphs: dict = {}
    for u in units:  # one extraction per setting the units need, the first unit's first
        k = default if kept[u] is None else kept[u]
        if k not in graphs:
            graphs[k] = model if isinstance(model, PerfGraph) else cached_extract(
                model, batch=int(batches[0]), input_shape=input_shape, dims=dims, seq_len=seq_len, weight_work=k,
                cache=cache)
    name = model.graph.name if isinstance(model, PerfGraph) else str(model)
    family = model_family(model) if isinstance(model, str) else None
    rows, notes = [], []
    for k, pg in graphs.items():
        mine = [u for u in units if (default if kept[u] is None else kept[u]) == k]
        with limited(len(mine) * len(batches)):  # a few graphs: one thread answers faster (runtime.threads)
            got = answer_units(pg, [(int(b), u) for u in mine for b in batches], family=family)
        for u in mine:
            for b in batches:
                unit_rows, unit_notes = got[int(b), u]
                if energy:
                    unit_rows = energy_rows(unit_rows, pg, power_limit_w)
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
