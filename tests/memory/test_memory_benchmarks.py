"""The ground-truth benchmark's comparison and report, on synthetic rows."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import memory_cpu_truth as mct  # noqa: E402

from perfseer.memory.trace import Allocation, Trace  # noqa: E402


def test_first_difference_names_the_operator():
    a = Trace([Allocation(0, 512, "forward", "mm.default"), Allocation(1, 64, "forward", "relu.default")])
    b = Trace([Allocation(0, 512, "forward", "mm.default"), Allocation(1, 128, "forward", "relu.default")])
    assert mct.first_difference(a, b) == "allocation 1: simulated relu.default 64 B, measured relu.default 128 B"
    assert mct.first_difference(a, a) is None


def test_report_counts_agreement_and_lists_outliers(tmp_path, monkeypatch, capsys):
    rows = [{"model": "m1", "batch": 2, "phase": "infer", "optimizer": None, "sim_peak": 100, "real_peak": 100,
             "rel_err": 0.0},
            {"model": "m2", "batch": 2, "phase": "train", "optimizer": "adamw", "sim_peak": 80, "real_peak": 100,
             "rel_err": -0.2, "first_difference": "allocation 3: ..."},
            {"model": "m3", "batch": 2, "phase": "infer", "optimizer": None, "sim_error": "SimulationError: x",
             "real_peak": 5}]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n{cut")
    monkeypatch.setattr(mct, "JSONL", jsonl)
    monkeypatch.setattr(mct, "SUMMARY", tmp_path / "r.json")
    mct.cmd_report(None)
    s = json.loads((tmp_path / "r.json").read_text())
    assert (s["configurations_compared"], s["within_2pct"], s["over_10pct"], s["simulation_failed_only"]) == (2, 1, 1, 1)
    assert s["outliers"][0]["model"] == "m2"
    assert "outlier m2 b2 train adamw: -20.00 %" in capsys.readouterr().out


def test_report_counts_timeouts_and_a_retry_replaces_them(tmp_path, monkeypatch, capsys):
    key = {"model": "m1", "batch": 2, "phase": "train", "optimizer": "adamw"}
    rows = [{**key, "error": "timeout: over 120 s of CPU time"},
            {**key, "batch": 3, "error": "not run: b2 train adamw timed out"},
            {"model": "m2", "batch": 2, "phase": "infer", "optimizer": None, "error": "ModelLoadError: x"},
            {**key, "sim_peak": 10, "real_peak": 10, "rel_err": 0.0}]  # the retry of the first row
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    monkeypatch.setattr(mct, "JSONL", jsonl)
    monkeypatch.setattr(mct, "SUMMARY", tmp_path / "r.json")
    mct.cmd_report(None)
    s = json.loads((tmp_path / "r.json").read_text())
    assert (s["configurations_compared"], s["timeouts"], s["not_run_after_a_timeout"], s["build_or_run_errors"],
            s["models_run"], s["models_compared"]) == (1, 0, 1, 1, 2, 1)
    assert "failed m2 b2 infer: ModelLoadError: x" in capsys.readouterr().out
