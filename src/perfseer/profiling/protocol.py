"""The timing protocol: warm up, then repeat until the median step time is known to 2 %.

Why a stopping rule rather than a fixed count: step times range from 50 microseconds to seconds
over the model space, and their noise differs by model and machine; a fixed count is either
wasteful for the fast ones or too small for the noisy ones.  The rule:

1. **Warm-up**: at least ``warmup_reps`` steps and at least ``warmup_s`` seconds (at most
   ``max_warmup_reps`` steps, and never more than half of ``time_cap_s``).  The first steps pay for
   kernel selection, JIT compilation, allocator growth and cold caches.
2. **Timed steps**, one at a time.  After each, from the ``n`` step times so far: the median and
   a distribution-free confidence interval for it from order statistics -- the interval
   ``[x_(l), x_(n+1-l)]`` where ``l`` is the largest rank with ``P(Binomial(n, 1/2) < l) <=
   (1 - confidence) / 2``, so that it covers the true median with probability >= ``confidence``
   whatever the distribution (no normality assumption: step times are skewed and have outliers).
   The relative half-width is ``(x_(n+1-l) - x_(l)) / (2 * median)``.
3. **Stop** when ``n >= min_reps``, at least ``min_time_s`` seconds were timed and the relative
   half-width is <= ``rel_ci`` (*converged*); or at ``max_reps`` steps; or once ``time_cap_s``
   seconds were timed and at least ``min_capped_reps`` steps ran (a model slower than the cap still
   gets a median of three).

A 95 % interval needs n >= 6 (with fewer steps, even ``[min, max]`` covers the median with
probability below 0.95), so ``min_reps`` is at least 6 for convergence to be possible.

The result (:class:`Timing`) keeps the median, quartiles, IQR, median absolute deviation,
mean, standard deviation, coefficient of variation, the interval, the count, why it stopped and
whether it converged.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from perfseer.errors import PerfseerError


@dataclass(frozen=True)
class Protocol:
    """How long to warm up and when to stop timing (see the module docstring)."""

    warmup_reps: int = 3          # warm-up steps, at least
    warmup_s: float = 0.5         # warm-up seconds, at least
    max_warmup_reps: int = 100    # ... but no more steps than this
    min_reps: int = 10            # timed steps before convergence is tested
    max_reps: int = 1000          # stop here even if not converged
    min_time_s: float = 0.0       # timed seconds before convergence is accepted (energy needs ~1 s on GPUs)
    time_cap_s: float = 20.0      # stop after this many timed seconds (not converged)
    min_capped_reps: int = 3      # ... once at least this many steps ran
    rel_ci: float = 0.02          # target: relative half-width of the median's confidence interval
    confidence: float = 0.95      # of that interval

    def __post_init__(self):
        ints = ("warmup_reps", "max_warmup_reps", "min_reps", "max_reps", "min_capped_reps")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "warmup_reps" else 1):
                raise PerfseerError(f"protocol {name} is {value!r}", "give a whole number >= 1 (warmup_reps >= 0)")
        for name in ("warmup_s", "min_time_s", "time_cap_s", "rel_ci"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise PerfseerError(f"protocol {name} is {value!r}", "give a finite number >= 0")
        if not 0.5 < self.confidence < 1:
            raise PerfseerError(f"protocol confidence is {self.confidence!r}", "give a probability like 0.95")
        if self.max_reps < self.min_reps:
            raise PerfseerError(f"protocol max_reps {self.max_reps} is below min_reps {self.min_reps}",
                                "make max_reps >= min_reps")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> Protocol:
        return cls(**(d or {}))


@dataclass
class Timing:
    """Step times (milliseconds) of one measurement, summarised."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    mad_ms: float        # median absolute deviation from the median
    mean_ms: float
    std_ms: float
    cv: float            # std / mean
    min_ms: float
    ci_low_ms: float     # confidence interval of the median (nan when n is too small)
    ci_high_ms: float
    ci_rel: float        # (ci_high - ci_low) / (2 * median); inf when n is too small
    reps: int
    warmup_reps: int
    converged: bool
    stop: str            # "converged", "max_reps" or "time_cap"
    timed_s: float       # seconds spent in timed steps (by the clock, including gaps)
    samples_ms: list[float] = field(default_factory=list, repr=False)

    def to_dict(self, samples: bool = False) -> dict:
        d = asdict(self)
        if not samples:
            d.pop("samples_ms")
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks ``(l, u)`` with ``P(x_(l) <= median <= x_(u)) >= confidence``, the tightest
    symmetric pair; ``None`` when even ``(1, n)`` is not enough (n < 6 at 95 %)."""
    alpha = (1 - confidence) / 2
    # P(Binomial(n, 1/2) <= k - 1) for k = 1.. ; the interval [x_(l), x_(n+1-l)] misses the median
    # with probability 2 * P(B <= l - 1).
    if n > 1000:  # normal approximation, accurate to a rank at this size
        z = statistics.NormalDist().inv_cdf(1 - alpha)
        lo = max(1, int(math.floor(n / 2 - z * math.sqrt(n) / 2)))
        return lo, n + 1 - lo
    cdf, best = 0.0, None
    total = 2.0 ** n
    for k in range(0, n // 2 + 1):
        cdf += math.comb(n, k) / total  # P(B <= k)
        if cdf <= alpha:
            best = k + 1  # l = k + 1: misses with 2 * P(B <= k) <= 1 - confidence
        else:
            break
    if best is None:
        return None
    return best, n + 1 - best


def _quantile(sorted_x: list[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of sorted data."""
    pos = (len(sorted_x) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_x) - 1)
    return sorted_x[lo] + (sorted_x[hi] - sorted_x[lo]) * (pos - lo)


