"""perfseer's benchmark suites: ``python -m benchmarks list`` and ``python -m benchmarks run SUITE``."""
