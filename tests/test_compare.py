"""perfseer.compare / perfseer compare: GPUs ranked by step time, with throughput, basis and
whether the step fits in memory."""

from __future__ import annotations

import json

import pytest

import perfseer
from perfseer import comparison
from perfseer.cli.main import main
from perfseer.devices import get_device
from perfseer.errors import PerfseerError

GPUS = ["a10g", "h100-80gb", "t4"]


@pytest.fixture(autouse=True)
def _no_user_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFSEER_DEVICES", str(tmp_path / "user-devices"))


def test_ranks_by_step_time_with_throughput_and_basis():
    rows = perfseer.compare("example:resnet18", batch=4, devices=GPUS, precision="fp32", memory=False)
    assert [r["device"] for r in rows] and {r["device"] for r in rows} == {"a10g", "h100-sxm", "t4"}
    values = [r["value"] for r in rows]
    assert values == sorted(values) and all(v > 0 for v in values)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["throughput_per_s"] == pytest.approx(4 / r["value"] * 1000)
        assert r["basis"] and r["precision"] == "fp32" and r["fits"] is None
    assert rows[0]["device"] == "h100-sxm" and rows[-1]["device"] == "t4"  # 67 vs 8 FP32 TFLOP/s


def test_says_where_memory_does_not_fit(monkeypatch):
    monkeypatch.setattr(comparison, "_memory", lambda *a, **k: (20 * 2**30, "simulated"))
    rows = perfseer.compare("example:resnet18", batch=4, devices=GPUS, precision="fp32")
    by = {r["device"]: r for r in rows}
    assert by["t4"]["fits"] is False and "does not fit" in by["t4"]["memory_note"] and "16 GiB" in by["t4"]["memory_note"]
    assert by["a10g"]["fits"] is True and by["h100-sxm"]["fits"] is True
    assert rows[-1]["device"] == "t4"  # ranked after the GPUs it fits in
    assert by["a10g"]["memory_gib"] == pytest.approx(20.0)


def test_memory_is_simulated_for_an_onnx_model():
    rows = perfseer.compare("example:resnet18", batch=2, devices=["t4"], precision="fp32")
    assert rows[0]["fits"] is True and 0 < rows[0]["memory_gib"] < 16


@pytest.mark.parametrize("kw,match", [
    ({"batch": 0}, "batch must be"), ({"devices": ["i9-10940x"]}, "ranks GPUs"), ({"devices": []}, "no device"),
    ({"phase": "serve"}, "phase must be"),
])
def test_bad_requests_are_refused(kw, match):
    args = {"batch": 1, "devices": GPUS, "memory": False, **kw}
    with pytest.raises(PerfseerError, match=match):
        perfseer.compare("example:resnet18", **args)


