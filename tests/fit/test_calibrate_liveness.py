"""Calibration reads the live share of a graph (perfseer.graph.liveness): a device whose runtime
skips input-independent work is learned from a calibration row that shows it, and a prediction
for a network whose output does not depend on its input is flagged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perfseer.errors import PerfseerError
from perfseer.runtime.predictor import Target, load_predictor
from perfseer.fit import calibrate as C
from test_calibrate import _rows, source  # noqa: F401  (the fixture)


def _live(graphs, shares):
    for g, s in zip(graphs, shares):
        g.live = torch.tensor([[s, s, float(s <= 1e-3)]], dtype=torch.float64)
    return graphs


def test_folding_device_is_learned_from_the_live_share(source, tmp_path):  # noqa: F811
    src, ref = source
    graphs, y, models = _rows(src, 12, noise=0.01)
    shares = np.ones(12)
    shares[[2, 7]] = 1e-3  # two calibration networks whose output does not depend on the input
    _live(graphs, shares)
    y = y * np.maximum(shares, 0.02)  # the device runs them at 1/50 of their cost
    cfg = C.CalibrationConfig(method="loglinear", variant="full", live_features=("live_flops_fraction",))
    cal = C.calibrate(src, graphs, y, models, config=cfg)
    assert cal.correction.live_features == ["live_flops_fraction"] and cfg.to_dict()["live_features"]
    assert cal.domain["output_independent_rows"] == 2
    test_g, test_y, _ = _rows(src, 6, seed=3, noise=0.0)
    _live(test_g, [1, 1, 1, 1e-3, 1e-3, 1])
    test_y = test_y * np.array([1, 1, 1, 0.02, 0.02, 1])
    assert np.mean(np.abs(cal.predict(test_g) / test_y - 1)) < 0.25
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
    p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", "gpu_new", "infer"), rows, cfg)
    loaded = load_predictor(p.save(tmp_path / "cal"))
    np.testing.assert_allclose(loaded.predict_graphs(test_g)[:, 0], cal.predict(test_g), rtol=1e-5)
    out = [{"value": 1.0}, {"value": 1.0}]
    loaded.net.annotate(out, [test_g[0], test_g[3]])
    assert "output-independent-of-input" in out[1]["flags"] and "output-independent-of-input" not in out[0]["flags"]
    # calibrated on such networks: a flag, not a domain reason
    assert not any("does not depend on its input" in r for r in out[1]["domain_reasons"])


def test_uncalibrated_folding_is_a_domain_reason(source):  # noqa: F811
    src, ref = source
    graphs, y, models = _rows(src, 10)
    cfg = C.CalibrationConfig(method="loglinear", variant="full")  # the default: no live column
    cal = C.calibrate(src, graphs, y, models, config=cfg)
    assert cal.domain["output_independent_rows"] == 0 and cal.correction.live_features == []
    assert C.global_design(graphs).shape[1] == len(C.DOMAIN_FEATURES)
    with pytest.raises(PerfseerError):
        C.CalibrationConfig(live_features=("nope",))
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
    p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", "gpu_new", "infer"), rows, cfg)
    out = [{"value": 1.0}]
    p.net.annotate(out, _live([graphs[0]], [1e-3]))
    assert not out[0]["in_domain"] and any("does not depend on its input" in r for r in out[0]["domain_reasons"])


def test_prediction_path_attaches_liveness_for_a_calibrated_card(source):  # noqa: F811
    """``to_pyg()`` leaves liveness out (models do not read it); ``predict_bound`` adds it, once per
    model, for a card that reads it, so the flag reaches a prediction made from a model reference."""
    import warnings

    from perfseer.features.perfgraph import build_perfgraph
    from perfseer.graph.extract import extract_graph
    from perfseer.sources.nas.nb201_onnx import nb201_skeleton

    src, ref = source
    graphs, y, models = _rows(src, 10)
    cfg = C.CalibrationConfig(method="loglinear", variant="full")
    cal = C.calibrate(src, graphs, y, models, config=cfg)
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
    p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", "gpu_new", "infer"), rows, cfg)
    folded = build_perfgraph(extract_graph(nb201_skeleton("|none~0|+|none~0|nor_conv_3x3~1|+|none~0|none~1|skip_connect~2|"),
                                           batch=1))
    assert getattr(folded.to_pyg(), "live", None) is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny source never saw the cell's operators
        out = p.predict_bound(folded, [1, 4])
    assert len(out) == 2 and all("output-independent-of-input" in r["flags"] and not r["in_domain"] for r in out)
    assert src.net is not None and not getattr(src.net, "reads_liveness", False)


def test_cross_kind_calibration_is_warned_and_flagged(source):  # noqa: F811
    """A GPU predictor calibrated to a CPU (validation: 16-207 % MAPE against 10-16 % GPU to GPU)
    carries a warning on the card and a flag on every prediction; same kind or an unregistered
    device: nothing."""
    src, ref = source
    graphs, y, models = _rows(src, 10)
    cfg = C.CalibrationConfig(method="loglinear", variant="full")
    cal = C.calibrate(src, graphs, y, models, config=cfg)
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
    assert C.cross_kind_warning(src, "i9_10940x/fp32-nchw-pt240-dynamo") is None  # the source's gpu_a is unregistered
    src.targets = [Target("latency_ms", "rtx3090/amp-nchw-pt240", "infer"), Target("latency_ms", "rtx4090", "infer")]
    assert C.device_kinds(src, "i9_10940x/fp32-nchw-pt240-dynamo") == ("gpu", "cpu")
    assert C.cross_kind_warning(src, "rtx5090/amp-nchw-pt291") is None and C.cross_kind_warning(src, "my-npu") is None
    p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", "i9_10940x/fp32-nchw-pt240-dynamo", "infer"), rows, cfg)
    (w,) = p.card["calibration"]["warnings"]
    assert "GPU" in w and "CPU" in w and "perfseer predictors" in w
    out = [{"value": 1.0}]
    p.net.annotate(out, graphs[:1])
    assert "cross-kind-calibration" in out[0]["flags"]
