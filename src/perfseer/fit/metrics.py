"""Accuracy metrics of performance predictions, in the units of the target.

PerfSeer reports percentage errors so that metrics with different ranges (milliseconds, MiB,
percent) compare: MAPE and "x % accuracy", the share of predictions within x % relative error
(BRP-NAS).  Rank correlations (Spearman's rho, Kendall's tau-b) say how well a predictor orders
models, which is what NAS and schedulers use it for.

Conventions (all functions take 1-D arrays of equal length ``N``):

- :func:`mape`: ``100 * mean(|pred - true| / true)``, in percent; targets must be > 0.
- :func:`rmse`: ``sqrt(mean((pred - true)**2))``, in the target's unit.
- :func:`within`: percent of predictions with ``|pred - true| / true <= pct / 100``; targets > 0.
- :func:`spearman`: Pearson correlation of average ranks (ties get the mean of their ranks).
- :func:`kendall`: Kendall's tau-b (ties corrected), O(N log N).
- Rank correlations of a constant input are undefined: ``nan``.

No SciPy needed; the tests compare against SciPy where it is installed.

Example::

    >>> evaluate([1.0, 2.0, 4.0], [1.1, 1.8, 4.0])["mape"]  # doctest: +ELLIPSIS
    6.66...
"""

from __future__ import annotations

import math

import numpy as np

from perfseer.errors import PerfseerError

ACCURACY_LEVELS = (5, 10, 20)  # the "x % accuracy" thresholds reported by evaluate()


def _pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    # a single-target column [N, 1] reads as [N]
    t = t.reshape(-1) if t.ndim == 2 and t.shape[1] == 1 else t
    p = p.reshape(-1) if p.ndim == 2 and p.shape[1] == 1 else p
    if t.ndim != 1 or p.ndim != 1:
        raise PerfseerError(f"metrics take 1-D arrays, got shapes {t.shape} and {p.shape}",
                            "evaluate one target at a time (evaluate_targets does it per column)")
    if t.shape != p.shape:
        raise PerfseerError(f"y_true has {t.shape[0]} values but y_pred has {p.shape[0]}",
                            "pass one prediction per target value")
    if t.size == 0:
        raise PerfseerError("no values to evaluate", "pass at least one target and prediction")
    if not (np.isfinite(t).all() and np.isfinite(p).all()):
        raise PerfseerError("y_true or y_pred holds NaN or infinite values",
                            "drop rows without a measurement before evaluating")
    return t, p


def _positive(t: np.ndarray, what: str) -> None:
    if (t <= 0).any():
        bad = int((t <= 0).sum())
        raise PerfseerError(f"{what} needs targets > 0, but {bad} of {t.size} are <= 0 (smallest {t.min():g})",
                            "relative errors are undefined at 0: drop those rows or use rmse")


def relative_errors(y_true, y_pred) -> np.ndarray:
    """``|pred - true| / true`` per value (targets must be > 0)."""
    t, p = _pair(y_true, y_pred)
    _positive(t, "a relative error")
    return np.abs(p - t) / t


def mape(y_true, y_pred) -> float:
    """Mean absolute percentage error, in percent."""
    t, p = _pair(y_true, y_pred)
    _positive(t, "MAPE")
    return float(100.0 * np.mean(np.abs(p - t) / t))


def rmse(y_true, y_pred) -> float:
    """Root mean squared error, in the target's unit."""
    t, p = _pair(y_true, y_pred)
    return float(np.sqrt(np.mean((p - t) ** 2)))


def within(y_true, y_pred, pct: float) -> float:
    """Percent of predictions within ``pct`` % relative error ("x % accuracy" of BRP-NAS/PerfSeer)."""
    t, p = _pair(y_true, y_pred)
    _positive(t, f"{pct:g} % accuracy")
    # a tiny tolerance so that an error of exactly pct % (up to rounding) counts as within
    return float(100.0 * np.mean(np.abs(p - t) / t <= pct / 100.0 + 1e-12))


def rankdata(a) -> np.ndarray:
    """Ranks 1..N of a 1-D array, ties sharing the mean of their ranks (SciPy's ``method='average'``)."""
    a = np.asarray(a)
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    starts = np.r_[True, s[1:] != s[:-1]]  # first element of each run of equal values
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    counts = np.diff(np.r_[first, a.size])
    avg = first + (counts + 1) / 2.0  # mean of 1-based ranks first+1 .. first+count
    ranks = np.empty(a.size, dtype=np.float64)
    ranks[order] = avg[group]
    return ranks


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    den = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b / den) if den > 0 else float("nan")


def spearman(y_true, y_pred) -> float:
    """Spearman's rank correlation (average ranks for ties); ``nan`` when either input is constant."""
    t, p = _pair(y_true, y_pred)
    return _pearson(rankdata(t), rankdata(p))


