"""A backend named ``package.module:Class`` is checked in the module's source before anything is
imported (issue 38): naming a module that is not a backend must not run it."""

import sys

import pytest

from perfseer.profiling.backends import backend_class
from perfseer.profiling.jobs import CollectError


def test_a_module_that_is_not_a_backend_is_refused_without_running_it(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    (tmp_path / "notabackend.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, why in (("notabackend:Thing", "no class Thing derived from a Backend"),
                      ("notabackend:Missing", "no class Missing"),
                      ("no_such_module_x:Y", "no Python source"),
                      ("os;rm:X", "not a registered name")):
        with pytest.raises(CollectError, match=why):
            backend_class(name)
    assert not marker.exists() and "notabackend" not in sys.modules


def test_a_backend_class_in_a_module_is_still_loaded():
    cls = backend_class("fake_backends:FakeBackend")  # tests/profiling/fake_backends.py
    assert cls.__name__ == "FakeBackend"
