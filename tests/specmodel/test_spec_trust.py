"""Trust of spec-model rows: domain verdicts with reasons, intervals, the card fields behind them."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from helpers import run_cli
from perfseer.devices import get_device
from perfseer.features import schema
from perfseer.specmodel import kernels as kt
from perfseer.specmodel import trust
from perfseer.runtime.spec import load_spec_model

TRAIN = ("a100-40gb-pcie", "t4", "tesla-p100-pcie-16gb", "tesla-p4", "v100-pcie-32gb")


@pytest.fixture(scope="module")
def domain():
    return trust.build_domain([get_device(d) for d in TRAIN])


def test_domain_ranges_and_device_reasons(domain):
    assert domain["ranges"]["mem_bandwidth_gbs"][0] == pytest.approx(get_device("tesla-p4").mem_bandwidth_gbs)
    assert domain["ranges"]["sms"][1] == get_device("a100-40gb-pcie").sms
    assert trust.device_reasons(get_device("v100-pcie-32gb"), domain) == []
    r = trust.device_reasons(get_device("h100-sxm"), domain)
    assert any("memory bandwidth" in x and "above" in x for x in r) and any("FP32 peak" in x for x in r)
    # within the tolerance: a little beyond the range is still in domain
    a100_80 = get_device("a100-80gb-pcie")
    assert a100_80.mem_bandwidth_gbs < domain["ranges"]["mem_bandwidth_gbs"][1] * domain["tolerance"]
    assert not any("bandwidth" in x for x in trust.device_reasons(a100_80, domain))
    assert "AMD GPU" in trust.device_reasons(get_device("mi250"), domain)[0]


def test_precision_reasons(domain):
    assert trust.precision_reasons("fp32", domain) == []
    assert "no fp16 kernel measurements" in trust.precision_reasons("fp16", domain)[0]
    assert "TF32 off" in trust.precision_reasons("tf32", domain)[0]


def _x(n, macs=()):
    x = np.zeros((n, len(schema.NODE_FEATURES)))
    for i, m in macs:
        x[i, schema.NODE_FEATURES.index("macs")] = m
    return x


def test_op_reasons_compute_ops_as_memory_passes_and_uncovered_share(domain):
    table = pd.concat([kt.gemm_rows(1, 64, 64, 64).assign(node=0), kt.vec_rows(1e6, 1, 1).assign(node=1),
                       kt.vec_rows(1e6, 1, 1).assign(node=2)], ignore_index=True)
    ops = ["MatMul", "LSTM", "Relu"]
    us = np.array([10.0, 10.0, 80.0])
    r = trust.op_reasons(table, us, _x(3, [(0, 1e5), (1, 1e6)]), ops, domain)
    assert len(r) == 1 and r[0].startswith("LSTM: multiply-accumulates costed as a memory-bound pass")
    # a pooling op holding most of the time is out of domain; a small share is not
    ops = ["MatMul", "MaxPool", "Relu"]
    assert trust.op_reasons(table, np.array([10.0, 80.0, 10.0]), _x(3), ops, domain)[0].startswith("80 % of")
    assert trust.op_reasons(table, np.array([80.0, 10.0, 10.0]), _x(3), ops, domain) == []


def test_calibration_reasons_name_families_the_runs_lacked():
    table = pd.concat([kt.gemm_rows(1, 64, 64, 64), kt.conv_rows(8, 64, 64, 3, 56, 56, 1, 1)], ignore_index=True)
    cal = {"families": ["gemm", "vec", "ln", "softmax"]}
    r = trust.calibration_reasons(table, np.array([50.0, 50.0]), cal, "fp32", 0.25)
    assert r and r[0].startswith("50 % of the predicted step is in conv kernels")
    assert trust.calibration_reasons(table, np.array([90.0, 10.0]), cal, "fp32", 0.25) == []
    assert trust.calibration_reasons(table, np.array([50.0, 50.0]), {}, "amp-calibrated", 0.25) == []


def _card(domain, q=0.2):
    return {"domain": domain, "intervals": {"fp32": {"q": q, "n": 34}, "amp-calibrated": {"q": 0.5, "n": 900}},
            "ood_factor": 2.0}


def _assess(card, device, precision="fp32", calibrated=False, value=10.0):
    table = kt.gemm_rows(1, 4096, 4096, 4096).assign(node=0)
    u = np.zeros(len(schema.GLOBAL_FEATURES))
    u[schema.GLOBAL_FEATURES.index("flops_total")] = float(table["flops"].iloc[0])
    return trust.assess_row(value, get_device(device), precision, "infer", calibrated, card, table, np.array([1e5]),
                            _x(1, [(0, 1.0)]), ["MatMul"], u)


def test_assess_row_interval_widened_out_of_domain(domain):
    card = _card(domain)
    a = _assess(card, "v100-pcie-32gb")
    assert a["in_domain"] and a["domain_reasons"] == [] and a["flags"] == []
    assert a["interval"] == pytest.approx([10 * math.exp(-0.2), 10 * math.exp(0.2)])
    b = _assess(card, "h100-sxm")
    assert not b["in_domain"] and b["interval"] == pytest.approx([10 * math.exp(-0.4), 10 * math.exp(0.4)])
    # fp16 calibrated: the precision is what amp-calibrated was measured at -> not widened for it
    c = _assess(card, "v100-pcie-32gb", "fp16", calibrated=True)
    assert not c["in_domain"] and c["interval"] == pytest.approx([10 * math.exp(-0.5), 10 * math.exp(0.5)])
    # no calibration for the kind -> no interval, and a flag saying why
    d = _assess(card, "v100-pcie-32gb", "bf16", calibrated=False)
    assert d["interval"] is None and "amp-zero-shot" in d["flags"][0]
    # no domain in the card -> out of domain with that reason
    e = _assess({}, "v100-pcie-32gb")
    assert not e["in_domain"] and "no domain" in e["domain_reasons"][0]


def test_value_below_the_physical_floor_is_raised_and_flagged(domain):
    a = _assess(_card(domain), "v100-pcie-32gb", value=1e-6)
    assert a["value"] > 1e-6 and "below the physical floor" in a["flags"][0]


def test_bundled_rows_carry_interval_and_verdict():
    sm = load_spec_model()
    assert "domain" in sm.card and "fp32" in sm.card["intervals"]
    (r,) = sm.predict("example:vit_b_16", batch=8, device="a100-40gb-pcie", precision="fp32", use_route=False)
    assert r["in_domain"] is True, r["domain_reasons"]
    lo, hi = r["interval"]
    assert lo < r["value"] < hi
    assert "its FP32 kernels in the training data" in r["basis"]
    # a CNN at fp32: the fp32 interval was calibrated on transformers only
    (c,) = sm.predict("example:resnet18", batch=8, device="a100-40gb-pcie", precision="fp32", use_route=False)
    assert c["in_domain"] is False and "conv kernels" in c["domain_reasons"][0]
    assert c["interval"][1] / c["value"] > (hi / r["value"]) ** 1.5  # widened
    (r,) = sm.predict("example:resnet18", batch=8, device="h100-sxm", precision="bf16", use_route=False)
    assert r["in_domain"] is False and any("bf16" in x for x in r["domain_reasons"])
    assert r["interval"][0] < r["value"] < r["interval"][1] and "no measurement of it" in r["basis"]


def test_cli_shows_interval_and_domain_for_spec_rows(capsys):
    # the B200's 8 TB/s lie beyond every measured GPU's bandwidth: out of domain whichever basis the route takes
    code, out, err = run_cli(capsys, "predict", "example:resnet18", "--device", "b200", "--precision", "fp16", "--json",
                             "--basis", "spec")
    assert code == 0, err
    (r,) = json.loads(out)["predictions"]
    assert r["interval"] and r["in_domain"] is False and r["domain_reasons"] and "flags" in r
    code, out, err = run_cli(capsys, "predict", "example:resnet18", "--device", "b200", "--precision", "fp16",
                             "--basis", "spec")
    assert code == 0, err
    assert "OUT" in out and "fp16" in out


def test_relative_feature_sets_drop_the_kernel_dimensions():
    g = kt.gemm_rows([1, 4], [512, 2048], [512, 1024], [256, 4096])
    dev = kt.device_frame([get_device("t4")] * 2, ["fp32"] * 2, g["family"])
    full, t1 = kt.features("gemm", g, dev, feature_set="full")
    rel, t2 = kt.features("gemm", g, dev, feature_set="relative-gemm")
    assert full.shape[1] == rel.shape[1] + 4 and np.allclose(t1, t2)
    v = kt.vec_rows([1e6, 1e7], 2, 1)
    dv = kt.device_frame([get_device("t4")] * 2, ["fp32"] * 2, v["family"])
    # relative-gemm keeps the element-wise kernels' sizes; relative drops them
    assert kt.features("vec", v, dv, feature_set="relative-gemm")[0].shape == kt.features("vec", v, dv)[0].shape
    assert kt.features("vec", v, dv, feature_set="relative")[0].shape[1] == kt.features("vec", v, dv)[0].shape[1] - 1
    with pytest.raises(ValueError, match="feature_set"):
        kt.features("vec", v, dv, feature_set="nope")
