"""Calibration to a new device (perfseer.fit.calibrate, perfseer calibrate): tiny synthetic
graphs and a tiny SeerNet source, seconds in all."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from perfseer.errors import PerfseerError
from perfseer.models.registry import build_model
from perfseer.runtime.predictor import Predictor, Target, load_predictor
from perfseer.fit import calibrate as C
from perfseer.runtime.scaling import FeatureScaler, TargetScaler
from perfseer.runtime.net import NeuralPredictor
from train_helpers import chain_graph

FAST = dict(steps=10, steps_full=3, cv_folds=2)


@pytest.fixture
def source(tmp_path):
    """A random tiny SeerNet-Multi over two devices, saved and loaded like any predictor."""
    rng = np.random.default_rng(0)
    graphs = [chain_graph(rng) for _ in range(30)]
    torch.manual_seed(0)
    model = build_model("seernet-multi", num_targets=2, hidden_dim=8, head_hidden_dim=8)
    ts = TargetScaler(["latency_ms", "latency_ms"])
    ts.mean_, ts.std_ = np.zeros(2), np.ones(2)
    net = NeuralPredictor(model, FeatureScaler().fit(graphs), ts)
    targets = [Target("latency_ms", "gpu_a", "infer"), Target("latency_ms", "gpu_b", "infer")]
    Predictor.from_training("src", "seernet-multi", net, targets, ["Conv", "Relu"], {}, {}).save(tmp_path)
    return load_predictor(tmp_path / "src.json"), str(tmp_path / "src.json")


def _rows(src, k, seed=1, factor=3.0, noise=0.02):
    rng = np.random.default_rng(seed)
    graphs = [chain_graph(rng) for _ in range(k)]
    y = factor * src.predict_graphs(graphs)[:, 1] * np.exp(rng.normal(0, noise, k))
    return graphs, y, [f"m{i}" for i in range(k)]


def test_loglinear_recovers_a_scaled_device(source):
    src, _ = source
    graphs, y, models = _rows(src, 12)
    cal = C.calibrate(src, graphs, y, models, config=C.CalibrationConfig(method="loglinear"))
    test_g, test_y, _ = _rows(src, 20, seed=2, noise=0.0)
    pred = cal.predict(test_g)
    assert np.mean(np.abs(pred / test_y - 1)) < 0.1
    assert cal.interval["rule"] == C.DEFAULT_INTERVAL and cal.interval["factor"] > 1
    assert cal.interval["selection"] == "random"  # not the shipped calibration set's models
    # the default variant is chosen on the K rows: the lowest nested leave-one-model-out error
    assert set(cal.extra["variant_rms"]) == set(C.AUTO_VARIANTS)
    assert cal.extra["variant"] == min(cal.extra["variant_rms"], key=cal.extra["variant_rms"].get)
    assert cal.correction.variant == cal.extra["variant"]
    assert cal.base_column == 1  # the source device whose ratio to the measurements varies least


def test_cost_variant_fits_the_rows_on_their_own_cost_without_the_source(source, tmp_path):
    """``cost``: log y = a + b log FLOPs + c log bytes on the K rows; the source's predictions are
    not read, the fit is not clipped (a model beyond the rows extrapolates along its cost), and the
    card round-trips."""
    src, ref = source
    rng = np.random.default_rng(3)
    graphs = [chain_graph(rng) for _ in range(12)]
    test_g = [chain_graph(rng) for _ in range(20)]
    cost = lambda gs: 3e-6 * np.exp(C.global_design(gs)[:, 0]) ** 0.9  # noqa: E731  (ms from FLOPs)
    y, models = cost(graphs), [f"m{i}" for i in range(12)]
    cal = C.calibrate(src, graphs, y, models, config=C.CalibrationConfig(method="loglinear", variant="cost"))
    ll = cal.correction
    assert ll.variant == "cost" and not ll.source and ll.clip is None and ll.columns == []
    assert ll.use_globals and set(ll.use_globals) <= set(C.COST_GLOBALS)
    assert cal.predict(test_g) == pytest.approx(cost(test_g), rel=0.1)  # the ridge (chosen by LOO) shrinks a little
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
    p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", "new_dev", "infer"), rows, C.CalibrationConfig(variant="cost"))
    back = load_predictor(p.save(tmp_path / "card"))
    assert back.predict_graphs(test_g)[:, 0] == pytest.approx(cal.predict(test_g), rel=1e-6)


def test_auto_is_the_cost_variant_across_device_kinds_only(source):
    """With the new device named: a GPU source calibrated to a registered CPU gets ``cost`` (chosen
    on the validation CPUs, docs/guide/calibrate.md); a GPU, an unregistered device or no device keep
    the choice among AUTO_VARIANTS."""
    src, _ = source
    graphs, y, models = _rows(src, 10)
    src.targets = [Target("latency_ms", "rtx3090/amp-nchw-pt240", "infer"), Target("latency_ms", "rtx4090", "infer")]
    cfg = C.CalibrationConfig(method="loglinear")
    cross = C.calibrate(src, graphs, y, models, config=cfg, device="i9_10940x/fp32-nchw-pt240-dynamo")
    assert cross.extra["variant"] == C.CROSS_KIND_VARIANT == "cost" and "another device kind" in cross.extra["variant_rule"]
    for device in ("rtx5090/amp-nchw-pt291", "my-npu", None):
        same = C.calibrate(src, graphs, y, models, config=cfg, device=device)
        assert same.extra["variant"] in C.AUTO_VARIANTS and "variant_rule" not in same.extra
    named = C.calibrate(src, graphs, y, models, config=C.CalibrationConfig(method="loglinear", variant="full"),
                        device="i9_10940x/fp32-nchw-pt240-dynamo")
    assert named.extra["variant"] == "full"  # a variant asked for by name is kept


def test_auto_weighs_the_blend_with_the_cost_fit_from_a_cpu_to_a_cpu(source, tmp_path):
    """A CPU source calibrated to a CPU: ``auto`` also weighs ``auto+cost``, the geometric mean of
    the correction it chose and the rows' own cost fit, and keeps it when its nested
    leave-one-model-out RMS (the parts' residuals averaged) is lower (validated on the timm CPUs,
    docs/guide/calibrate.md).  Asked for by name, the blend applies to any device; the card round-trips."""
    src, ref = source
    src.targets = [Target("latency_ms", "i9_10940x/fp32-nchw-pt240-dynamo", "infer"),
                   Target("latency_ms", "epyc/torch-t1", "infer")]
    cfg = C.CalibrationConfig(method="loglinear")
    cpu = "i7_12700h/fp32-nchw-pt240-dynamo"
    rng = np.random.default_rng(1)
    graphs = [chain_graph(rng) for _ in range(12)]
    models = [f"m{i}" for i in range(12)]
    scaled = 3.0 * src.predict_graphs(graphs)[:, 1] * np.exp(rng.normal(0, 0.02, 12))  # the source's device x 3
    by_cost = 3e-6 * np.exp(C.global_design(graphs)[:, 0]) ** 0.9 * np.exp(rng.normal(0, 0.05, 12))  # FLOPs-bound
    kept = {}
    for name, y in (("scaled", scaled), ("cost", by_cost)):
        cal = C.calibrate(src, graphs, y, models, config=cfg, device=cpu)
        assert "CPU source" in cal.extra["variant_rule"]
        b = cal.extra["blend_rms"]
        first = next(v for v in b if v not in ("auto+cost", "cost"))
        assert first in C.AUTO_VARIANTS
        assert (cal.extra["variant"] == "auto+cost") == (b["auto+cost"] < b[first])
        kept[name] = cal
    assert kept["scaled"].extra["variant"] in C.AUTO_VARIANTS  # the source alone explains these rows
    cal = kept["cost"]
    assert cal.extra["variant"] == C.BLEND_VARIANT == "auto+cost"
    first, second = cal.extra["blend_of"]
    assert second == "cost" and isinstance(cal.correction, C.BlendedCorrection)
    assert [p.variant for p in cal.correction.parts] == [first, "cost"]
    # the parts are the fits each variant makes on its own, the prediction their geometric mean
    alone = {v: C.calibrate(src, graphs, by_cost, models, config=C.CalibrationConfig(method="loglinear", variant=v))
             for v in (first, "cost")}
    test_g = _rows(src, 15, seed=4)[0]
    np.testing.assert_allclose(cal.predict(test_g), np.sqrt(alone[first].predict(test_g) * alone["cost"].predict(test_g)),
                               rtol=1e-6)
    auto = C.calibrate(src, graphs, by_cost, models, config=cfg)  # no device: auto's own choice, no blend
    assert auto.extra["variant"] == first and "blend_rms" not in auto.extra
    np.testing.assert_allclose(cal.residuals, (auto.residuals + alone["cost"].residuals) / 2)
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, by_cost)]
    p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", cpu, "infer"), rows, cfg)
    back = load_predictor(p.save(tmp_path / "card"))
    assert back.card["calibration"]["correction"]["variant"] == "auto+cost"
    out = [{"value": 1.0}]
    back.net.annotate(out, test_g[:1])
    assert out[0]["basis"] == "calibrated from src by loglinear (auto+cost) on 12 rows"
    np.testing.assert_allclose(back.predict_graphs(test_g)[:, 0], cal.predict(test_g), rtol=1e-6)
    # a GPU source to a GPU never weighs it; by name the blend applies to a device of unknown kind
    src.targets = [Target("latency_ms", "rtx3090/amp-nchw-pt240", "infer"), Target("latency_ms", "rtx4090", "infer")]
    gpu = C.calibrate(src, graphs, by_cost, models, config=cfg, device="rtx5090/amp-nchw-pt291")
    assert gpu.extra["variant"] in C.AUTO_VARIANTS and "blend_rms" not in gpu.extra
    named = C.calibrate(src, graphs, scaled, models, config=C.CalibrationConfig(method="loglinear", variant="auto+cost"),
                        device="my-npu")
    assert named.extra["variant"] == "auto+cost" and "variant_rule" not in named.extra


@pytest.mark.parametrize("method", ["head", "full", "meta"])
def test_fine_tuning_methods_run_and_give_an_interval(source, method):
    src, _ = source
    graphs, y, models = _rows(src, 6)
    meta = None
    if method == "meta":
        emb = C.embed(src.net, graphs)
        meta = C.meta_init(C._parts(src.net)[1][0], [(emb, np.log(y))], k=4, iterations=5, inner_steps=2)
    cal = C.calibrate(src, graphs, y, models, config=C.CalibrationConfig(method=method, **FAST), meta_head=meta)
    assert cal.predict(graphs).shape == (6,)
    iv = C.interval_halfwidth(cal.residuals, np.arange(6), 0.9, "conformal")
    assert iv["basis"] == "student-t"  # 6 models: no conformal rank at 90 %
    assert len(cal.residuals) == 6 and np.isfinite(cal.residuals).all()


def test_bad_calibration_input_is_named(source):
    src, _ = source
    graphs, y, models = _rows(src, 4)
    with pytest.raises(PerfseerError, match="at least 3 distinct measured models"):
        C.calibrate(src, graphs, y, ["a", "a", "b", "b"])
    with pytest.raises(PerfseerError, match="<= 0"):
        C.calibrate(src, graphs, np.r_[y[:3], 0.0], models)
    with pytest.raises(PerfseerError, match="predicts no memory_mb"):
        C.calibrate(src, graphs, y, models, metric="memory_mb")
    with pytest.raises(PerfseerError, match="meta-learned head"):
        C.calibrate(src, graphs, y, models, config=C.CalibrationConfig(method="meta"))
    with pytest.raises(PerfseerError, match="unknown calibration method"):
        C.CalibrationConfig(method="magic")


def test_interval_widens_with_few_rows():
    rng = np.random.default_rng(0)
    r = rng.normal(0, 0.1, 200)
    small = C.interval_halfwidth(r[:5], np.arange(5), 0.9, "conformal")
    large = C.interval_halfwidth(r[:99], np.arange(99), 0.9, "conformal")
    assert small["basis"] == "student-t" and large["basis"] == "conformal"
    assert large["conformal"] == np.sort(np.abs(r[:99]))[89]  # ceil(100 * 0.9) = 90th smallest
    assert small["log_halfwidth"] / np.sqrt(np.mean(r[:5] ** 2)) > 2.0  # t_{4, 0.95} sqrt(1.2) = 2.34


def test_spanning_set_takes_the_extremes():
    X = np.log(np.array([[1e6, 1], [1e7, 1], [1e8, 1], [1e9, 1], [1e10, 1]], dtype=float))
    picked = C.spanning_set(X, 3)
    assert set(picked) == {2, 0, 4} and C.spanning_set(X, 10) == C.spanning_set(X, 5)


def test_calibrated_card_round_trip_with_interval_and_domain(source, tmp_path):
    src, ref = source
    graphs, y, models = _rows(src, 10)
    for method, variant in (("loglinear", "full"), ("loglinear", "emb"), ("head", "full")):
        cfg = C.CalibrationConfig(method=method, variant=variant, **FAST)
        cal = C.calibrate(src, graphs, y, models, config=cfg)
        rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
        p = C.calibrated_predictor(src, ref, cal, Target("latency_ms", "gpu_new", "infer"), rows, cfg)
        path = p.save(tmp_path / f"{method}-{variant}")
        card = json.loads(path.read_text())
        assert card["calibration"]["source"]["name"] == "src" and len(card["calibration"]["rows"]) == 10
        assert card["calibration"]["interval"]["rule"] == C.DEFAULT_INTERVAL
        assert card["calibration"]["config"]["variant"] == variant
        if method == "loglinear":
            assert card["calibration"]["correction"]["embedding"] == (variant == "emb")
            assert card["calibration"]["correction"]["clip"][0] < card["calibration"]["correction"]["clip"][1]
        assert card["calibration"]["source"]["card_sha256"] and card["devices"] == ["gpu_new"]
        loaded = load_predictor(path)
        np.testing.assert_allclose(loaded.predict_graphs(graphs)[:, 0], cal.predict(graphs), rtol=1e-5)
        far = chain_graph(np.random.default_rng(5), batch=64)
        far.u[0, 3] *= 1e6  # FLOPs far above every calibration row
        out = [{"value": 1.0}, {"value": 2.0}]
        loaded.net.annotate(out, [graphs[0], far])
        assert out[0]["in_domain"] and not out[1]["in_domain"]
        assert "flops_total" in out[1]["domain_reasons"][0] and "outside-calibration-domain" in out[1]["flags"]
        lo, hi = out[1]["interval"]
        assert lo < 2.0 < hi and out[1]["interval_level"] == 0.9
        # the default interval grows with the distance from the calibration models in the source's
        # embedding: a calibration model gets the narrowest, c(K) s_w; the far graph a wider one
        dist = card["calibration"]["interval"]["distance"]
        assert card["calibration"]["interval"]["basis"].startswith("distance") and len(dist["coords"]) == 10
        assert out[0]["interval"][1] == pytest.approx(np.exp(dist["scale"] * dist["rms_weighted"]), rel=1e-3)
        assert out[1]["interval"][1] / 2.0 > out[0]["interval"][1]
        assert ("far-from-calibration-set" in out[1]["flags"]) == any("farther from the calibration models" in r
                                                                      for r in out[1]["domain_reasons"])


def test_a_blend_source_lends_its_seernet_embeddings(tmp_path):
    """A blend with a SeerNet member (the bundled RTX 3090 card) calibrates like a SeerNet: the
    ``emb`` variant is a candidate and the interval grows with the distance in its embedding."""
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    model = build_model("blend", members="seernet+pmgns", hidden_dim=8, num_targets=1)
    ts = TargetScaler(["latency_ms"])
    ts.mean_, ts.std_ = np.zeros(1), np.ones(1)
    net = NeuralPredictor(model, FeatureScaler().fit([chain_graph(rng) for _ in range(30)]), ts)
    Predictor.from_training("bl", "blend", net, [Target("latency_ms", "gpu_a", "infer")], ["Conv", "Relu"], {},
                            {}).save(tmp_path)
    src = load_predictor(tmp_path / "bl.json")
    graphs = [chain_graph(rng) for _ in range(12)]
    y = 3.0 * src.predict_graphs(graphs)[:, 0] * np.exp(rng.normal(0, 0.02, 12))
    models = [f"m{i}" for i in range(12)]
    assert set(C.calibrate(src, graphs, y, models).extra["variant_rms"]) == set(C.AUTO_VARIANTS)
    cfg = C.CalibrationConfig(variant="emb")
    cal = C.calibrate(src, graphs, y, models, config=cfg)
    assert cal.correction.embedding and cal.interval["basis"].startswith("distance")
    rows = [{"model": m, "input_shape": "3x32x32", "batch_size": 1, "latency_ms": float(v)} for m, v in zip(models, y)]
    path = C.calibrated_predictor(src, str(tmp_path / "bl.json"), cal, Target("latency_ms", "gpu_new", "infer"),
                                  rows, cfg).save(tmp_path / "cal")
    loaded = load_predictor(path)
    np.testing.assert_allclose(loaded.predict_graphs(graphs)[:, 0], cal.predict(graphs), rtol=1e-5)
    values, emb = loaded.predict_with_embeddings(graphs)
    np.testing.assert_allclose(emb, C.embed(src.net, graphs).double().numpy(), rtol=1e-5, atol=1e-7)
    assert np.mean(np.abs(values[:, 0] / y - 1)) < 0.1


def test_cli_errors(tmp_path):
    from perfseer.cli.main import main

    table = tmp_path / "few.csv"
    table.write_text("model,input_shape,batch_size,phase,device,latency_ms\n"
                     "example:resnet18,3x224x224,1,train,g,1.0\nexample:resnet50,3x224x224,1,train,g,2.0\n"
                     "example:mobilenet_v3_small,3x224x224,1,train,g,1.0\nexample:resnet18,3x224x224,1,infer,h,1.0\n")
    args = ["calibrate", "--predictor", "rtx3090-amp-nchw-pt240.infer", "--measurements", str(table), "--out", str(tmp_path)]
    assert main(args) == 2  # two devices
    assert main(args + ["--device", "g"]) == 2  # train rows for an inference predictor
    assert main(args + ["--device", "h"]) == 2  # one model
    from perfseer.cli.calibrate import _rows, graphs_of
    from perfseer.data.table import read_table

    empty = tmp_path / "empty.csv"  # a metric measured nowhere: say which ones were
    empty.write_text("model,input_shape,batch_size,phase,device,latency_ms,memory_mb\n"
                     "example:resnet18,3x224x224,1,infer,g,,12.0\nexample:resnet50,3x224x224,1,infer,g,,30.0\n")
    assert main(args[:4] + [str(empty)] + args[5:]) == 2
    with pytest.raises(PerfseerError, match="no row of the measurements has a value of latency_ms") as info:
        _rows(read_table(empty), None, None, "latency_ms")
    assert "--metric, one of memory_mb" in str(info.value)
    bad = tmp_path / "bad.csv"
    bad.write_text("model,input_shape,batch_size,phase,device,latency_ms\n"
                   "example:resnet18,3x224x224,1,infer,g,1.0\nexample:nonesuch,3x224x224,1,infer,g,2.0\n"
                   "example:resnet50,3x224x224,1,infer,g,1.0\n")
    with pytest.raises(PerfseerError, match="example:nonesuch"):
        graphs_of(read_table(bad))


def test_cli_warns_across_device_kinds(tmp_path, capsys):
    """A GPU predictor calibrated to a registered CPU: the card is written, with a warning on stderr."""
    from perfseer.cli.main import main

    table = tmp_path / "cpu.csv"
    dev = "i9_10940x/fp32-nchw-pt240-dynamo"
    table.write_text("model,input_shape,batch_size,phase,device,latency_ms\n" + "".join(
        f"example:{m},3x224x224,{b},infer,{dev},{ms}\n"
        for m, b, ms in (("resnet18", 1, 9.0), ("resnet50", 1, 21.0), ("mobilenet_v3_small", 1, 3.0),
                         ("vit_b_16", 1, 48.0), ("resnet18", 8, 60.0))))
    assert main(["calibrate", "--predictor", "rtx3090-amp-nchw-pt240.infer", "--measurements", str(table),
                 "--out", str(tmp_path / "card")]) == 0
    out, err = capsys.readouterr()
    assert "warning: calibrated across device kinds" in err and "GPU" in err and "CPU" in err
    assert "variant cost (cost: the source predictor is of another device kind)" in out
    assert "only 4 calibration models: below 5" in err  # the smallest K; the card is still written
    card = json.loads(next((tmp_path / "card").glob("*.json")).read_text())
    assert card["calibration"]["warnings"] and card["calibration"]["extra"]["variant"] == "cost"


def test_device_kind_reads_the_collection_kits_setting_of_an_unregistered_device():
    """A device the registry does not know still has a kind when the collection kit named it:
    ``HW/torch-tN`` or ``HW/ort-tN`` is a CPU backend, ``HW/torch-cuda...`` a GPU."""
    assert C.device_kind("xeon_platinum_8370c/torch-t4") == "cpu" and C.device_kind("newbox/ort-t2") == "cpu"
    assert C.device_kind("mygpu/torch-cuda") == "gpu" and C.device_kind("mygpu/torch-cuda-adamw") == "gpu"
    assert C.device_kind("my-npu") is None and C.device_kind("box/torch-tx") is None
    assert C.device_kind("rtx4090") == "gpu"  # the registry first


def test_domain_reason_when_every_calibration_row_shares_a_value():
    """Calibrated at batch 1 only, a batch-16 model is outside the domain, said without a
    "1-1 (+25 % of the log range)" that a zero-width range makes meaningless."""
    rng = np.random.default_rng(3)
    graphs = [chain_graph(rng, batch=1) for _ in range(6)]
    domain = C.domain_of(C.global_design(graphs, ()))
    reasons = C.domain_check(domain, [chain_graph(rng, batch=16), graphs[0]])
    assert "batch_size 16 is above 1, every calibration row's" in reasons[0] and reasons[1] == []
