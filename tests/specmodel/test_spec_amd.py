"""The AMD side of the spec model's NeuSight evaluation: the FP32 matrix peak for GEMMs, the AMD
label folders, and benchmarks/lib/spec_neusight_amd.py's helpers (synthetic files, no real data)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import kernels as kt
from perfseer.specmodel import neusight as ns


from benchmarks.lib import spec_neusight_amd as amd  # noqa: E402


def test_matrix_fp32_peak_only_for_gemms_of_a_sheet_that_has_one():
    mi100, a100 = get_device("mi100"), get_device("a100-40gb-pcie")
    fams = ["gemm", "vec", "conv", "softmax"]
    plain = kt.device_frame([mi100] * 4, ["fp32"] * 4, fams)
    mat = kt.device_frame([mi100] * 4, ["fp32"] * 4, fams, matrix_fp32=True)
    assert list(plain["peak_tflops"]) == [23.1] * 4  # the default: the vector peak everywhere
    assert list(mat["peak_tflops"]) == [46.1, 23.1, 46.1, 23.1]
    assert kt.device_frame([mi100], ["fp16"], ["gemm"], matrix_fp32=True)["peak_tflops"][0] == mi100.peak("fp16")
    # no NVIDIA sheet has an FP32 matrix peak: their rows are unchanged (the leave-one-GPU-out results too)
    assert kt.device_frame([a100] * 4, ["fp32"] * 4, fams, matrix_fp32=True).equals(
        kt.device_frame([a100] * 4, ["fp32"] * 4, fams))


def _trace_folder(root: Path) -> Path:
    (root / "kernels").mkdir(parents=True)
    lab = root / "labels" / "AMD_Instinct_MI100"
    lab.mkdir(parents=True)
    rows = [{"op": "placeholder", "target": "x", "meta": "", "input_shapes": "[]", "output_shape": "[2, 8, 16]",
             "dtype": "torch.float32", "Name": "x", "fw_latency": 0.0, "bw_latency": 0.0, "acc_latency": 0.0},
            {"op": "call_module", "target": "model.layer.0.dense",
             "meta": "{'nn_module_stack': {'model.layer.0.dense': (\"layer.0.dense\", <class 'torch.nn.Linear'>)}}",
             "input_shapes": "[[2, 8, 16]]", "output_shape": "[2, 8, 32]", "dtype": "torch.float32",
             "Name": "dense", "fw_latency": 0.5, "bw_latency": 1.0, "acc_latency": 0.1}]
    pd.DataFrame(rows).to_csv(lab / "bert-train-8-2.csv.gz", index=False)
    (lab / "bert-train-8-2.json").write_text(json.dumps({"num_layer": 3, "e2e_latency": 5.0, "fw_latency": 2.0,
                                                         "bwall_latency": 3.0}))
    a100 = root / "labels" / "NVIDIA_A100-PCIE-40GB"
    a100.mkdir(parents=True)
    for name, ms in (("bert-inf-8-2", 10.0), ("bert-inf-8-2-fusion", 8.0), ("gpt-inf-8-2-fusion", 1.0)):
        (a100 / f"{name}.json").write_text(json.dumps({"num_layer": 3, "e2e_latency": ms, "fw_latency": ms,
                                                      "bwall_latency": 0}))
    return root


def test_amd_label_folders_load_only_when_asked(tmp_path):
    root = _trace_folder(tmp_path)
    assert ns.load_workloads(root) == []  # the default: NVIDIA training GPUs only
    (w,) = ns.load_workloads(root, label_dirs=ns.AMD_LABEL_DIRS)
    assert (w.device, w.phase, w.num_layer, w.e2e_ms) == ("mi100", "train", 3, 5.0)
    assert set(w.trace["pass"]) == {"fw", "bw"} and (w.trace["scale"] == 3.0).all()
    assert w.node_ms["bw_ms"].iloc[0] == pytest.approx(1.1)  # backward + gradient accumulation
    assert amd.trace_dtypes(root, ns.AMD_LABEL_DIRS) == {"torch.float32": 2}


def test_fusion_rows_pair_compiled_with_unfused_and_their_prediction(tmp_path):
    root = _trace_folder(tmp_path)
    logo = tmp_path / "logo.json"
    logo.write_text(json.dumps({"workloads": [{"gpu": "a100-40gb-pcie", "workload": "bert-inf-8-2", "spec_ms": 9.0,
                                               "config": "full-ood50"}]}))
    (r,) = amd.fusion_rows(root, logo)  # gpt has no unfused label: skipped
    assert (r["workload"], r["unfused_ms"], r["fused_ms"], r["spec_unfused_ms"]) == ("bert-inf-8-2", 10.0, 8.0, 9.0)
    assert "| -20.0 |" in amd.fusion_table([r]) and "| +12.5 |" in amd.fusion_table([r])
    assert amd.fusion_rows(root, tmp_path / "absent.json") == []


def test_tables_and_coverage_per_variant():
    rows = []
    for v in amd.VARIANTS:
        for g, e in (("mi100", 0.1), ("mi210", -0.5)):
            rows.append({"gpu": g, "workload": "bert_large-inf-512-8", "phase": "infer", "measured_ms": 100.0,
                         "spec_ms": 100.0 * (1 + e), "roofline_ms": 90.0, "variant": v})
    df = pd.DataFrame(rows)
    df["spec_err_pct"] = (df["spec_ms"] / df["measured_ms"] - 1).abs() * 100
    df["roofline_err_pct"] = (df["roofline_ms"] / df["measured_ms"] - 1).abs() * 100
    assert "| both | all | 2 | 30.0 | 30.0 | 30.0 | 10.0 | 10.0 |" in amd.gpu_table(df)
    assert "| bert_large | infer | 2 | 30.0 | -20.0 |" in amd.model_table(df)
    card = {"intervals": {"fp32": {"q": 0.2}}, "domain": {"vendors": ["nvidia"]}, "ood_factor": 2.0}
    cov = amd.interval_coverage(df, card)["per_variant"]["vector"]
    # |ln(1 / 1.1)| = 0.095 inside q; |ln(1 / 0.5)| = 0.69 outside even widened to 0.4 (AMD: another vendor)
    assert cov["mi100"]["coverage_pct"] == 100.0 and cov["mi100"]["factor"] == 2.0
    assert cov["mi210"]["coverage_pct"] == 0.0


def test_gemm_efficiency_against_both_peaks(tmp_path):
    from dataclasses import replace

    (w,) = ns.load_workloads(_trace_folder(tmp_path), label_dirs=ns.AMD_LABEL_DIRS)
    eff = amd.gemm_efficiency([replace(w, phase="infer")])["mi100"]["linear"]
    flops = 2 * 16 * 16 * 32 + 16 * 32  # (2 x 8) x 16 @ 16 x 32 + bias, in 0.5 ms
    assert eff["tflops"] == pytest.approx(flops / 0.5e-3 / 1e12)
    assert eff["of_vector_peak"] == pytest.approx(eff["tflops"] / 23.1)
    assert eff["of_matrix_peak"] == pytest.approx(eff["tflops"] / 46.1)
    assert amd.gemm_efficiency([w]) == {}  # training traces are left out
