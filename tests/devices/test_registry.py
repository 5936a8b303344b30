"""The device registry: lookup by name and alias, MIG slices, user spec files, errors."""

from __future__ import annotations

import json

import pytest

from perfseer.devices import DeviceSpecError, UnknownDeviceError, add_device_file, get_device, list_devices, registry
from perfseer.devices.spec import parse_device


@pytest.fixture(autouse=True)
def _no_user_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_DEVICES", str(tmp_path / "user-devices"))


@pytest.mark.parametrize("alias,name", [
    ("h100-sxm", "h100-sxm"), ("H100 SXM", "h100-sxm"), ("h100_sxm5", "h100-sxm"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("rtx3090/amp-nchw-pt240", "rtx3090"), ("titan_rtx", "titan-rtx"),
    ("i9_10940x/fp32-nchw-pt240-dynamo", "i9-10940x"), ("1080ti", "gtx1080ti"), ("2080ti", "rtx2080ti"),
    ("titanx", "titan-x-pascal"), ("titanxp", "titan-xp"), ("rtxpro6000maxq/amp-nchw-pt291", "rtx-pro-6000-maxq"),
    ("4090", "rtx4090"), ("NVIDIA GeForce RTX 4090", "rtx4090"), ("Tesla T4", "t4"), ("epyc/torch-t1", "epyc-vm"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb-pcie"), ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"), ("L4", "l4"),
])
def test_aliases(alias, name):
    assert get_device(alias).name == name


def test_every_measured_device_string_resolves():
    """Every device of the repository's measurement tables maps onto the registry (the mobile and
    accelerator boards of HELP excepted)."""
    for d in ("rtx3090/amp-nchw-pt112", "rtx4090/amp-nchw-pt291-dynamo", "rtx5090/amp-nchw-pt291",
              "rtxpro6000maxq/bf16-nchw-pt291-dynamo", "i7_12700h/fp32-nchw-pt240-dynamo", "gold_6226", "gold_6240",
              "silver_4114", "silver_4210r"):
        assert get_device(d).kind in ("gpu", "cpu")


def test_specs_are_sane():
    for s in list_devices():
        assert s.source and s.peak_tflops["fp32"] > 0 and s.sms >= 1
        if s.kind == "gpu":
            assert s.mem_bandwidth_gbs > 0 and s.memory_gib > 0
            # peak FP32 = 2 x lanes x clock: checked within 2 % in test_registry_gpus.py
    names = {s.name for s in list_devices()}
    for must in ("a100-40gb-sxm", "a100-40gb-pcie", "a100-80gb-sxm", "a100-80gb-pcie", "h100-pcie", "h100-sxm",
                 "h100-nvl", "h200", "l4", "l40s", "t4", "v100-sxm2-32gb", "rtx3090", "rtx4090", "rtx5090",
                 "rtx-pro-6000", "i9-10940x", "i7-12700h", "epyc-vm", "tesla-p4", "tesla-p100-pcie-16gb", "mi100"):
        assert must in names


@pytest.mark.parametrize("gpu,profiles", [
    ("a100-40gb-sxm", ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
    ("a100-80gb-sxm", ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("h100-sxm", ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
    ("h100-nvl", ["1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb"]),
    ("h200", ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
])
def test_mig_profiles(gpu, profiles):
    spec = get_device(gpu)
    assert [p.name for p in spec.mig_profiles] == profiles
    assert get_device("l4").mig_profiles == ()


def test_mig_slice_is_a_derived_device():
    full = get_device("a100-80gb-sxm")
    s = get_device("A100-80GB-SXM:1g.10gb")
    assert s.name == "a100-80gb-sxm:1g.10gb" and s.parent == "a100-80gb-sxm"
    assert s.memory_gib == 10 and s.sms == 14  # A100: 14 SMs per compute slice
    assert s.mem_bandwidth_gbs == pytest.approx(full.mem_bandwidth_gbs / 8)
    assert s.peak("bf16") == pytest.approx(full.peak("bf16") * 14 / 108)
    p = {m.name: m for m in full.mig_profiles}["1g.20gb"]
    assert (p.compute_fraction, p.memory_fraction, p.memory_gib) == (pytest.approx(1 / 7), 0.25, 20.0)
    whole = get_device("a100-80gb-sxm:7g.80gb")
    assert whole.sms == 98 and whole.memory_gib == 80
    h = get_device("h200:3g.71gb")
    assert h.memory_gib == pytest.approx(141 / 2) and h.sms == round(132 * 3 / 7)
    with pytest.raises(DeviceSpecError, match="no MIG profile '2g.5gb'.*1g.10gb"):
        get_device("a100-80gb-sxm:2g.5gb")


def test_unknown_device_lists_close_matches_and_how_to_add():
    with pytest.raises(UnknownDeviceError) as e:
        get_device("rtx 9090")
    msg = str(e.value)
    assert "unknown device 'rtx 9090'" in msg and "rtx5090" in msg and "rtx4090" in msg
    assert "perfseer devices --add FILE" in msg and "docs/concepts/spec-model.md" in msg
    with pytest.raises(UnknownDeviceError):
        get_device("")


def test_peak_falls_back_to_fp32():
    t4 = get_device("t4")
    assert t4.peak("bf16") == t4.peak("fp32") and t4.peak("fp16") == 65.0
    with pytest.raises(DeviceSpecError, match="unknown precision 'fp64'"):
        t4.peak("fp64")


def _spec(**kw):
    d = {"name": "my-gpu", "kind": "gpu", "memory_gib": 12, "mem_bandwidth_gbs": 500, "sms": 40,
         "peak_tflops": {"fp32": 20, "fp16": 80}, "source": "my datasheet", "aliases": ["My GPU X"]}
    d.update(kw)
    return d


def test_user_spec_file(tmp_path):
    f = tmp_path / "mine.json"
    f.write_text(json.dumps(_spec()))
    added = add_device_file(f)
    assert [s.name for s in added] == ["my-gpu"]
    assert get_device("my gpu x").mem_bandwidth_gbs == 500.0
    assert get_device("my-gpu").origin.endswith("mine.json")
    assert "my-gpu" in {s.name for s in registry().devices.values()}


@pytest.mark.parametrize("change,words", [
    ({"kind": "tpu"}, ["'kind'", "tpu"]),
    ({"source": ""}, ["'source'"]),
    ({"peak_tflops": {"fp16": 3}}, ["peak_tflops", "fp32"]),
    ({"sms": -4}, ["'sms'", "-4"]),
    ({"mem_bandwidth_gbs": None}, ["mem_bandwidth_gbs", "missing"]),
    ({"name": "My GPU"}, ["'name'"]),
    ({"clock": 1500}, ["unknown field", "clock"]),
    ({"mig": {"profiles": ["1x.5gb"]}}, ["MIG profile", "1x.5gb"]),
])
def test_bad_spec_file_is_refused(tmp_path, change, words):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(_spec(**change)))
    with pytest.raises(DeviceSpecError) as e:
        add_device_file(f)
    for w in words:
        assert w in str(e.value)
    assert "fix:" in str(e.value)
    assert not list((tmp_path / "user-devices").glob("*.json")) if (tmp_path / "user-devices").exists() else True


def test_not_json(tmp_path):
    f = tmp_path / "x.json"
    f.write_text("{nope")
    with pytest.raises(DeviceSpecError, match="not readable JSON"):
        add_device_file(f)
    with pytest.raises(DeviceSpecError, match="does not exist"):
        add_device_file(tmp_path / "missing.json")


def test_parse_device_mig_requires_memory():
    with pytest.raises(DeviceSpecError, match="'mig' needs"):
        parse_device(_spec(memory_gib=None, mig={"profiles": ["1g.5gb"]}), "test")
