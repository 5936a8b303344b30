"""The timing protocol with a fake clock: warm-up, convergence of the median's confidence
interval, the time cap, the step cap, and the order-statistics interval itself."""

from __future__ import annotations

import itertools
import math

import pytest

from perfseer.errors import PerfseerError
from perfseer.profiling.protocol import Protocol, median_ci, median_ci_ranks, run_protocol


class FakeSteps:
    """Steps whose durations (ms) come from ``durations``; the clock advances by each one."""

    def __init__(self, durations):
        self.durations = iter(durations)
        self.now = 0.0
        self.calls = 0

    def step(self) -> float:
        ms = next(self.durations)
        self.now += ms / 1e3
        self.calls += 1
        return ms

    def clock(self) -> float:
        return self.now


def test_order_statistic_ranks_match_the_binomial_tables():
    # classic values: n=10 -> (2, 9) covers 97.9 %, n=20 -> (6, 15), n=100 -> (40, 61)
    assert median_ci_ranks(5) is None  # even [min, max] covers only 93.75 %
    assert median_ci_ranks(6) == (1, 6)
    assert median_ci_ranks(10) == (2, 9)
    assert median_ci_ranks(20) == (6, 15)
    assert median_ci_ranks(100) == (40, 61)
    lo, hi = median_ci_ranks(2000)
    assert hi == 2001 - lo and abs(lo - (1000 - 1.96 * math.sqrt(2000) / 2)) < 2
    med, low, high, rel = median_ci([10, 11, 9, 10, 10, 12, 8, 10, 10, 10])
    assert (med, low, high) == (10, 9, 11) and rel == pytest.approx(0.1)


def test_converges_on_steady_steps_after_warm_up():
    fake = FakeSteps(itertools.chain([50.0] * 3, itertools.repeat(10.0)))
    t = run_protocol(fake.step, Protocol(warmup_reps=3, warmup_s=0.0, min_reps=10), clock=fake.clock)
    assert t.warmup_reps == 3
    assert t.converged and t.stop == "converged"
    assert t.reps == 10 and t.median_ms == 10.0 and t.ci_rel == 0.0
    assert t.iqr_ms == 0.0 and t.mad_ms == 0.0 and t.cv == 0.0


def test_warm_up_lasts_warmup_s():
    fake = FakeSteps(itertools.repeat(100.0))
    t = run_protocol(fake.step, Protocol(warmup_reps=1, warmup_s=0.5, min_reps=6), clock=fake.clock)
    assert t.warmup_reps == 5  # 5 x 100 ms reach 0.5 s


def test_noisy_steps_need_more_repetitions_until_the_interval_is_tight():
    # alternating 9 / 11 ms: the interval [9, 11] is 10 % wide until the order statistics at the
    # interval's ranks both fall on one value, which never happens: so it runs to max_reps...
    fake = FakeSteps(itertools.cycle([9.0, 11.0]))
    t = run_protocol(fake.step, Protocol(warmup_reps=0, warmup_s=0.0, min_reps=6, max_reps=50), clock=fake.clock)
    assert t.reps == 50 and not t.converged and t.stop == "max_reps"
    # ... while a mostly steady series with a few outliers converges once n is large enough
    fake = FakeSteps(itertools.cycle([10.0] * 8 + [30.0, 5.0]))
    t = run_protocol(fake.step, Protocol(warmup_reps=0, warmup_s=0.0, min_reps=6, rel_ci=0.02), clock=fake.clock)
    assert t.converged and t.median_ms == 10.0 and 6 <= t.reps <= 40
    assert t.q1_ms <= t.median_ms <= t.q3_ms


def test_time_cap_stops_slow_models_with_a_median_of_three():
    fake = FakeSteps(itertools.cycle([4000.0, 6000.0, 5000.0]))
    t = run_protocol(fake.step, Protocol(warmup_reps=3, warmup_s=0.0, min_reps=10, time_cap_s=10.0), clock=fake.clock)
    assert t.warmup_reps == 2  # warm-up stops at half the cap (after at least one step)
    assert t.stop == "time_cap" and not t.converged
    assert t.reps == 3 and t.median_ms == 5000.0
    assert math.isinf(t.ci_rel) and t.to_dict()["ci_rel"] is None  # JSON-safe


def test_min_time_delays_convergence():
    fake = FakeSteps(itertools.repeat(10.0))
    t = run_protocol(fake.step, Protocol(warmup_reps=0, warmup_s=0.0, min_reps=6, min_time_s=1.0), clock=fake.clock)
    assert t.converged and t.reps == 100  # 100 x 10 ms = 1 s


def test_on_timed_start_runs_between_warm_up_and_timing():
    fake = FakeSteps(itertools.repeat(1.0))
    seen = []
    run_protocol(fake.step, Protocol(warmup_reps=4, warmup_s=0.0, min_reps=6), clock=fake.clock,
                 on_timed_start=lambda: seen.append(fake.calls))
    assert seen == [4]


@pytest.mark.parametrize("kwargs", [{"min_reps": 0}, {"max_reps": 5, "min_reps": 10}, {"rel_ci": -1},
                                    {"confidence": 1.5}, {"time_cap_s": float("nan")}])
def test_bad_protocols_are_refused(kwargs):
    with pytest.raises(PerfseerError):
        Protocol(**kwargs)
