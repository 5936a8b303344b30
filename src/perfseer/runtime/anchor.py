"""A measured training card's answer outside its step domain: anchored on the card, scaled by the spec model.

A card with a step domain (:mod:`perfseer.trust.step`: the timm benchmark measured each model at
one batch, the largest that fit) knows an architecture on its GPU near that batch only.  Asked
at a batch outside it, the routing (:mod:`perfseer.runtime.route`) passes the card over and asks
:class:`Anchored`, which answers

    card(b*) x spec(b) / spec(b*)

with ``b*`` the batch the card's measurements would have taken the model at (:func:`anchor_batch`):
the card knows the architecture at ``b*`` on that GPU, the spec model (at the card's precision) how the step scales
from ``b*`` to ``b``.  On the held-out multi-batch measurements of ``python -m benchmarks run
step-anchor`` this beat the spec model's own value (docs/results.md); the 90 % interval is the
card's at ``b*``, scaled the same way and widened by the spec model's batch-ratio error there
(:data:`RATIO_Q90`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from perfseer.trust import step as st

#: Where the batch ratio's measured error lives: written by ``python -m benchmarks.lib.step_anchor
#: LOGO --write`` from the any-GPU suite's leave-one-GPU-out (the training pairs, any-GPU model).
RATIO_FILE = Path(__file__).with_name("data") / "anchor.json"
#: The 90 % quantile of |log(measured ratio / spec ratio)| over those held-out multi-batch training
#: pairs: the interval's widening for the batch ratio.
RATIO_Q90 = float(json.loads(RATIO_FILE.read_text())["ratio_q90"])


#: What answers outside a card's step domain: ``anchored`` (:class:`Anchored`) or ``spec`` (the next
#: basis's own value), chosen on held-out multi-batch measurements (``python -m benchmarks run step-anchor``).
ADOPTED = "anchored"


def adopted(card) -> bool:
    """Whether the routing asks :class:`Anchored` after ``card`` (a card with a step domain)."""
    return ADOPTED == "anchored" and bool(((getattr(card, "card", None) or {}).get("domain") or {}).get("step"))


def rung(x: float) -> int:
    """The largest batch of the timm benchmark's ladder (1, 2, 4, 6, 8, 12, 16, 24, ..., 384, 512:
    powers of two and 1.5x them) not above ``x`` (at least 1)."""
    if x < 2:
        return 1
    p = 1 << (int(x).bit_length() - 1)
    return p * 3 // 2 if p >= 4 and p * 3 // 2 <= x else p


def anchor_batch(g, step: dict) -> int:
    """``g``'s own batch when it is inside the step domain, else the batch the card's measurements
    would have taken the model at: the ladder's batch at or below ``min(top, largest batch that
    fits)`` (:func:`rung`), where the card is least biased.  (The batch nearest ``g``'s inside the
    domain was the first choice, but the card is nearly flat across its domain: ResNet-34, measured
    313 ms at 512, is 266 ms at 179.)"""
    b = st.memory_terms(g)[0]
    r = st.ratio(g, step)
    if st.in_range(step, r, st.headroom(g, step)):
        return round(b)
    return rung(b / r)


class Anchored:
    """:class:`~perfseer.runtime.answer.Answerer`: ``card(b*) x spec(b) / spec(b*)``.

    Args:
        card: the measured training card (a :class:`~perfseer.runtime.predictor.Predictor` whose
            domain has a ``step``).
        device: the card's table device string it answers for.
        spec, spec_options: the basis that scales (the spec model or the transfer) and its options
            (the card's precision).
    """

    def __init__(self, card, device: str, spec, spec_options):
        self.card, self.device, self.spec, self.spec_options = card, device, spec, spec_options
        self.name = f"{card.name} anchored"

    def answer(self, pg, batches: Sequence[int], options, graphs: Sequence | None = None,
               family: str | None = None) -> list[dict]:
        step = self.card.card["domain"]["step"]
        bs = [int(b) for b in batches]
        at = {}

        def graph(b: int):
            if b not in at:
                at[b] = pg.at_batch(b).to_pyg()
            return at[b]

        if graphs is not None:
            at.update(zip(bs, graphs))
        star = {b: anchor_batch(graph(b), step) for b in bs}
        anchors = sorted(set(star.values()))
        card_rows = {r["batch_size"]: r for r in self.card.predict_bound(
            pg, anchors, graphs=[graph(b) for b in anchors], device=self.device, phase=options.phase,
            family=family, _stacklevel=5) if r["metric"] == "latency_ms"}
        need = sorted(set(bs) | set(anchors))
        spec_rows = {r["batch_size"]: r for r in self.spec.answer(pg, need, self.spec_options)
                     if r["metric"] == "latency_ms"}
        out = []
        for b in bs:
            c, s, s0 = card_rows[star[b]], spec_rows[b], spec_rows[star[b]]
            if star[b] == b:
                out.append(dict(c))
                continue
            if c["value"] is None or s["value"] is None or s0["value"] is None or s0["value"] <= 0:
                out.append(dict(s, value=None, interval=None, flags=list(s.get("flags") or []) +
                                ["no anchored value: the card or the spec model gave none at the anchor"]))
                continue
            k = float(s["value"]) / float(s0["value"])
            wide = math.exp(RATIO_Q90)
            iv = c.get("interval")
            out.append(dict(c, batch_size=b, value=float(c["value"]) * k,
                            interval=None if iv is None else [float(iv[0]) * k / wide, float(iv[1]) * k * wide],
                            outside_step=[], flags=[f for f in c.get("flags") or [] if not f.startswith("step ")],
                            anchor_batch=star[b], anchor_scale=k, basis_kind="anchored", basis_seen=True,
                            basis=f"{c['basis']} at batch {star[b]}, scaled by the batch ratio of {_who(s)}"))
        return out


def _who(row: dict) -> str:
    return str(row.get("basis") or "the spec model").split(" (")[0]