def _tie_pairs(*cols: np.ndarray) -> int:
    """Pairs equal in every one of ``cols``."""
    order = np.lexsort(cols[::-1])
    s = [c[order] for c in cols]
    change = np.zeros(order.size - 1, dtype=bool)
    for c in s:
        change |= c[1:] != c[:-1]
    counts = np.diff(np.flatnonzero(np.r_[True, change, True]))
    return int((counts * (counts - 1) // 2).sum())


def _inversions(seq: np.ndarray) -> int:
    """Pairs ``i < j`` with ``seq[i] > seq[j]`` (strict), by a vectorised bottom-up merge sort.

    ``seq`` holds integer ranks in ``0..n-1``.  At each level every block of width ``2w`` has two
    sorted halves; the inversions across them are counted for all blocks at once with one
    ``searchsorted`` (each block's values offset so that blocks do not interleave).
    """
    n = seq.size
    if n < 2:
        return 0
    size = 1 << (n - 1).bit_length()
    a = np.full(size, n, dtype=np.int64)  # padding larger than every rank, at the end: no inversions
    a[:n] = seq
    total, w, big = 0, 1, n + 1
    while w < size:
        blocks = a.reshape(-1, 2 * w)
        offset = (np.arange(blocks.shape[0], dtype=np.int64) * big)[:, None]
        left = (blocks[:, :w] + offset).ravel()  # globally sorted: blocks sorted, offsets increasing
        right = blocks[:, w:] + offset
        # for each right value r: left values of its block that are > r
        le = np.searchsorted(left, right.ravel(), side="right").reshape(right.shape)
        block_end = (np.arange(blocks.shape[0], dtype=np.int64) * w + w)[:, None]
        total += int((block_end - le).sum())
        a = np.sort(blocks, axis=1).ravel()
        w *= 2
    return total


def kendall(y_true, y_pred) -> float:
    """Kendall's tau-b (ties corrected, as SciPy's default); ``nan`` when either input is constant.

    ``tau_b = (C - D) / sqrt((n0 - n1) (n0 - n2))`` with ``n0 = N (N - 1) / 2`` pairs, ``n1`` / ``n2``
    pairs tied in the first / second input, ``C`` / ``D`` concordant / discordant pairs.
    """
    t, p = _pair(y_true, y_pred)
    n = t.size
    n0 = n * (n - 1) // 2
    n1, n2 = _tie_pairs(t), _tie_pairs(p)
    if n0 == n1 or n0 == n2:
        return float("nan")
    both = _tie_pairs(t, p)
    # sorted by t, then p within ties of t: pairs tied in t are never inverted, so the strict
    # inversions of p in this order are exactly the discordant pairs
    order = np.lexsort((p, t))
    p_rank = np.unique(p, return_inverse=True)[1].astype(np.int64)
    d = _inversions(p_rank[order])
    c = n0 - n1 - n2 + both - d
    return float((c - d) / math.sqrt((n0 - n1) * (n0 - n2)))


def evaluate(y_true, y_pred) -> dict:
    """Every metric of one target.

    Args:
        y_true: ``[N]`` measured values, > 0 (in the target's unit).
        y_pred: ``[N]`` predictions, same unit.

    Returns:
        ``{"n", "mape", "rmse", "acc5", "acc10", "acc20", "spearman", "kendall"}``: MAPE and the
        ``accX`` shares in percent, RMSE in the target's unit, correlations in [-1, 1].

    Raises:
        PerfseerError: length mismatch, empty or non-finite input, or a target <= 0.
    """
    t, p = _pair(y_true, y_pred)
    _positive(t, "evaluate (MAPE and x % accuracy)")
    rel = np.abs(p - t) / t
    out = {"n": int(t.size), "mape": float(100.0 * rel.mean()), "rmse": rmse(t, p)}
    for level in ACCURACY_LEVELS:
        out[f"acc{level}"] = float(100.0 * np.mean(rel <= level / 100.0 + 1e-12))
    out["spearman"] = spearman(t, p)
    out["kendall"] = kendall(t, p)
    return out


def evaluate_targets(y_true, y_pred, names) -> dict[str, dict]:
    """:func:`evaluate` per column of ``[N, T]`` arrays: ``{name: metrics}``."""
    t = np.asarray(y_true, dtype=np.float64).reshape(len(y_true), -1)
    p = np.asarray(y_pred, dtype=np.float64).reshape(len(y_pred), -1)
    names = list(names)
    if t.shape != p.shape or t.shape[1] != len(names):
        raise PerfseerError(f"y_true {t.shape}, y_pred {p.shape} and {len(names)} target names do not match",
                            "pass [N, T] arrays with one name per column")
    return {name: evaluate(t[:, i], p[:, i]) for i, name in enumerate(names)}
