"""Installing perfseer keeps ``import torchvision`` / ``import timm`` working in the user's own code.

The PyPI torchvision wheel is a CUDA build whose compiled ops cannot load next to a CPU-only torch,
and its import then fails (``operator torchvision::nms does not exist``).  perfseer's
``torch.backends`` entry point (``_perfseer_torchvision``) defines the missing schemas at
``import torch``.  The tests install that entry point into a throw-away distribution on
``PYTHONPATH`` (what ``pip install perfseer`` writes) and import torchvision in a fresh interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

if importlib.util.find_spec("torchvision") is None:
    pytest.skip("torchvision is not installed", allow_module_level=True)


def run(code: str, path: list[Path], **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environ.update(PYTHONPATH=os.pathsep.join(map(str, path)), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300)


@pytest.fixture(scope="module")
def entry_point_dist(tmp_path_factory) -> Path:
    """A directory holding a distribution whose only content is perfseer's entry point."""
    root = tmp_path_factory.mktemp("site")
    info = root / "perfseer_entry_point_test-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: perfseer-entry-point-test\nVersion: 0\n")
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["torch.backends"]
    lines = "".join(f"{name} = {target}\n" for name, target in entry.items())
    (info / "entry_points.txt").write_text(f"[torch.backends]\n{lines}")
    return root


def test_pyproject_installs_the_hook_module():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["torch.backends"] == {
        "perfseer_torchvision": "_perfseer_torchvision:define_missing_ops"}
    assert "_perfseer_torchvision" in project["tool"]["setuptools"]["py-modules"]


def test_import_torchvision_and_timm_in_user_code(entry_point_dist):
    code = ("import torchvision, torchvision.models, timm; m = torchvision.models.resnet18(); "
            "print(type(m).__name__, callable(timm.create_model))")
    done = run(code, [entry_point_dist, ROOT / "src"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ResNet", "True"]


def test_the_hook_is_harmless_when_nothing_is_missing(entry_point_dist):
    # called again after torchvision is imported, and with torch's autoload off: no change, no error
    code = ("import _perfseer_torchvision as h, torch; h.define_missing_ops(); import torchvision; "
            "h.define_missing_ops(); print(h.needs_definitions())")
    done = run(code, [entry_point_dist, ROOT / "src"], TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
