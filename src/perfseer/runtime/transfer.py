"""The spec-conditioned transfer as users hold it: AMP inference latency of a model on a GPU
without a measured predictor, from the bundled measured-device SeerNets of other GPUs carried
over through the spec sheets (:mod:`perfseer.specmodel.transfer`).

Example::

    from perfseer.runtime.transfer import load_transfer

    load_transfer().predict("timm:resnet50", batch=[1, 256], device="l40s")
    # [{"value": ..., "interval": [...], "in_domain": ..., "basis": "transfer from rtx3090 + ... via specs ..."}]

The card (``perfseer/predictors/spec-transfer.json``, written by
``benchmarks/lib/spec_transfer_logo.py --fit-all``) holds the fitted transfer, the source SeerNets,
the spec ranges of the GPUs it was fitted on (``domain``), the 90 % log-residual quantile of its
leave-one-GPU-out answers from SeerNet sources (``intervals``) and its leave-one-GPU-out scores
next to the spec model's (``logo``: :func:`preferred` reads them to choose the default basis).

**Domain**: out, with a reason each, when the target is of another vendor than the GPUs the
transfer was fitted on, when one of its spec numbers (FP16 peak, bandwidth, SMs, clock, L2) lies
beyond their range by more than the card's ``tolerance`` (a factor, 1.5, as the spec model's
:mod:`perfseer.specmodel.trust`), or when a source SeerNet finds the model out of its own domain
(its reasons, prefixed by the source).  Out of domain, ``q`` is multiplied by ``ood_factor`` (2).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from perfseer.cards import CardFormat, peek_card
from perfseer.devices import get_device
from perfseer.errors import PerfseerError
from perfseer.features.extract import extract
from perfseer.features.perfgraph import PerfGraph
from perfseer.runtime.answer import answers_at
from perfseer.runtime.predictor import load_predictor
from perfseer.specmodel.transfer import SPEC_KEYS, Transfer, TransferError, graph_terms, roofline_ms, spec_vector
from perfseer.specmodel.trust import _costs
from perfseer.trust import bounds as bnd
from perfseer.trust import intervals as itv
from perfseer.trust.domain import is_interval_flag

BUNDLED_CARD = Path(__file__).resolve().parents[1] / "predictors" / "spec-transfer.json"
CARD_FORMAT = "perfseer.spec-transfer"
TRANSFER_CARD = CardFormat(CARD_FORMAT, 1, "spec-transfer", writer="benchmarks' spec suite (--fit-all)",
                           remedy="reinstall perfseer")
PRECISION = "amp-fp16"  # the sources are AMP (FP16 autocast) inference settings
PHASE = "infer"


def device_reasons(spec, domain: dict) -> list[str]:
    """Why ``spec`` lies outside the GPUs the transfer was fitted on (empty: it does not)."""
    out = []
    vendors = domain.get("vendors") or []
    if vendors and spec.vendor and spec.vendor not in vendors:
        out.append(f"{spec.name} is an {spec.vendor.upper()} GPU; the transfer was fitted on "
                   f"{', '.join(v.upper() for v in vendors)} GPUs only")
    tol = float(domain.get("tolerance", 1.5))
    vec = spec_vector(spec)
    for i, key in enumerate(SPEC_KEYS):
        lo, hi = (domain.get("ranges") or {}).get(key, (None, None))
        if lo is None:
            continue
        v = float(vec[i])
        if v > hi * tol or v < lo / tol:
            side = f"{v / hi:.1f}x above" if v > hi else f"{lo / v:.1f}x below"
            out.append(f"{spec.name}'s {key} {v:g} is {side} the range {lo:g}-{hi:g} of the GPUs the transfer was "
                       f"fitted on ({', '.join(domain.get('devices', []))}; tolerance {tol:g}x): extrapolated")
    return out


class TransferPredictor:
    """A :class:`~perfseer.specmodel.transfer.Transfer` plus its source SeerNets and trust data."""

    def __init__(self, card: dict):
        if card.get("format") != CARD_FORMAT:
            raise TransferError(f"not a spec-transfer card (format {card.get('format')!r})",
                                "write one with python -m benchmarks.lib.spec_transfer_logo --fit-all")
        self.card = card
        self.transfer = Transfer.from_dict(card["transfer"])
        self.name = card.get("name", "spec-transfer")
        self._loaded: dict = {}  # source predictor name -> Predictor, loaded once

    def source_predictor(self, name: str):
        if name not in self._loaded:
            self._loaded[name] = load_predictor(name)
        return self._loaded[name]

    def sources(self, target_name: str) -> list[tuple[str, dict]]:
        """``(table device string, source entry)`` of the sources other than the target itself."""
        return [(s, e) for s, e in self.card["sources"].items() if e["device"] != target_name]

    def predict(self, model, batch: int | Sequence[int] = 1, device: str = "l40s", phase: str = PHASE,
                precision: str | None = PRECISION, input_shape=None, dims=None,
                seq_len: int | None = None) -> list[dict]:
        """Latency rows (as :meth:`perfseer.runtime.spec.SpecModel.predict`) of ``model``
        on ``device`` at each batch size, AMP inference only.

        Raises:
            TransferError: another phase or precision, a device without the spec numbers needed,
                or a card without sources.
        """

        if phase != PHASE or not answers_at(precision, PRECISION):
            raise TransferError(f"the spec transfer covers AMP (fp16) inference only, not {precision} {phase}",
                                "use the spec model (--basis spec) for other phases and precisions")
        spec = get_device(device)
        batches = [batch] if isinstance(batch, int) else list(batch)
        if not batches or any(not isinstance(b, (int, np.integer)) or isinstance(b, bool) or b < 1 for b in batches):
            raise TransferError(f"batch sizes must be integers >= 1, got {batch!r}", "pass e.g. batch=[1, 8, 64]")
        pg = model if isinstance(model, PerfGraph) else extract(model, batch=int(batches[0]), input_shape=input_shape,
                                                                 dims=dims, seq_len=seq_len)
        name = str(model) if not isinstance(model, PerfGraph) else pg.graph.name
        sources = self.sources(spec.name)
        if not sources:
            raise TransferError("the spec-transfer card has no source other than the target",
                                "use the target's measured predictor (--basis measured)")
        tgt = spec_vector(spec)
        bound = [pg.at_batch(int(b)) for b in batches]
        graphs = [g.to_pyg() for g in bound]
        roof_t = np.array([roofline_ms(g.x, tgt) for g in bound])
        terms = np.stack([graph_terms(g.u) for g in bound])
        per, src_specs, src_reasons, src_space = [], [], [[] for _ in batches], [[] for _ in batches]
        src_widen: list[list] = [[] for _ in batches]  # a source's step or family flag widens the interval too
        src_refused: list[list[str]] = [[] for _ in batches]
        for dev_str, entry in sources:
            p = self.source_predictor(entry["predictor"])
            rows = p.predict_bound(pg, batches, graphs=graphs, device=dev_str, phase=PHASE, name=name)
            rows = [r for r in rows if r["metric"] == "latency_ms"]
            sv = np.asarray(entry["spec"], dtype=float)
            for i, r in enumerate(rows):  # a source over its sanity ceiling: that batch size is refused
                if r["value"] is None:
                    src_refused[i].append(f"source {entry['device']}: {'; '.join(bnd.above_ceiling(r)) or r.get('reason')}")
            ly = np.log10([max(float(r["value"]), 1e-9) if r["value"] is not None else 1.0 for r in rows])
            roof_s = np.array([roofline_ms(g.x, sv) for g in bound])
            per.append(ly + self.transfer.shift(ly, terms, roof_s, roof_t, sv, tgt))
            src_specs.append(sv)
            for i, r in enumerate(rows):
                src_reasons[i].append((entry["device"], list(r.get("domain_reasons") or [])))
                src_space[i].append((entry["device"], list(r.get("outside_space") or [])))
                src_widen[i].append((entry["device"], [t for t in r.get("flags") or [] if is_interval_flag(t)]))
        value = 10 ** self.transfer.combine_sources(np.stack(per), np.stack(src_specs), tgt)
        dev_r = device_reasons(spec, self.card.get("domain") or {})
        q = ((self.card.get("intervals") or {}).get("seernet-source") or {}).get("q")
        basis = self.basis(spec, [e["device"] for _, e in sources])
        out = []
        for i, b in enumerate(batches):
            reasons = dev_r + merge_source_reasons(src_reasons[i])
            flags: list[str] = [] if reasons else merge_source_reasons(src_widen[i])
            lo = hi = float("nan")
            if q is not None:
                factor = float(self.card.get("ood_factor", 2.0)) if reasons or flags else 1.0
                a, c = itv.bounds([float(value[i])], q, [not (reasons or flags)], factor)
                lo, hi = float(a[0]), float(c[0])
            else:
                flags.append("no interval: the spec-transfer card has no seernet-source calibration")
            v, fl = None, []
            if not src_refused[i]:  # else no value to check (the row is refused below)
                floor, ceiling, how = bnd.latency_bounds_ms(_costs(bound[i].u, bound[i].op_types), spec, PHASE)
                v, lo, hi, fl = bnd.check(float(value[i]), lo, hi, floor, ceiling, "ms", f"{spec.name} spec",
                                          f"{how} floor of {spec.name}")
            interval = [lo, hi] if q is not None and math.isfinite(lo) and math.isfinite(hi) else None
            row = {"model": name, "batch_size": int(b), "metric": "latency_ms", "unit": "ms",
                   "device": spec.name, "phase": PHASE, "precision": PRECISION, "value": v,
                   "interval": interval, "in_domain": not reasons, "domain_reasons": reasons,
                   "flags": flags + fl, "basis": basis, "basis_kind": "transfer", "basis_seen": False,
                   "unseen_ops": [],
                   # a source that does not answer for the model (outside its model space) carries it
                   "outside_space": merge_source_reasons(src_space[i])}
            if src_refused[i]:  # carried from a refused source: no answer, whatever the others say
                row.update(value=None, interval=None, flags=row["flags"] + src_refused[i],
                           reason="a source's value was above its sanity ceiling (" + "; ".join(src_refused[i])
                                  + "): no answer; ask --basis spec")
            out.append(bnd.refuse_above_ceiling(row))
        return out

    def answer(self, pg, batches: Sequence[int], options, graphs=None, family=None) -> list[dict]:
        """:class:`~perfseer.runtime.answer.Answerer`: :meth:`predict` of ``pg`` on ``options.device``
        (AMP inference only)."""
        options.single_device(f"the spec transfer ({self.name})")
        return self.predict(pg, batch=list(batches), device=options.device, phase=options.phase or PHASE,
                            precision=options.precision)

    def basis(self, spec, source_names) -> str:
        how = "geometric mean" if self.transfer.combine == "geomean" else "nearest in spec"
        return (f"transfer from {' + '.join(source_names)} via specs ({self.name}: their measured-device SeerNets, "
                f"AMP NCHW eager, carried to {spec.name} by its spec sheet, {how}; no measurement of {spec.name})")


def merge_source_reasons(per_source: list[tuple[str, list[str]]]) -> list[str]:
    """The sources' out-of-domain reasons (or interval flags), one line per kind: sources that give
    the same reason (the same words, other numbers; or the same words before a colon or semicolon)
    share a line, with the figures of the first of them.

    >>> merge_source_reasons([("a", ["batch 1 outside 6-1024"]), ("b", ["batch 1 outside 4-1024"])])
    ['sources a, b: batch 1 outside 6-1024 (figures of a)']
    """
    groups: dict[str, tuple[str, list[str], set[str]]] = {}
    for device, reasons in per_source:
        for text in reasons:
            # "global features outside the training range: ..." lists features: the part before the colon
            # (or semicolon: "step smaller than the training steps at batch 1; interval widened ...")
            head = re.split(r"[:;]", text)[0]
            key = head if head != text else re.sub(r"[-+]?[\d.,]+(e[-+]?\d+)?x?", "#", text)
            first, devices, texts = groups.setdefault(key, (text, [], set()))
            if device not in devices:
                devices.append(device)
            texts.add(text)
    out = []
    for first, devices, texts in groups.values():
        who = f"source {devices[0]}" if len(devices) == 1 else f"sources {', '.join(devices)}"
        note = f" (figures of {devices[0]})" if len(texts) > 1 else ""
        out.append(f"{who}: {first}{note}")
    return out


def preferred(card: dict | None = None) -> bool:
    """Whether the transfer beat the spec model on the card's leave-one-GPU-out (mean MAPE over the
    held-out GPUs, transfer from SeerNets vs the better of the spec model's zero-shot and calibrated)."""
    card = card if card is not None else _read(BUNDLED_CARD)
    logo = (card or {}).get("logo") or {}
    ours = logo.get("transfer_from_seernet_mape")
    spec = [v for v in (logo.get("spec_zero_shot_mape"), logo.get("spec_calibrated_mape")) if v is not None]
    return ours is not None and bool(spec) and ours < min(spec)


def _read(path: Path) -> dict | None:
    return peek_card(path, TRANSFER_CARD)


_BUNDLED: TransferPredictor | None = None


def load_transfer(card_path=None) -> TransferPredictor:
    """The bundled spec transfer, or the card at ``card_path``.

    Raises:
        TransferError: the card is missing or not a spec-transfer card.
    """
    global _BUNDLED
    if card_path is None and _BUNDLED is not None:
        return _BUNDLED
    path = Path(card_path) if card_path is not None else BUNDLED_CARD
    card = _read(path)
    if card is None:
        raise TransferError(f"cannot read the spec-transfer card {path}",
                            "write it with python -m benchmarks.lib.spec_transfer_logo --fit-all " + str(path))
    tp = TransferPredictor(card)
    if card_path is None:
        _BUNDLED = tp
    return tp


def applicable(spec, phase: str, precision: str | None) -> bool:
    """Whether the transfer can answer: AMP inference on a GPU with the spec numbers it needs."""
    if spec.kind != "gpu" or spec.parent is not None or phase != PHASE or not answers_at(precision, PRECISION):
        return False
    try:
        spec_vector(spec)
    except PerfseerError:
        return False
    return True
