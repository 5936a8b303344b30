"""The ground-truth benchmark's comparison and report, on synthetic rows."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import memory_cpu_truth as mct  # noqa: E402
import pytest  # noqa: E402

from perfseer.memory.trace import Allocation, Trace  # noqa: E402


def row(model: str, batch: int = 2, phase: str = "infer", optimizer: str | None = None, **result) -> dict:
    """One line of the benchmark's JSONL: a configuration and what its run gave."""
    return {"model": model, "batch": batch, "phase": phase, "optimizer": optimizer, **result}


@pytest.fixture
def report(tmp_path, monkeypatch):
    """``report(rows, tail="")``: the benchmark's ``report`` over ``rows`` written as its JSONL
    (then ``tail``, e.g. a line cut by a crash); returns the summary it wrote."""
    def run(rows: list[dict], tail: str = "") -> dict:
        jsonl = tmp_path / "r.jsonl"
        jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + tail)
        monkeypatch.setattr(mct, "JSONL", jsonl)
        monkeypatch.setattr(mct, "SUMMARY", tmp_path / "r.json")
        mct.cmd_report(None)
        return json.loads((tmp_path / "r.json").read_text())

    return run


def test_first_difference_names_the_operator():
    a = Trace([Allocation(0, 512, "forward", "mm.default"), Allocation(1, 64, "forward", "relu.default")])
    b = Trace([Allocation(0, 512, "forward", "mm.default"), Allocation(1, 128, "forward", "relu.default")])
    assert mct.first_difference(a, b) == "allocation 1: simulated relu.default 64 B, measured relu.default 128 B"
    assert mct.first_difference(a, a) is None


def test_report_counts_agreement_and_lists_outliers(report, capsys):
    s = report([row("m1", sim_peak=100, real_peak=100, rel_err=0.0),
                row("m2", phase="train", optimizer="adamw", sim_peak=80, real_peak=100, rel_err=-0.2,
                    first_difference="allocation 3: ..."),
                row("m3", sim_error="SimulationError: x", real_peak=5)], tail="{cut")
    assert (s["configurations_compared"], s["within_2pct"], s["over_10pct"], s["simulation_failed_only"]) == (2, 1, 1, 1)
    assert s["outliers"][0]["model"] == "m2"
    assert "outlier m2 b2 train adamw: -20.00 %" in capsys.readouterr().out


def test_report_counts_timeouts_and_a_retry_replaces_them(report, capsys):
    s = report([row("m1", phase="train", optimizer="adamw", error="timeout: over 120 s of CPU time"),
                row("m1", batch=3, phase="train", optimizer="adamw", error="not run: b2 train adamw timed out"),
                row("m2", error="ModelLoadError: x"),
                row("m1", phase="train", optimizer="adamw", sim_peak=10, real_peak=10, rel_err=0.0)])  # the retry
    assert (s["configurations_compared"], s["timeouts"], s["not_run_after_a_timeout"], s["build_or_run_errors"],
            s["models_run"], s["models_compared"]) == (1, 0, 1, 1, 2, 1)
    assert "failed m2 b2 infer: ModelLoadError: x" in capsys.readouterr().out


def test_recheck_counts_recorded_peaks_the_simulator_still_gives(tmp_path, monkeypatch, capsys):
    pytest.importorskip("timm")
    import argparse

    from perfseer.memory.step import StepConfig, trace_step

    module, shape = mct._build("timm", "test_resnet", True)
    cfg = StepConfig(phase="infer", optimizer="sgd", precision="fp32", target="cpu", foreach=False)
    peak = trace_step(module, shape, 2, cfg, fake=True).peak()[0]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in [
        row("timm:test_resnet", sim_peak=peak, real_peak=peak, rel_err=0.0),
        row("timm:test_resnet", batch=3, sim_peak=1, real_peak=1, rel_err=0.0, rev="abc"),  # not what it gives
        row("timm:other", sim_error="SimulationError: x")]) + "\n")
    monkeypatch.setattr(mct, "JSONL", jsonl)
    mct.cmd_recheck(argparse.Namespace(limit=None, offset=0))
    out = capsys.readouterr().out
    assert "1 models, 2 configurations simulated again: 1 give the recorded simulated peak to the byte, 1 do not" in out
    assert "timm:test_resnet b3 infer : recorded 1 B (rev abc), now" in out


def test_gpu_truth_from_store_compares_the_kits_cuda_rows(tmp_path):
    """``memory_gpu_truth.py from-store``: a CUDA result the collection kit stored is simulated with
    the same step; a CPU result (no allocator peak) is skipped; the summary is per phase."""
    import memory_gpu_truth as mgt

    import perfseer
    from perfseer.profiling.jobs import Job, Measurement
    from perfseer.profiling.store import Store

    ref = "timm:resnet18"
    sim = perfseer.memory(ref, batch=2, phase="infer", optimizer=None, input_shape=(3, 64, 64))
    store = Store(tmp_path / "gpu.sqlite")
    gpu = Job(ref, "3x64x64", 2, "infer", "fp32", "h200/torch-cuda")
    cpu = Job(ref, "3x64x64", 2, "infer", "fp32", "epyc/torch-t1")
    store.add_jobs([gpu, cpu])
    ids = dict((j.device, i) for i, j in store.job_ids([gpu, cpu]))
    mib = 2 ** 20
    store.record(ids["h200/torch-cuda"], Measurement(
        status="ok", latency_ms=1.0, memory_mb=1.1 * sim.peak_allocated / mib,
        extra={"memory_method": "torch-max-allocated", "memory_base_mb": 0.0,
               "memory_reserved_mb": sim.peak_reserved / mib, "nvml_used_mb": sim.peak_reserved / mib + 1300.0}))
    store.record(ids["epyc/torch-t1"], Measurement(status="ok", latency_ms=5.0, memory_mb=300.0,
                                                   extra={"memory_method": "rss"}))
    store.db.close()
    rows = mgt.compare_store(str(tmp_path / "gpu.sqlite"), None)
    assert len(rows) == 1 and rows[0]["device"] == "h200/torch-cuda"
    summary = {s["quantity"]: s for s in mgt.summarise(rows)}
    assert summary["allocated"]["n"] == 1
    assert summary["allocated"]["bias"] == pytest.approx(100 * (1 / 1.1 - 1), abs=0.01)
    assert summary["reserved"]["mape"] == pytest.approx(0.0, abs=1e-6)
    assert mgt.context_measured(rows) == {"infer fp32": {"n": 1, "median": pytest.approx(1300.0),
                                                         "min": pytest.approx(1300.0), "max": pytest.approx(1300.0)}}
    # the exported table gives the same rows; a given context moves only the device total
    Store(tmp_path / "gpu.sqlite", create=False).export(tmp_path / "gpu.csv")
    again = mgt.compare_store(str(tmp_path / "gpu.csv"), None, context_mib=1300.0)
    assert [r["allocated_mib"] for r in again] == pytest.approx([r["allocated_mib"] for r in rows])
    assert again[0]["sim_reserved_mib"] == pytest.approx(rows[0]["sim_reserved_mib"])
    assert again[0]["sim_total_mib"] == pytest.approx(sim.peak_reserved / mib + 1300.0)
    assert {s["quantity"]: s for s in mgt.summarise(again)}["device (NVML)"]["mape"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(SystemExit, match="no file at"):
        mgt.store_rows(str(tmp_path / "missing.sqlite"))
