"""The memory suite (benchmarks/suites/memory.py): its CPU summary, its re-measurement and its
comparison with a GPU collection export, on synthetic rows and a tiny model."""

import pytest

from benchmarks.runner import BenchError
from benchmarks.suites import memory as M


def row(model: str, batch: int = 2, phase: str = "infer", optimizer: str | None = None, **result) -> dict:
    """One line of the ground truth's JSONL: a configuration and what its run gave."""
    return {"model": model, "batch": batch, "phase": phase, "optimizer": optimizer, **result}


def test_cpu_summary_counts_agreement_per_mode():
    s = M.cpu_summary([row("timm:a", sim_peak=100, real_peak=100, rel_err=0.0),
                       row("timm:a", phase="train", optimizer="adamw", sim_peak=80, real_peak=100, rel_err=-0.2),
                       row("torchvision:b", sim_peak=101, real_peak=100, rel_err=0.01),
                       row("timm:c", sim_error="SimulationError: x", real_peak=5)])
    assert (s["configurations_compared"], s["within_2pct"], s["exact"], s["failed"]) == (3, 2, 1, 1)
    assert (s["timm_models"], s["torchvision_models"]) == (1, 1)
    assert s["by_mode"] == {"infer": [2, 2, 1], "train adamw": [1, 0, 0]}
    assert s["max_abs_rel_err"] == pytest.approx(0.2)


def test_remeasure_compares_with_the_recorded_bytes():
    pytest.importorskip("timm")
    first = M.run_config("timm:test_resnet", 2, "infer", None)
    recorded = [row("timm:test_resnet", sim_peak=first["sim_peak"], real_peak=first["real_peak"], rel_err=0.0),
                row("timm:test_resnet", batch=3, sim_peak=1, real_peak=1, rel_err=0.0),  # not what it gives
                row("timm:test_resnet", batch=4, sim_error="x")]                           # no comparison: skipped
    out = M.remeasure(["timm:test_resnet"], recorded, batches=(2, 3, 4), modes=M.MODES[:1])
    assert len(out["rows"]) == 2 and (out["same_sim"], out["same_real"]) == (1, 1)


def test_gpu_comparison_reads_the_kits_cuda_rows(tmp_path):
    """A CUDA result of the collection kit is simulated with the same step; a CPU result (no
    allocator peak) is skipped; the summary is per phase and precision."""
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
    store.export(tmp_path / "gpu.csv")
    store.db.close()
    rows = M.compare_store(tmp_path / "gpu.csv", None)
    assert len(rows) == 1
    summary = {s["quantity"]: s for s in M.summarise(rows)}
    assert summary["allocated"]["n"] == 1
    assert summary["allocated"]["bias"] == pytest.approx(100 * (1 / 1.1 - 1), abs=0.01)
    assert summary["reserved"]["mape"] == pytest.approx(0.0, abs=1e-6)
    assert M.compare_store(tmp_path / "gpu.csv", None, exclude=(ref,)) == []  # its inference rows left out
    with pytest.raises(BenchError, match="no file at"):
        M.store_rows(tmp_path / "missing.csv")
