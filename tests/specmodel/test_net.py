"""The kernel MLPs: fit on a synthetic roofline world, save/load round trip, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.net import KernelModel, KernelModelConfig, SpecModelError


def _world(n=400, seed=0):
    """GEMMs on two GPUs whose true time is 1.6x the roofline bound plus 5 µs of launch."""
    rng = np.random.default_rng(seed)
    t = kt.gemm_rows(rng.integers(1, 8, n), rng.integers(16, 2048, n), rng.integers(16, 2048, n), rng.integers(16, 2048, n))
    specs = [get_device("v100-pcie-32gb"), get_device("t4")] * (n // 2)
    dev = kt.device_frame(specs, ["fp32"] * n, t["family"])
    tf, tm = kt.roofline_us(t, dev)
    return t, dev, 1.6 * np.maximum(tf, tm) + 5.0


def test_fit_predict_save_load(tmp_path):
    t, dev, y = _world()
    m = KernelModel(KernelModelConfig(hidden=16, layers=2, epochs=25, time_limit_s=10, batch_size=64)).fit(t, dev, y)
    p = m.predict(t, dev)
    assert np.mean(np.abs(p / y - 1)) < 0.25  # learned well beyond the roofline's 1/1.6 - 1 = 37 % error
    card = m.save(tmp_path, "tiny", extra={"training": {"rows": len(t)}})
    assert json.loads(card.read_text())["training"]["rows"] == len(t)
    m2, c = KernelModel.load(card)
    np.testing.assert_allclose(m2.predict(t, dev), p, rtol=1e-5)
    assert c["families"] == ["gemm"]


def test_errors(tmp_path):
    t, dev, _ = _world(20)
    with pytest.raises(SpecModelError, match="not fitted"):
        KernelModel().predict(t, dev)
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(SpecModelError, match="not a spec-model card"):
        KernelModel.load(bad)
    bad.write_text('{"format": "perfseer.specmodel", "format_version": 1, "config": {}, "families": ["gemm"]}')
    with pytest.raises(SpecModelError, match="weights .* are missing"):
        KernelModel.load(bad)


def test_beyond_the_training_devices_the_ratio_to_roofline_shrinks(tmp_path):
    """A device beyond the training range (H100: peak and bandwidth) is answered between the MLP
    and the physics estimate (roofline bound + launch floor) when ``ood_weight`` < 1; devices
    inside the range are untouched; range and floor survive save/load."""
    t, dev, y = _world()
    m = KernelModel(KernelModelConfig(hidden=16, layers=2, epochs=5, time_limit_s=10, batch_size=64)).fit(t, dev, y)
    assert m.device_range_["gemm"]["sms"] == [40.0, 80.0]
    far = kt.device_frame([get_device("h100-sxm")] * len(t), ["fp32"] * len(t), t["family"])
    assert m.beyond_range("gemm", far).all() and not m.beyond_range("gemm", dev).any()
    tf, tm = kt.roofline_us(t, far)
    roof = np.maximum(tf, tm)
    full = m.predict(t, far)
    m.config.ood_weight = 0.5
    floor = m.floor_us_["gemm"]
    assert 5.0 < floor < np.quantile(y, 0.05)  # the world's launch time is 5 µs
    np.testing.assert_allclose(m.predict(t, far), np.sqrt(full * (roof + floor)), rtol=1e-4)  # geometric mean
    np.testing.assert_allclose(m.predict(t, dev), KernelModel.load(m.save(tmp_path, "r"))[0].predict(t, dev), rtol=1e-5)
    m2, card = KernelModel.load(tmp_path / "r.json")
    assert card["device_range"]["gemm"]["bw_gbs"] == [320.0, 900.0]
    np.testing.assert_allclose(m2.predict(t, far), m.predict(t, far), rtol=1e-5)
