"""Prediction intervals: split-conformal on validation residuals in log space.

A predictor's card holds, per target, ``q``: the conformal quantile of the absolute log
residuals ``|ln(measured / predicted)|`` over its validation rows (architectures it never trained
on; the validation split chose the epoch, which makes ``q`` a little optimistic, measured in
``docs/concepts/trust.md``).  With ``n`` rows and level ``1 - a``, ``q`` is the ``ceil((n + 1)(1 - a))``-th
smallest residual (Vovk et al.; Lei et al. 2018), so for a new graph drawn like the validation
ones ``P(measured in [p e^-q, p e^q]) >= 1 - a``.  The interval is multiplicative, as errors
of latency predictors are: 10 % either way at 1 ms and at 1 s.

Out of domain (:mod:`perfseer.trust.domain`) the residuals are larger and exchangeability is
gone: there ``q`` is multiplied by the card's ``ood_factor``, the ratio of the 90 % quantile of
log residuals on validation graphs of unseen timm families to that on the random split's
validation graphs (measured by ``benchmarks/intervals.py`` at tag research-2026-11, now the families suite; 2.0 where a card does not record one).
Intervals are then clipped to the physical bounds (:mod:`perfseer.trust.bounds`).
"""

from __future__ import annotations

import math

import numpy as np

from perfseer.errors import PerfseerError

LEVEL = 0.9  # the intervals' nominal coverage
DEFAULT_OOD_FACTOR = 2.0  # q's multiplier out of domain where a card records no measured one


def log_residuals(measured, predicted) -> np.ndarray:
    """``ln(measured / predicted)`` where both are positive and finite (others dropped)."""
    y = np.asarray(measured, dtype=np.float64).reshape(-1)
    p = np.asarray(predicted, dtype=np.float64).reshape(-1)
    ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
    return np.log(y[ok] / p[ok])


def conformal_quantile(residuals, level: float = LEVEL) -> float:
    """The split-conformal quantile of ``|residuals|`` at ``level``: the ``ceil((n+1) level)``-th
    smallest.

    Raises:
        PerfseerError: too few residuals for the level (fewer than ``level / (1 - level)``).
    """
    r = np.sort(np.abs(np.asarray(residuals, dtype=np.float64).reshape(-1)))
    n = len(r)
    k = math.ceil(round((n + 1) * level, 9))  # round: (n + 1) * 0.9 is 18.000000000000004 at n = 19
    if not 0 < level < 1 or k > n:
        raise PerfseerError(f"{n} calibration residuals cannot give a {level:.0%} conformal quantile",
                            f"calibrate on at least {min_rows(level)} validation rows")
    return float(r[k - 1])


def min_rows(level: float = LEVEL) -> int:
    """The fewest calibration rows that give a finite conformal quantile at ``level``."""
    n = 1
    while math.ceil(round((n + 1) * level, 9)) > n:
        n += 1
    return n


def calibrate(measured, predicted, level: float = LEVEL) -> dict:
    """``{"q", "n", "median_abs"}`` of one target's validation rows; ``q`` is ``None`` (no interval)
    when there are too few rows for the level."""
    r = log_residuals(measured, predicted)
    if len(r) < min_rows(level):
        return {"q": None, "n": int(len(r)), "median_abs": float(np.median(np.abs(r))) if len(r) else None}
    return {"q": conformal_quantile(r, level), "n": int(len(r)), "median_abs": float(np.median(np.abs(r)))}


def bounds(values, q, in_domain, ood_factor: float = DEFAULT_OOD_FACTOR) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` of predictions ``values`` with half-width ``q`` (log space), widened by
    ``ood_factor`` where ``in_domain`` is false.  Non-positive or non-finite values give
    ``(nan, nan)``: they have no multiplicative interval (the bounds module flags them)."""
    v = np.asarray(values, dtype=np.float64)
    w = np.where(np.asarray(in_domain, dtype=bool), 1.0, float(ood_factor)) * float(q)
    ok = np.isfinite(v) & (v > 0)
    lo = np.where(ok, v * np.exp(-w), np.nan)
    hi = np.where(ok, v * np.exp(w), np.nan)
    return lo, hi


def coverage(measured, lo, hi) -> float:
    """The share (%) of ``measured`` inside ``[lo, hi]``."""
    y = np.asarray(measured, dtype=np.float64)
    return float(np.mean((y >= np.asarray(lo)) & (y <= np.asarray(hi))) * 100) if len(y) else float("nan")
