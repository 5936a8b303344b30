"""Every registered operator has a one-node cost test.

Each ``test_ops_<family>.py`` lists the op types it tests in ``OPS``; a newly registered op
without a test (or a test file that forgets one) fails here.
"""

import importlib
from pathlib import Path

import pytest

import perfseer.features.ops as ops_pkg
from perfseer.features.ops import REGISTRY

FAMILIES = sorted(p.stem for p in Path(ops_pkg.__file__).parent.glob("*.py")
                  if p.stem not in ("__init__", "registry"))


def ops_tested_in(family: str) -> set[str]:
    return set(importlib.import_module(f"test_ops_{family}").OPS)


def test_one_test_file_per_ops_module():
    files = {p.stem for p in Path(__file__).parent.glob("test_ops_*.py")} - {Path(__file__).stem}
    assert files == {f"test_ops_{f}" for f in FAMILIES}


@pytest.mark.parametrize("family", FAMILIES)
def test_family_tests_exactly_its_registered_ops(family):
    registered = {op for op, fn in REGISTRY.items() if fn.__module__ == f"perfseer.features.ops.{family}"}
    assert ops_tested_in(family) == registered


def test_every_registered_op_is_tested():
    covered = set().union(*(ops_tested_in(f) for f in FAMILIES))
    assert covered == set(REGISTRY), {"untested": sorted(set(REGISTRY) - covered),
                                      "not registered": sorted(covered - set(REGISTRY))}