def test_cli_json_and_table(capsys, tmp_path):
    assert main(["compare", "example:resnet18", "--batch", "2", "--device", "a10g", "--device", "t4",
                 "--precision", "fp32", "--no-memory", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in rows] == [1, 2] and rows[0]["device"] == "a10g"
    png = tmp_path / "rank.png"
    assert main(["compare", "example:resnet18", "--device", "a10g", "--device", "t4", "--precision", "fp32",
                 "--no-memory", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "a10g" in out and "samples/s" in out and png.stat().st_size > 1000


def test_energy_ranks_by_energy_per_sample():
    rows = perfseer.compare("example:resnet18", batch=8, devices=["a10g", "t4", "h100-sxm"], precision="fp32",
                            memory=False, energy=True, rank_by="energy")
    per_sample = [r["energy_j_per_sample"] for r in rows]
    assert all(v is not None and v > 0 for v in per_sample) and per_sample == sorted(per_sample)
    for r in rows:  # J = W x s, per sample = per step / batch, power within the board's limit
        assert r["energy_j"] == pytest.approx(r["power_w"] * r["value"] / 1000, rel=1e-3)
        assert r["energy_j_per_sample"] == pytest.approx(r["energy_j"] / 8, rel=1e-3)
        assert 0 < r["power_w"] <= get_device(r["device"]).tdp_w
    with pytest.raises(PerfseerError, match="needs the energy"):
        perfseer.compare("example:resnet18", devices=["t4"], memory=False, rank_by="energy")


def test_cli_energy_columns(capsys):
    assert main(["compare", "example:resnet18", "--batch", "4", "--device", "a10g", "--device", "t4",
                 "--precision", "fp32", "--no-memory", "--energy", "--rank-by", "energy"]) == 0
    out = capsys.readouterr().out
    assert "J/sample" in out and "most efficient first" in out


def test_basis_labels_are_short_and_generic():
    from perfseer.comparison import describe_basis

    any_gpu = {"value": 1.0, "basis_kind": "anygpu", "basis_seen": True,
               "basis": "spec model by the route facts: any-GPU operator model (spec-anygpu: 19 constants shared by 18 "
                        "GPUs; h200 from its spec sheet, fp16, measured in its data; chosen for cnn/train/amp on "
                        "leave-one-GPU-out: anygpu 21.0 %)"}
    label, note, seen = describe_basis(any_gpu, "h200")
    assert (label, seen) == ("any-GPU model", True)
    assert "h200" not in note and "each GPU from its spec sheet" in note and "measured in its data" not in note
    other = dict(any_gpu, basis_seen=False,
                 basis=any_gpu["basis"].replace("h200", "l4").replace("measured in its data", "no measurement of it"))
    label2, note2, seen2 = describe_basis(other, "l4")
    assert (label2, note2, seen2) == (label, note, False)  # one footnote serves both rows
    t = describe_basis({"value": 1.0, "basis_kind": "transfer", "basis_seen": False,
                        "basis": "transfer from rtx3090 + rtx4090 via specs (spec-transfer: their measured-device "
                                 "SeerNets, AMP NCHW eager, carried to l4 by its spec sheet, geometric mean; no "
                                 "measurement of l4)"}, "l4")
    assert t[0] == "spec transfer" and t[2] is False and "l4" not in t[1]
    assert describe_basis({"value": None, "reason": "too big"}, "l4") == ("refused", "too big", None)


def test_every_answered_row_names_its_basis_kind():
    """The label and the seen column come from the row's structured ``basis_kind`` / ``basis_seen``,
    set by the basis that answered: measured card, anchored card, spec transfer, any-GPU model,
    kernel networks."""
    import perfseer
    from perfseer.comparison import BASIS_LABELS

    got = {}
    for device, phase, batch, basis in (("rtx3090", "train", 256, "measured"), ("rtx3090", "train", 16, "auto"),
                                        ("l4", "infer", 32, "auto"), ("l4", "infer", 32, "transfer"),
                                        ("t4", "infer", 32, "spec"), ("rtx4090", "infer", 64, "auto")):
        rows = perfseer.predict("timm:resnet18", device=device, batch=batch, phase=phase, basis=basis)
        for r in rows:
            assert r.get("value") is not None, r.get("reason")
            assert r["basis_kind"] in BASIS_LABELS and isinstance(r["basis_seen"], bool), r["basis"]
            got[(device, phase, batch, basis)] = (r["basis_kind"], r["basis_seen"])
    assert got[("rtx3090", "train", 256, "measured")] == ("measured", True)
    assert got[("rtx3090", "train", 16, "auto")] == ("anchored", True)
    assert got[("l4", "infer", 32, "transfer")] == ("transfer", False)
    assert got[("rtx4090", "infer", 64, "auto")][1] is True
    assert got[("l4", "infer", 32, "auto")][1] is False


def test_at_batch_rebinds_once_and_matches_with_batch():
    import numpy as np

    import perfseer

    pg = perfseer.extract("example:resnet18")
    a = pg.at_batch(8)
    assert a is pg.at_batch(8) and pg.at_batch(pg.batch_size) is pg  # kept, not re-bound again
    fresh = pg.with_batch(8)
    assert fresh is not a and np.array_equal(fresh.x, a.x) and np.array_equal(fresh.u, a.u)
    for b in range(2, 40):
        pg.at_batch(b)
    assert len(pg._rebound) <= 16 and pg.at_batch(39).batch_size == 39


def test_warm_process_answers_a_comparison_as_this_process_does():
    """``perfseer compare`` hands its question to the warm process (op ``compare``): the same rows."""
    import inspect
    import os

    from perfseer.cli import warm

    assert set(warm.COMPARE_KEYS) <= set(inspect.signature(perfseer.compare).parameters)
    kwargs = {"model": "example:resnet18", "batch": 2, "devices": GPUS, "precision": "fp32", "memory": False}
    reply = warm._answer({"op": "compare", "protocol": warm.PROTOCOL, "cwd": os.getcwd(), "kwargs": kwargs})
    assert reply["ok"], reply
    here = perfseer.compare("example:resnet18", batch=2, devices=GPUS, precision="fp32", memory=False)
    assert json.loads(json.dumps(reply["rows"], default=warm._plain)) == json.loads(json.dumps(here, default=warm._plain))
    bad = warm._answer({"op": "compare", "protocol": warm.PROTOCOL, "cwd": os.getcwd(),
                        "kwargs": dict(kwargs, batch=0)})
    assert not bad["ok"] and "batch must be" in bad["refused"]["problem"]
    odd = warm._answer({"op": "compare", "protocol": warm.PROTOCOL, "cwd": os.getcwd(),
                        "kwargs": dict(kwargs, device="t4")})  # predict's name, not compare's
    assert not odd["ok"] and "unknown arguments" in odd["failed"]


def test_a_simulated_step_is_kept_for_the_next_comparison(monkeypatch, tmp_path):
    import types

    import perfseer.memory.api as mapi

    calls = []

    def fake(model, **kw):
        calls.append((model, kw["batch"]))
        return types.SimpleNamespace(total=3 * 2**30, basis="simulated")

    monkeypatch.setattr(mapi, "memory", fake)
    monkeypatch.setattr(comparison, "_MEMORY_KEPT", comparison.OrderedDict())
    args = ("train", "amp-fp16", "adamw", None)
    assert comparison._memory("timm:resnet50", 8, *args) == (3 * 2**30, "simulated")
    assert comparison._memory("timm:resnet50", 8, *args) == (3 * 2**30, "simulated")
    assert comparison._memory("timm:resnet50", 16, *args)[0] == 3 * 2**30
    assert calls == [("timm:resnet50", 8), ("timm:resnet50", 16)]
    f = tmp_path / "m.onnx"  # a file: kept with its size and time, so a changed file is simulated again
    f.write_bytes(b"x")
    comparison._memory(str(f), 1, *args)
    os_stat = f.stat()
    f.write_bytes(b"xy")
    import os

    os.utime(f, ns=(os_stat.st_atime_ns, os_stat.st_mtime_ns + 10**9))
    comparison._memory(str(f), 1, *args)
    assert calls[-2:] == [(str(f), 1), (str(f), 1)]


def test_any_gpu_rows_are_the_same_from_the_per_graph_caches():
    """A comparison composes each graph once for every GPU (kernel table, autocast and fused
    attention, route cell, columns): a warm answer is the cold one."""
    from perfseer.runtime.spec import load_spec_model

    sm = load_spec_model()
    pg = perfseer.extract("example:resnet18", batch=4)
    kw = {"batch": [2, 4], "phase": "train", "precision": "fp16", "cell_precision": "amp"}
    sm.clear_cache()
    cold = sm.predict(pg, device="h100-sxm", **kw)
    assert [r["basis_kind"] for r in cold] == ["anygpu", "anygpu"]
    sm.predict(pg, device="l4", **kw)
    assert sm.predict(pg, device="h100-sxm", **kw) == cold
    assert len(sm._prepared) == 2 and len(sm._cells) == 2  # one per batch size, shared by the GPUs


def test_trust_reasons_ask_for_kernel_times_only_where_a_kernel_is_approximate():
    import numpy as np
    import pandas as pd

    from perfseer.features import schema
    from perfseer.specmodel.trust import op_reasons

    x = np.zeros((2, len(schema.NODE_FEATURES)))
    table = pd.DataFrame({"family": ["gemm", "vec"], "node": [0, 1], "op": ["MatMul", "Relu"]})

    def needed():
        raise AssertionError("kernel times asked although no kernel is approximate")

    assert op_reasons(table, needed, x, ["MatMul", "Relu"], {}) == []
    slow = op_reasons(table, lambda: np.array([1.0, 9.0]), x, ["MatMul", "MaxPool"], {})
    assert slow and "90 % of the predicted step" in slow[0] and "MaxPool" in slow[0]


def test_kernel_times_predicted_for_every_expected_gpu_at_once_are_each_gpus_own():
    import numpy as np

    from perfseer.runtime.spec import load_spec_model

    sm = load_spec_model()
    pg = perfseer.extract("example:resnet18", batch=4)
    specs = [get_device(n) for n in ("h100-sxm", "l4", "t4", "a10g")]
    args = (pg.x, pg.op_types, "train", "fp16", float(pg.params), "adamw", pg.edge_index, pg.dropout_elements)
    sm.clear_cache()
    table, gkey = sm._table(*args)
    alone = [sm._kernel_us(table, gkey, s, "fp16").copy() for s in specs]
    sm.clear_cache()
    table, gkey = sm._table(*args)
    with sm.expecting(specs + [get_device("i9-10940x")]):  # a CPU among them is left out
        first = sm._kernel_us(table, gkey, specs[1], "fp16")
        assert len(sm._us) == len(specs)  # one pass filled every GPU's entry
    np.testing.assert_allclose(first, alone[1], rtol=1e-5)
    for s, a in zip(specs, alone):
        np.testing.assert_allclose(sm._kernel_us(table, gkey, s, "fp16"), a, rtol=1e-5)
    assert getattr(sm._ahead, "specs", ()) == ()
