"""One module per suite; each defines ``SUITE`` (:class:`benchmarks.runner.Suite`)."""

from __future__ import annotations

import importlib

from benchmarks.runner import BenchError, Suite

NAMES = ("predictors", "families", "domain", "spec", "any-gpu", "calibration", "cpu-calibration", "memory", "energy", "speed",
         "serve", "fuzz", "llm", "parallel", "sweep",
         "step-anchor")


def get_suite(name: str) -> Suite:
    """The suite called ``name`` (its module imported only now)."""
    if name not in NAMES:
        raise BenchError(f"unknown suite {name!r}; choose from: {', '.join(NAMES)}")
    return importlib.import_module(f"benchmarks.suites.{name.replace('-', '_')}").SUITE


def all_suites() -> list[Suite]:
    return [get_suite(n) for n in NAMES]
