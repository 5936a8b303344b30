"""The spec-conditioned transfer (perfseer.specmodel.transfer, transfer_predictor) and its routing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import assert_cli_error, run_cli
from perfseer.devices import get_device
from perfseer.features import schema
from perfseer.runtime import transfer as xp
from perfseer.runtime.route import predict_on_device
from perfseer.specmodel.transfer import (FEATURE_SETS, SPEC_KEYS, Transfer, TransferError, roofline_ms,
                                         spec_vector)

GPUS = {  # synthetic spec vectors: fp16 TFLOP/s, GB/s, SMs, MHz, L2 MiB
    "a": np.array([50.0, 800, 60, 1500, 6]), "b": np.array([100.0, 1000, 100, 2000, 40]),
    "c": np.array([200.0, 2000, 150, 2400, 96]), "d": np.array([400.0, 1500, 180, 2200, 128])}


def _synthetic(seed=0, n=300):
    """Graphs whose latency on each GPU is exactly 2 * roofline^0.8 (no noise)."""
    rng = np.random.default_rng(seed)
    flops = 10 ** rng.uniform(8, 12, n)
    mem = 10 ** rng.uniform(6, 10, n)
    terms = np.column_stack([np.log10(flops), np.log10(mem), rng.uniform(1, 3, n), rng.uniform(0, 3, n),
                             np.log10(flops / mem)])
    roof = {g: np.maximum(flops / (v[0] * 1e12), mem * 0.5 / (v[1] * 1e9)) * 1e3 for g, v in GPUS.items()}
    logy = {g: 0.8 * np.log10(r) + 0.3 for g, r in roof.items()}
    return terms, roof, logy


def _pairs(gpus, terms, roof, logy):
    return [{"log_y_src": logy[s], "log_y_tgt": logy[t], "terms": terms, "roof_src": roof[s], "roof_tgt": roof[t],
             "spec_src": GPUS[s], "spec_tgt": GPUS[t]} for s in gpus for t in gpus if s != t]


def test_roofline_and_spec_vector():
    x = np.zeros((2, len(schema.NODE_FEATURES)))
    x[0, schema.NODE_FEATURES.index("flops")] = 1e12  # 10 ms at 100 TFLOP/s
    x[1, schema.NODE_FEATURES.index("memory_access_bytes")] = 2e9  # 1e9 B at 1000 GB/s: 1 ms
    assert roofline_ms(x, GPUS["b"]) == pytest.approx(11.0, rel=1e-6)
    v = spec_vector(get_device("rtx4090"))
    assert v.tolist() == [165.2, 1008.0, 128.0, 2520.0, 72.0] and len(v) == len(SPEC_KEYS)


def test_fit_learns_the_roofline_exponent_and_transfers_to_an_unseen_gpu():
    terms, roof, logy = _synthetic()
    tr = Transfer(feature_set="roof", alpha=1e-4, combine="geomean").fit(_pairs("abc", terms, roof, logy))
    assert tr.coef[0] == pytest.approx(0.8, abs=1e-3)
    per = np.stack([logy[s] + tr.shift(logy[s], terms, roof[s], roof["d"], GPUS[s], GPUS["d"]) for s in "abc"])
    pred = tr.combine_sources(per, np.stack([GPUS[s] for s in "abc"]), GPUS["d"])
    assert np.abs(pred - logy["d"]).max() < 1e-3
    # fixed rules: identity and plain roofline
    assert np.all(Transfer(feature_set="identity").fit([]).shift(logy["a"], terms, roof["a"], roof["d"],
                                                                 GPUS["a"], GPUS["d"]) == 0)
    rl = Transfer(feature_set="roofline").shift(logy["a"], terms, roof["a"], roof["d"], GPUS["a"], GPUS["d"])
    assert np.allclose(rl, np.log10(roof["d"] / roof["a"]))


def test_combine_nearest_and_nan_sources():
    tr = Transfer(feature_set="identity", combine="nearest")
    per = np.array([[1.0, 1.0], [2.0, np.nan]])
    # source 1 (c) is nearer to d than source 0 (a); where it is missing, a answers
    out = tr.combine_sources(per, np.stack([GPUS["a"], GPUS["c"]]), GPUS["d"])
    assert out.tolist() == [2.0, 1.0]
    g = Transfer(feature_set="identity", combine="geomean").combine_sources(per, np.stack([GPUS["a"], GPUS["c"]]),
                                                                           GPUS["d"])
    assert g.tolist() == [1.5, 1.0]


def test_json_round_trip_and_bad_input():
    terms, roof, logy = _synthetic(1)
    tr = Transfer(feature_set="spec-x", alpha=0.1).fit(_pairs("abc", terms, roof, logy))
    back = Transfer.from_dict(json.loads(json.dumps(tr.to_dict())))
    assert back.coef == tr.coef and back.feature_set == "spec-x"
    bad = dict(tr.to_dict(), coef=[0.0])
    with pytest.raises(TransferError, match="coefficients"):
        Transfer.from_dict(bad)
    with pytest.raises(TransferError, match="feature set"):
        Transfer(feature_set="nope")
    with pytest.raises(TransferError, match="no GPU pairs"):
        Transfer(feature_set="roof").fit([])
    assert set(FEATURE_SETS) >= {"identity", "roofline", "spec"}


def test_bundled_card_domain_and_routing_rules():
    tp = xp.load_transfer()
    assert xp.preferred(tp.card)  # the card's leave-one-GPU-out beat the spec model
    assert not xp.preferred({"logo": {"transfer_from_seernet_mape": 50.0, "spec_zero_shot_mape": 40.0}})
    dom = tp.card["domain"]
    assert xp.device_reasons(get_device("rtx-pro-6000-maxq"), dom) == []
    h100 = xp.device_reasons(get_device("h100-sxm"), dom)
    assert h100 and any("fp16_tflops" in r for r in h100)
    assert xp.applicable(get_device("l40s"), "infer", None) and xp.applicable(get_device("l40s"), "infer", "fp16")
    assert not xp.applicable(get_device("l40s"), "train", None)
    assert not xp.applicable(get_device("l40s"), "infer", "fp32")
    assert not xp.applicable(get_device("i9-10940x"), "infer", None)
    assert [e["device"] for _, e in tp.sources("rtx4090")] == ["rtx3090", "rtx5090"]
    with pytest.raises(TransferError, match="spec-transfer card"):
        xp.TransferPredictor({"format": "other"})


def test_predict_on_an_unmeasured_gpu_uses_the_transfer(capsys):
    rows = predict_on_device("example:resnet50", "l40s", batch=[1, 256])
    assert all(r["basis"].startswith("transfer from rtx3090 + rtx4090 + rtx5090 via specs") for r in rows)
    assert rows[1]["value"] > rows[0]["value"] > 0 and rows[0]["precision"] == "amp-fp16"
    lo, hi = rows[1]["interval"]
    assert lo < rows[1]["value"] < hi and rows[1]["in_domain"]  # batch 256: inside every source's domain
    # beyond the fitted GPUs' specs: out of domain with a reason, wider interval
    h = predict_on_device("example:resnet50", "h100-sxm", batch=256, prefer="transfer")[0]
    assert not h["in_domain"] and any("h100-sxm" in r for r in h["domain_reasons"])
    assert h["interval"][1] / h["interval"][0] > hi / lo
    # other precisions and phases keep the spec model
    assert predict_on_device("example:resnet18", "l40s", batch=8, precision="fp32")[0]["basis"].startswith("spec")
    with pytest.raises(Exception, match="transfer"):
        predict_on_device("example:resnet18", "l40s", batch=8, precision="fp32", prefer="transfer")
    code, out, err = run_cli(capsys, "predict", "example:resnet18", "--device", "l40s", "--batch", "8")
    assert code == 0, err
    assert "basis: transfer from" in out
    assert_cli_error(capsys, ["predict", "example:resnet18", "--device", "l40s", "--basis", "transfer", "--phase",
                              "train"], "transfer", "--basis spec")


def test_the_sources_reasons_are_merged_by_kind():
    from perfseer.runtime.transfer import merge_source_reasons

    out = merge_source_reasons([
        ("rtx3090", ["batch 1 outside the training batch sizes 6-1024", "global features outside the training range: a 1 < 2"]),
        ("rtx4090", ["batch 1 outside the training batch sizes 4-1024", "global features outside the training range: b 3 < 4"]),
        ("rtx5090", ["embedding 1.3x the distance threshold from the nearest training graph"]),
    ])
    assert out == [
        "sources rtx3090, rtx4090: batch 1 outside the training batch sizes 6-1024 (figures of rtx3090)",
        "sources rtx3090, rtx4090: global features outside the training range: a 1 < 2 (figures of rtx3090)",
        "source rtx5090: embedding 1.3x the distance threshold from the nearest training graph",
    ]
    assert merge_source_reasons([("a", ["x 1"]), ("b", ["x 1"])]) == ["sources a, b: x 1"]
