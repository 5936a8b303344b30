"""The bundled spec model end to end: sanity of its answers, routing by device, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import perfseer
from helpers import assert_cli_error, run_cli
from perfseer.devices import get_device
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.net import SpecModelError
from perfseer.runtime.spec import load_spec_model
from perfseer.runtime.route import measured_predictors, predict_on_device, setting_precision


@pytest.fixture(scope="module")
def sm():
    return load_spec_model()


def _kernel_us(sm, table, device, precision="fp32"):
    spec = get_device(device)
    return float(sm.kernels.predict(table, kt.device_frame([spec] * len(table), [precision] * len(table),
                                                           table["family"]))[0])


def test_faster_gpu_is_faster_on_a_big_gemm(sm):
    g = kt.gemm_rows(1, 8192, 8192, 8192)
    t = {d: _kernel_us(sm, g, d) for d in ("tesla-p4", "t4", "v100-pcie-32gb", "a100-40gb-pcie", "h100-sxm")}
    assert t["h100-sxm"] < t["a100-40gb-pcie"] < t["v100-pcie-32gb"] < t["t4"]
    assert t["tesla-p4"] > t["v100-pcie-32gb"]
    # never faster than the roofline bound
    spec = get_device("h100-sxm")
    assert t["h100-sxm"] >= 2 * 8192**3 / (spec.peak("fp32") * 1e6)
    assert _kernel_us(sm, g, "h100-sxm", "bf16") < t["h100-sxm"] / 3  # tensor cores


def test_bandwidth_decides_a_memory_bound_kernel(sm):
    v = kt.vec_rows(2**28, 2, 1)
    assert _kernel_us(sm, v, "h200") < _kernel_us(sm, v, "h100-pcie") < _kernel_us(sm, v, "l4")


def test_latency_grows_with_batch_and_mig_slices_are_slower(sm):
    rows = sm.predict("example:resnet18", batch=[1, 64], device="a100-80gb-sxm", precision="fp16")
    assert rows[1]["value"] > rows[0]["value"] > 0
    assert "spec model" in rows[0]["basis"] and rows[0]["device"] == "a100-80gb-sxm"
    mig = sm.predict("example:resnet18", batch=64, device="a100-80gb-sxm:1g.10gb", precision="fp16")
    assert mig[0]["value"] > rows[1]["value"] * 2
    # a training step costs more than twice the forward pass (fp32: no inference calibration in the way)
    infer = sm.predict("example:resnet18", batch=64, device="a100-80gb-sxm", precision="fp32")
    train = sm.predict("example:resnet18", batch=64, device="a100-80gb-sxm", phase="train", precision="fp32")
    assert train[0]["value"] > 2 * infer[0]["value"]


def test_cpu_and_bad_input_are_refused(sm):
    with pytest.raises(SpecModelError, match="predicts GPUs; i9-10940x is a cpu"):
        sm.predict("example:resnet18", device="i9-10940x")
    with pytest.raises(SpecModelError, match="precision"):
        sm.predict("example:resnet18", device="l4", precision="fp64")
    with pytest.raises(SpecModelError, match="batch sizes"):
        sm.predict("example:resnet18", device="l4", batch=0)


def test_routing_prefers_a_measured_predictor():
    assert setting_precision("rtx3090/amp-nchw-pt240") == "amp-fp16" and setting_precision("titan_rtx") is None
    assert ("rtx3090-amp-nchw-pt240.infer", "rtx3090/amp-nchw-pt240") in measured_predictors("RTX 3090")
    assert measured_predictors("rtx3090", precision="fp32") == []
    assert measured_predictors("l4") == []
    rows = predict_on_device("example:resnet18", "rtx3090", batch=8)
    assert rows[0]["basis"].startswith("measured-device predictor rtx3090-amp-nchw-pt240.infer")
    spec_rows = predict_on_device("example:resnet18", "rtx3090", batch=8, prefer="spec", precision="fp16")
    assert spec_rows[0]["basis"].startswith("spec model")
    assert spec_rows[0]["value"] == pytest.approx(rows[0]["value"], rel=1.0)  # same order of magnitude


def test_the_h200_is_answered_by_its_calibrated_card_for_amp_inference_only():
    assert measured_predictors("h200", precision="fp16") == [("h200-amp-nchw-pt211.infer", "h200/amp-nchw-pt211")]
    rows = predict_on_device("example:resnet18", "h200", batch=256, precision="fp16")
    assert rows[0]["basis"].startswith("calibrated from rtx4090-amp-nchw-pt291.infer")
    assert rows[0]["interval"][0] < rows[0]["value"] < rows[0]["interval"][1]
    assert predict_on_device("example:resnet18", "h200", batch=256, precision="fp32")[0]["basis"].startswith("spec")


def test_cli_device_alone(capsys):
    code, out, err = run_cli(capsys, "predict", "example:resnet50", "--device", "l4", "--batch", "1,32",
                             "--precision", "fp32")
    assert code == 0, err
    assert "basis: spec model" in out and "l4" in out
    assert " ms*" not in out and "*: the prediction" not in out  # no flags here
    code, out, err = run_cli(capsys, "predict", "example:resnet18", "--device", "h200", "--batch", "8")
    assert code == 0, err  # a calibrated card flags its rows: the mark is explained under the table
    assert " ms*" in out and "*: the prediction carries flags" in out and "calibrated:loglinear" in out
    code, out, err = run_cli(capsys, "predict", "example:resnet50", "--device", "h100-sxm", "--precision", "bf16",
                             "--json")
    rows = json.loads(out)["predictions"]
    assert rows[0]["precision"] == "bf16" and rows[0]["value"] > 0 and "spec model" in rows[0]["basis"]
    assert_cli_error(capsys, ["predict", "example:resnet50", "--device", "rtx 9090"], "rtx 9090", "rtx5090",
                     "perfseer devices --add")
    assert_cli_error(capsys, ["predict", "example:resnet50"], "--predictor", "--device")
    assert_cli_error(capsys, ["predict", "example:resnet50", "--device", "l4", "--basis", "measured"], "l4")
