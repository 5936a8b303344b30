"""``perfseer devices``: the table, one device, --json, --add, errors."""

from __future__ import annotations

import json

import pytest

from helpers import assert_cli_error, run_cli


@pytest.fixture(autouse=True)
def _user_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_DEVICES", str(tmp_path / "user-devices"))
    monkeypatch.setenv("COLUMNS", "80")


def test_table_fits_80_columns(capsys):
    code, out, err = run_cli(capsys, "devices")
    assert code == 0, err
    assert "h100-sxm" in out and "rtx4090" in out and "i9-10940x" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    code, out, _ = run_cli(capsys, "devices", "--mig", "--kind", "gpu")
    assert "h200:1g.18gb" in out and "i9-10940x" not in out


def test_json_and_one_device(capsys):
    code, out, _ = run_cli(capsys, "devices", "--json")
    items = json.loads(out)
    assert code == 0 and any(d["name"] == "l40s" for d in items)
    code, out, _ = run_cli(capsys, "devices", "a100-40gb-pcie:3g.20gb", "--json")
    d = json.loads(out)
    assert d["parent"] == "a100-40gb-pcie" and d["sms"] == 42 and d["memory_gib"] == 20


def test_add_then_list(capsys, tmp_path):
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps({"name": "lab-gpu", "kind": "gpu", "memory_gib": 8, "mem_bandwidth_gbs": 256,
                             "sms": 16, "peak_tflops": {"fp32": 4}, "source": "vendor sheet"}))
    code, out, err = run_cli(capsys, "devices", "--add", str(f))
    assert code == 0 and "added lab-gpu" in out, err
    code, out, _ = run_cli(capsys, "devices", "lab-gpu")
    assert "vendor sheet" in out


def test_errors(capsys, tmp_path):
    assert_cli_error(capsys, ["devices", "h1000"], "h1000", "h100")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "kind": "gpu"}))
    assert_cli_error(capsys, ["devices", "--add", str(bad)], "source")