def median_ci(samples: list[float], confidence: float = 0.95) -> tuple[float, float, float, float]:
    """``(median, ci_low, ci_high, relative half-width)`` of ``samples``."""
    x = sorted(samples)
    n = len(x)
    med = statistics.median(x)
    ranks = median_ci_ranks(n, confidence)
    if ranks is None or med <= 0:
        return med, math.nan, math.nan, math.inf
    lo, hi = x[ranks[0] - 1], x[ranks[1] - 1]
    return med, lo, hi, (hi - lo) / (2 * med)


def summarise(samples: list[float], warmup_reps: int, converged: bool, stop: str, timed_s: float,
              confidence: float = 0.95) -> Timing:
    x = sorted(samples)
    med, lo, hi, rel = median_ci(x, confidence)
    mean = statistics.fmean(x)
    std = statistics.stdev(x) if len(x) > 1 else 0.0
    q1, q3 = _quantile(x, 0.25), _quantile(x, 0.75)
    return Timing(median_ms=med, q1_ms=q1, q3_ms=q3, iqr_ms=q3 - q1,
                  mad_ms=statistics.median(abs(v - med) for v in x), mean_ms=mean, std_ms=std,
                  cv=std / mean if mean > 0 else math.nan, min_ms=x[0], ci_low_ms=lo, ci_high_ms=hi,
                  ci_rel=rel, reps=len(x), warmup_reps=warmup_reps, converged=converged, stop=stop,
                  timed_s=timed_s, samples_ms=list(samples))


def run_protocol(step: Callable[[], float], protocol: Protocol = Protocol(),
                 clock: Callable[[], float] = time.perf_counter,
                 on_timed_start: Callable[[], None] | None = None) -> Timing:
    """Warm up and time ``step`` by ``protocol``.

    Args:
        step: runs one step and returns its duration in milliseconds (measured by the backend:
            wall clock on a CPU, CUDA events on a GPU).
        clock: seconds, for the warm-up and time budgets (a fake in tests).
        on_timed_start: called once between warm-up and the first timed step (backends start
            their counters there: CPU time, energy, utilisation sampling).
    """
    p = protocol
    start = clock()
    warm = 0
    while warm < p.max_warmup_reps:
        elapsed = clock() - start
        if warm >= p.warmup_reps and (elapsed >= p.warmup_s or elapsed >= p.time_cap_s / 2):
            break
        if warm >= 1 and elapsed >= p.time_cap_s / 2:
            break
        step()
        warm += 1
    if on_timed_start is not None:
        on_timed_start()
    samples: list[float] = []
    start = clock()
    stop, converged = "max_reps", False
    while len(samples) < p.max_reps:
        samples.append(float(step()))
        n = len(samples)
        elapsed = clock() - start
        if n >= p.min_reps and elapsed >= p.min_time_s and median_ci(samples, p.confidence)[3] <= p.rel_ci:
            stop, converged = "converged", True
            break
        if elapsed >= p.time_cap_s and n >= p.min_capped_reps:
            stop = "time_cap"
            break
    timed_s = clock() - start
    if not converged:  # a capped run whose interval happens to be tight enough still counts
        converged = len(samples) >= 6 and median_ci(samples, p.confidence)[3] <= p.rel_ci
    return summarise(samples, warm, converged, stop, timed_s, p.confidence)
