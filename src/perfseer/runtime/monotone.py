"""A step time that never decreases with the batch: the envelope of a basis's answers over the
powers of two.

A batch of ``2b`` samples does all the work of a batch of ``b`` and more, so its step cannot be
faster; equivalently, the throughput can at most double when the batch doubles.  A basis is a
fitted model and does not always know that:

* the RTX 3090 training card (``rtx3090-amp-nchw-pt112.train``) was measured at one batch size
  per model, about the largest that fitted (95 % of its 652 rows at 16-512 samples, half of them
  at 330-510 ms a step), so it never saw one model at two batch sizes; the batch reaches it only through the graph's cost features, and
  between its training points its prediction can fall as the batch grows (torchvision ResNet-34:
  269.8 ms at batch 64, 260.6 ms at 256);
* the spec model's kernel networks predict each small kernel near its launch floor, where the
  learned curve is not monotone in the kernel's size (all-MiniLM-L6-v2 on a B200: 111 of its 148
  kernels are predicted faster at batch 2 than at batch 1), and a sum of such kernels can fall.

So every basis answers through :func:`answer`: it is also asked for the powers of two below each
batch size ``b`` (and the one above a ``b`` that is not a power of two), and the latency shown at
``b`` is the largest answer at any power of two ``<= b`` (raised to it: at least the time of the
smaller batch), and, for a ``b`` between two powers of two, at most the answer at the power above.
An answer that was already monotone is unchanged; a changed one says so in its ``flags``.  The
latency a user reads is then non-decreasing along 1, 2, 4, ..., and between any batch size and the
powers of two around it (two batch sizes strictly between the same two powers of two are each
answered on their own).  Only rows a route would show count (``usable``): a value refused for a
sanity bound or outside a card's model space neither raises nor lowers another.

What it costs on held-out measurements (``python -m benchmarks.lib.monotone_heldout CARD``: the
cards' ``val`` rows of ``datasets/timm``, each at its measured batch size): the three RTX inference
cards' answers rise with the batch already (no row changed: MAPE 4.58 % RTX 3090, 5.54 % RTX 4090,
6.04 % RTX 5090); the RTX 3090 training card's val MAPE goes from 6.79 % to 7.33 % (23 of 159 rows
raised: at its measured batch, the card's answer for that model falls below its answer at a smaller
batch, 75 of the 159 models somewhere along 1-1024), and on its ``--split test`` architectures (174,
never read in fitting) from 3.31 % to 4.45 % (38 rows raised; the inference cards' test rows: none
changed).  That card does not know how a step scales with
the batch; taking the smallest answer at the powers of two above instead (up to 1024; the script's
``mape_min_above``) would cost less here, but needs every power of two up to 1024 for every call,
ten times the work of a call at batch 1 (3.36 % on the test split).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

METRIC = "latency_ms"


def _pow2_floor(b: int) -> int:
    return 1 << (int(b).bit_length() - 1)


def ladder(batches: Sequence[int]) -> list[int]:
    """``batches`` with the powers of two the envelope reads for them (each power of two up to the
    largest batch size, and the one above a batch size that is not a power of two), sorted."""
    need = {int(b) for b in batches}
    for b in list(need):
        p = _pow2_floor(b)
        need.update(1 << k for k in range(p.bit_length()))
        if p != b:
            need.add(p * 2)
    return sorted(need)


def envelope(rows: list[dict], asked: Sequence[int], usable: Callable[[dict], bool] = lambda r: True) -> list[dict]:
    """The rows of ``asked`` batch sizes among ``rows`` (answered at :func:`ladder` of them), each
    latency row's value made monotone in the batch (the module's rule), per device and phase.

    A changed row keeps its other fields, gets the value (and the interval, shifted the same way)
    of the power of two that bounds it, and a flag naming that batch size."""
    wanted = {int(b) for b in asked}
    groups: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        if r.get("metric") == METRIC and r.get("value") is not None and usable(r):
            groups.setdefault((r.get("device"), r.get("phase"), r.get("precision")), {}).setdefault(
                int(r["batch_size"]), r)
    out = []
    for r in rows:
        b = int(r["batch_size"])
        if b not in wanted:
            continue
        good = groups.get((r.get("device"), r.get("phase"), r.get("precision")), {})
        if r.get("metric") != METRIC or good.get(b) is not r:
            out.append(r)
            continue
        lo = _best(good, b)  # the largest answer at a power of two <= b (b itself included if one)
        value, src = float(r["value"]), None
        if lo is not None and float(lo["value"]) > value:
            value, src = float(lo["value"]), lo
        if _pow2_floor(b) != b:
            hi = good.get(_pow2_floor(b) * 2)
            top = _best(good, _pow2_floor(b) * 2) if hi is not None else None
            if top is not None and float(top["value"]) < value:
                value, src = float(top["value"]), top
        out.append(r if src is None or src is r else _moved(r, src, value))
    return out


def _best(good: dict[int, dict], b: int) -> dict | None:
    """The row with the largest value at a power of two ``<= b``."""
    best = None
    p = 1
    while p <= b:
        row = good.get(p)
        if row is not None and (best is None or float(row["value"]) > float(best["value"])):
            best = row
        p *= 2
    return best


def _moved(row: dict, src: dict, value: float) -> dict:
    up = value > float(row["value"])
    interval = row.get("interval")
    if interval is not None and src.get("interval") is not None:
        pick = max if up else min
        interval = [pick(float(a), float(c)) for a, c in zip(interval, src["interval"])]
    why = (f"raised to the answer at batch {src['batch_size']}: a larger batch does at least a smaller one's work"
           if up else f"lowered to the answer at batch {src['batch_size']}: a smaller batch takes at most a larger "
                      "one's time")
    return dict(row, value=value, interval=interval, flags=list(row.get("flags") or []) + [why])


def answer(answerer, pg, batches: Sequence[int], options, at: Callable | None = None, family=None,
           usable: Callable[[dict], bool] = lambda r: True) -> list[dict]:
    """``answerer.answer`` (:class:`~perfseer.runtime.answer.Answerer`) at ``batches``, asked at
    their :func:`ladder` (always the same batch sizes for the same request, so that an answer does
    not depend on what was asked before) and returned at ``batches`` only, made monotone by
    :func:`envelope`.  ``at(b)``: the PyG graph at batch ``b``, for the bases that read them
    (measured cards)."""
    bs = sorted({int(b) for b in batches})
    full = ladder(bs)
    graphs = [at(b) for b in full] if at is not None else None
    rows = answerer.answer(pg, full, options, graphs=graphs, family=family)
    return envelope(rows, bs, usable)


def across(rows: list[dict]) -> list[dict]:
    """``rows`` (one device's, at increasing batch sizes, possibly from several bases: a measured
    card inside its step domain, another basis outside it) with each latency no smaller than the
    largest at a smaller batch of the same device, phase and precision (raised, and flagged)."""
    best: dict[tuple, dict] = {}
    out = []
    for r in rows:
        key = (r.get("device"), r.get("phase"), r.get("precision"))
        if r.get("metric") != METRIC or r.get("value") is None:
            out.append(r)
            continue
        top = best.get(key)
        if top is not None and int(top["batch_size"]) < int(r["batch_size"]) and float(top["value"]) > float(r["value"]):
            r = _moved(r, top, float(top["value"]))
        if top is None or float(r["value"]) >= float(top["value"]):
            best[key] = r
        out.append(r)
    return out
