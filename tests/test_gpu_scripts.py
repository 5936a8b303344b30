"""The GPU-session scripts (benchmarks/gpu/, benchmarks/lib/new_device.py): what can be checked without a GPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest


ROOT = Path(__file__).resolve().parents[1]
from benchmarks.lib import new_device as nd  # noqa: E402


def table():
    rows = [("timm:a", "gpu_x", 1.0), ("timm:b", "gpu_x", 2.0), ("timm:c", "gpu_x", 4.0),
            ("timm:a", "gpu_y", 3.0), ("timm:c", "gpu_y", None), ("timm:d", "gpu_y", 0.0)]
    return pd.DataFrame([{"model": m, "input_shape": "3x224x224", "batch_size": 8, "phase": "infer",
                          "device": d, "latency_ms": v} for m, d, v in rows])


def test_split_picks_the_device_with_most_calibration_rows_and_holds_out_other_models():
    device, cal, held = nd.split_rows(table(), ["timm:a", "timm:b"], None, "latency_ms")
    assert device == "gpu_x"
    assert cal["model"].tolist() == ["timm:a", "timm:b"] and held["model"].tolist() == ["timm:c"]
    device, cal, held = nd.split_rows(table(), ["timm:a"], "gpu_y", "latency_ms")
    assert cal["model"].tolist() == ["timm:a"] and held.empty  # missing and zero latencies dropped
    with pytest.raises(SystemExit, match="no row of the table is a calibration model"):
        nd.split_rows(table(), ["timm:z"], None, "latency_ms")


def test_split_holds_out_only_rows_of_the_calibration_rows_precision():
    t = table().assign(precision="amp_fp16")
    fp32 = t.iloc[[2]].assign(model="timm:e", precision="fp32", batch_size=32)  # a memory row, same device
    device, cal, held = nd.split_rows(pd.concat([t, fp32]), ["timm:a", "timm:b"], None, "latency_ms")
    assert held["model"].tolist() == ["timm:c"]


def test_zero_shot_rows_are_the_spec_transfer_or_the_spec_model_even_for_a_bundled_device():
    from perfseer.api import extract
    from perfseer.errors import PerfseerError

    g = extract("example:resnet18", batch=1)
    amp = pd.DataFrame({"batch_size": [64], "phase": ["infer"], "precision": ["amp_fp16"]})
    both = pd.DataFrame({"batch_size": [64, 8], "phase": ["infer", "infer"], "precision": ["amp_fp16", "fp32"]})
    transfer = nd.zero_shot_rows(amp, [g], "h200", "transfer")  # the H200 has a bundled card: not used
    spec = nd.zero_shot_rows(both, [g, g], "h200", "spec")
    assert transfer[0]["basis"].startswith("transfer")
    assert all(r["basis"].startswith("spec model") for r in spec)
    assert all(np.isfinite(r["value"]) and r["value"] > 0 and r["interval"][0] < r["value"] < r["interval"][1]
               for r in transfer + spec)
    with pytest.raises(PerfseerError, match="AMP"):  # the transfer answers AMP inference only
        nd.zero_shot_rows(both, [g, g], "h200", "transfer")


def test_held_out_graphs_are_extracted_once_per_model_the_way_the_source_card_reads_them():
    held = pd.DataFrame({"model": ["example:resnet18", "example:resnet18"], "input_shape": ["3x64x64"] * 2,
                         "batch_size": [1, 4]})
    kept = nd.held_out_graphs(held, weight_work=True)  # e.g. the i9 card (weight work kept)
    folded = nd.held_out_graphs(held, weight_work=False)
    assert kept[0] is kept[1] and kept[0].graph.weight_work and not folded[0].graph.weight_work


def test_the_spec_transfer_calibrated_on_rows_that_it_over_predicts_twofold_comes_down():
    from perfseer.api import extract

    refs = ["example:resnet18", "example:resnet50", "example:mobilenet_v3_small", "example:vit_b_16"]
    graphs = [extract(r, batch=1) for r in refs]
    held = pd.DataFrame({"model": refs, "batch_size": [64] * 4, "phase": ["infer"] * 4,
                         "precision": ["amp_fp16"] * 4})
    zero = np.array([r["value"] for r in nd.zero_shot_rows(held, graphs, "h200", "transfer")])
    cal = held.assign(latency_ms=zero / 2)  # the device runs everything twice as fast as the transfer says
    values, factor, variant = nd.calibrated_transfer(cal, graphs, held, graphs, zero, "h200", "latency_ms")
    assert variant and values.shape == (4,) and np.all(values < zero)
    assert np.median(values / (zero / 2)) == pytest.approx(1.0, abs=0.15)


def test_the_cost_fit_baseline_recovers_a_device_whose_latency_follows_flops():
    from perfseer.api import extract

    refs = ["example:resnet18", "example:resnet50", "example:mobilenet_v3_small", "example:vit_b_16"]
    graphs = [extract(r, batch=1) for r in refs]
    rows = pd.DataFrame({"model": refs, "batch_size": [1, 2, 4, 1]})
    flops = np.array([g.with_batch(int(b)).flops for g, b in zip(graphs, rows["batch_size"])])
    cal = rows.assign(latency_ms=2e-9 * flops)  # 2 ms per GFLOP, whatever the bytes
    pred = nd.cost_fit(cal, graphs, rows, graphs, "latency_ms")
    assert pred == pytest.approx(cal["latency_ms"].to_numpy(), rel=1e-6)


def test_the_calibration_list_is_a_collect_models_file():
    from perfseer.cli.collect import read_model_file

    assert len(read_model_file(str(nd.CALIBRATION_SET))) == 20


def test_scores_count_interval_hits_and_domain():
    y = np.array([1.0, 2.0, 4.0, 8.0])
    rows = [{"interval": [0.5, 1.5], "in_domain": True}, {"interval": [2.5, 3.0], "in_domain": True},
            {"interval": [3.0, 5.0], "in_domain": False}, {"interval": None, "in_domain": True}]
    s = nd.score(y, [1.1, 2.0, 3.6, 8.0], rows)
    assert s["mape"] == pytest.approx(100 * (0.1 + 0 + 0.1 + 0) / 4)
    assert s["coverage"] == pytest.approx(2 / 3) and s["in_domain"] == pytest.approx(0.75)
    assert s["spearman"] == pytest.approx(1.0)


def test_collect_script_refuses_without_an_output_folder():
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "collect_gpu.sh")], capture_output=True, text=True)
    assert out.returncode != 0 and "usage: collect_gpu.sh OUTDIR" in out.stderr


def test_scores_per_batch_size():
    y = [1.0, 2.0, 4.0, 8.0, 3.0, 6.0]
    rows = [{"value": v * 1.1, "interval": [v, v * 1.2], "in_domain": b == 1} for v, b in zip(y, [1, 1, 1, 8, 8, 8])]
    src = [{"value": v * 2} for v in y]
    out = nd.by_batch([1, 1, 1, 8, 8, 8], y, rows, src, np.array(y) * 0.5)
    assert set(out) == {"1", "8"}
    assert out["1"]["calibrated"]["rows"] == 3 and out["8"]["calibrated"]["in_domain"] == 0.0
    assert out["1"]["calibrated"]["mape"] == pytest.approx(10.0) and out["8"]["source as is"]["mape"] == pytest.approx(100.0)
    assert out["8"]["FLOPs + bytes fit"]["mape"] == pytest.approx(50.0) and out["1"]["calibrated"]["coverage"] == 1.0
