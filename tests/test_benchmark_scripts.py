"""The accuracy benchmarks run end to end on a tiny synthetic dataset (seconds, not the real data)."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fit"))

import _training_bench as tb  # noqa: E402
import ablations  # noqa: E402
import compare_methods  # noqa: E402
from train_helpers import GLOBAL, chain_graph  # noqa: E402

DEVICES = ("gpu_a", "gpu_b")


@pytest.fixture
def tiny(monkeypatch):
    """40 architectures at batch 1 and 8 on two devices; latency ~ FLOPs (device b twice as slow)."""
    rng = np.random.default_rng(0)
    graphs, rows = [], []
    for a in range(40):
        for b in (1, 8):
            g = chain_graph(rng, batch=b)
            graphs.append(g)
            flops = float(g.u[0, GLOBAL["flops_total"]])
            for k, dev in enumerate(DEVICES):
                rows.append({"model": f"arch{a}", "batch_size": b, "device": dev, "phase": "infer",
                             "latency_ms": 1e-6 * flops * (k + 1) + 0.1, "graph": len(graphs) - 1,
                             "split": ("train", "train", "val", "test")[a % 4], "family_split": None})
    view = tb.View(graphs, pd.DataFrame(rows))
    monkeypatch.setattr(tb, "load", lambda name, data_root=None: view)
    monkeypatch.setattr(tb, "dataset_path", lambda name, data_root=None: Path("synthetic") / name)
    monkeypatch.setattr(tb, "set_threads", lambda n: None)  # leave the test process's torch threads alone
    return view


def _args(**kw):
    base = dict(data_root=None, archs=None, batch=None, multi=True, hidden=8, epochs=1, time_limit=None,
                patience=20, seed=0, threads=1)
    return argparse.Namespace(**{**base, **kw})


def test_settings_parse_presets_and_ad_hoc():
    assert tb.parse_settings("timm-i9")[0].devices == ("i9_10940x/fp32-nchw-pt240-dynamo",)
    s = tb.parse_settings("nb201:1080ti+titanxp:infer:split")[0]
    assert s.devices == ("1080ti", "titanxp") and s.per_device
    with pytest.raises(argparse.ArgumentTypeError, match="choose from"):
        tb.parse_settings("nope")


def test_subsample_is_stable_and_nested(tiny):
    setting = tb.Setting("t", "tiny", DEVICES)
    small, _ = tb.setting_view(setting, archs=5)
    large, info = tb.setting_view(setting, archs=20, batch=8)
    assert set(small.labels["model"]) <= set(large.labels["model"])
    assert info["architectures"] == 20 and info["batch_sizes"] == [8]
    assert set(large.labels["batch_size"]) == {8}


def test_compare_single_and_per_device(tiny):
    from rich.console import Console

    console = Console(file=io.StringIO())
    one = compare_methods.run_single(tb.Setting("one", "tiny", ("gpu_a",)),
                                     ["flops", "seernet", "seernet[head_globals=true]"], _args(), console)
    assert [r["method"] for r in one["results"]] == ["flops", "seernet", "seernet[head_globals=true]"]
    assert one["results"][2]["config"]["head_globals"] is True and not one["results"][1]["config"]["head_globals"]
    assert one["best"] in ("flops", "seernet") and one["results"][1]["params"] > 0
    table = compare_methods.single_table("one", one)
    shown = io.StringIO()
    Console(file=shown, width=200).print(table)
    assert "seernet[head_globals=true]" in shown.getvalue()  # printed as text, not eaten as markup
    both = compare_methods.run_per_device(tb.Setting("two", "tiny", DEVICES), ["flops"], _args(), console)
    names = [r["method"] for r in both["summary"]]
    assert names == ["flops", "seernet-multi (PCGrad)", "seernet-multi (no PCGrad)"]
    assert all(set(r["per_device"]) == set(DEVICES) and "mape" in r["mean"] for r in both["summary"])
    pc, no = both["summary"][1:]  # PCGrad reports how often the devices' gradients conflicted
    assert 0.0 <= pc["conflict_share"] <= 1.0 and "conflict_share" not in no
    assert "mape" in one["results"][1]["val"]["latency_ms"]  # the validation scores are kept too
    assert len(compare_methods.per_device_tables("two", both)) == 2


def test_ablations_main_writes_json(tiny, tmp_path):
    out = tmp_path / "abl.json"
    assert ablations.main(["--setting", "tiny:gpu_a:infer", "--groups", "components,scale", "--fractions", "50,100",
                           "--epochs", "1", "--hidden", "8", "--archs", "40", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["variant"] for r in report["tables"]["components"]][-1] == "SynMM + GNPB"
    scale = report["tables"]["scale"]
    assert scale[0]["train_examples"] < scale[1]["train_examples"] == report["sizes"]["train"]


def test_set_reaches_the_methods_that_have_the_field_and_refuses_typos(capsys):
    assert tb.overrides_for("seernet", ["dropout=0.1", "synmm=false"]) == {"dropout": 0.1, "synmm": False}
    assert tb.overrides_for("gbm", ["dropout=0.1"]) is None  # the GBM has no dropout: left alone
    with pytest.raises(SystemExit):
        compare_methods.main(["--methods", "seernet,gbm", "--set", "dropuot=0.1"])
    assert "dropuot" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare_methods.main(["--methods", "seernet", "--set", "dropout"])  # not FIELD=VALUE
    assert "not FIELD=VALUE" in capsys.readouterr().err
    from perfseer.models.registry import parse_overrides
    assert parse_overrides("flops-only", []) == {}  # no settings: any method name (aliases too) is fine
    # a method with fields of its own: NAME[FIELD=VALUE;...]
    assert compare_methods.split_variant("seernet[head_globals=true;dropout=0.1]") == (
        "seernet", {"head_globals": True, "dropout": 0.1})
    assert compare_methods.split_variant("pmgns") == ("pmgns", {})
    with pytest.raises(SystemExit):
        compare_methods.main(["--methods", "seernet[hed_globals=true]"])
    assert "hed_globals" in capsys.readouterr().err


WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")


@pytest.fixture
def tiny_families(monkeypatch):
    """40 timm-named architectures in 10 families, batch 1 and 8, one device; latency ~ FLOPs."""
    rng = np.random.default_rng(1)
    graphs, rows = [], []
    for a in range(40):
        for b in (1, 8):
            g = chain_graph(rng, batch=b)
            graphs.append(g)
            rows.append({"model": f"timm:{WORDS[a % 10]}_{a}", "batch_size": b, "device": "gpu_a", "phase": "infer",
                         "latency_ms": 1e-6 * float(g.u[0, GLOBAL["flops_total"]]) + 0.1, "graph": len(graphs) - 1,
                         "split": "train", "family_split": "train"})
    view = tb.View(graphs, pd.DataFrame(rows))
    monkeypatch.setattr(tb, "load", lambda name, data_root=None: view)
    monkeypatch.setattr(tb, "dataset_path", lambda name, data_root=None: Path("synthetic") / name)
    monkeypatch.setattr(tb, "set_threads", lambda n: None)
    return view


def test_family_folds_are_disjoint_and_cover_every_family():
    import leave_families_out as lfo

    fams = list(WORDS)
    tests = [{f for f, s in zip(fams, lfo.fold_splits(fams, 4, k)) if s == "test"} for k in range(4)]
    assert set().union(*tests) == set(fams) and sum(map(len, tests)) == len(fams)
    for k in range(4):
        split = dict(zip(fams, lfo.fold_splits(fams, 4, k)))
        assert {f for f, s in split.items() if s == "val"} == tests[(k + 1) % 4]  # validation: the next fold
    assert lfo.fold_of("resnet", 4, 0) == lfo.fold_of("resnet", 4, 0) != None  # noqa: E711 - pure function


def test_leave_families_out_end_to_end(tiny_families, tmp_path, capsys):
    import leave_families_out as lfo

    out = tmp_path / "lfo.json"
    lfo.main(["--settings", "timm:gpu_a:infer", "--methods", "flops,seernet[readout=sum]", "--ensemble",
              "seernet[readout=sum]+flops", "--folds", "3", "--hidden", "8", "--epochs", "1", "--json", str(out)])
    rep = json.loads(out.read_text())["settings"]["timm:gpu_a:infer"]
    assert len(rep["folds"]) == 3
    tested = [m for f in rep["folds"] for m in f["test_rows"]["model"]]
    assert sorted(tested) == sorted(f"timm:{WORDS[a % 10]}_{a}" for a in range(40) for _ in (1, 8))  # each row once
    fams = [set(f["test_families"]) for f in rep["folds"]]
    assert not (fams[0] & fams[1]) and not (fams[1] & fams[2])
    pooled = rep["pooled"]
    assert set(pooled) == {"flops", "seernet[readout=sum]", "seernet[readout=sum]+flops"}
    assert all(np.isfinite(p["mape"]) and len(p["fold_mapes"]) == 3 for p in pooled.values())
    assert "seernet[readout=sum]" in capsys.readouterr().out


def test_leave_families_out_aux_devices_trains_jointly_and_scores_the_same_rows(tiny_families, tmp_path):
    import leave_families_out as lfo

    lab = tiny_families.labels
    aux = lab[lab["graph"] != 0].assign(device="gpu_b", latency_ms=lambda d: 2 * d["latency_ms"])  # one graph unmeasured
    tiny_families.labels = pd.concat([lab, aux], ignore_index=True)
    plain, joint = tmp_path / "plain.json", tmp_path / "joint.json"
    common = ["--settings", "timm:gpu_a:infer", "--methods", "gcn", "--folds", "3", "--hidden", "8", "--epochs", "1"]
    lfo.main(common + ["--json", str(plain)])
    lfo.main(common + ["--aux-devices", "gpu_b", "--label-suffix=-b", "--json", str(joint)])
    p = json.loads(plain.read_text())["settings"]["timm:gpu_a:infer"]
    j = json.loads(joint.read_text())["settings"]["timm:gpu_a:infer"]
    assert j["aux_devices"] == ["gpu_b"] and "aux_devices" not in p
    for fp, fj in zip(p["folds"], j["folds"]):
        assert fp["test_rows"] == fj["test_rows"] and fp["val_y"] == fj["val_y"]  # scored on gpu_a's own rows
        r = fj["results"][0]
        assert r["method"] == "gcn-b" and r["config"]["num_targets"] == 2  # trained on both devices
        assert len(r["pred_test"]) == len(fj["test_rows"]["y"]) and np.all(np.isfinite(r["pred_test"]))
    merged = tmp_path / "m.json"
    lfo.main(["--merge", str(plain), str(joint), "--stack", "gcn+gcn-b", "--json", str(merged)])
    assert "stack:gcn+gcn-b" in json.loads(merged.read_text())["settings"]["timm:gpu_a:infer"]["pooled"]


def test_leave_families_out_refit_trains_on_train_and_val_for_stage_ones_epochs(tiny_families, tmp_path, capsys):
    import leave_families_out as lfo

    common = ["--settings", "timm:gpu_a:infer", "--methods", "gcn", "--folds", "3", "--hidden", "8"]
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    lfo.main(common + ["--epochs", "6", "--patience", "2", "--json", str(one)])
    lfo.main(common[:3] + ["gcn,gbm[n_estimators=40;early_stopping_rounds=3]"] + common[4:] + ["--epochs", "6",
                            "--refit-from", str(one), "--refit-of=", "--label-suffix=R", "--json", str(two)])
    a = json.loads(one.read_text())["settings"]["timm:gpu_a:infer"]
    b = json.loads(two.read_text())["settings"]["timm:gpu_a:infer"]
    assert "refit_report" not in json.loads(two.read_text())["args"]  # the path is kept, not the report
    for fa, fb in zip(a["folds"], b["folds"]):
        g = fb["results"][1]  # the GBM: stage one fitted in the same run, then refitted for its rounds
        assert g["method"] == "gbm[n_estimators=40;early_stopping_rounds=3]R" and g["refit"]["train_rows"] == (
            fa["sizes"]["train"] + fa["sizes"]["val"])
        assert g["best_iterations"] == [g["refit"]["n_estimators"]] and g["refit"]["n_estimators"] <= 40
        assert np.all(np.isfinite(g["pred_test"])) and len(g["pred_val"]) == len(fa["val_y"])
        ra, rb = fa["results"][0], fb["results"][0]
        assert rb["method"] == "gcnR" and rb["refit"]["stage_one"] == "gcn"
        assert rb["refit"]["train_rows"] == fa["sizes"]["train"] + fa["sizes"]["val"]  # train + validation
        assert rb["epochs"] == rb["refit"]["epochs"] == ra["best_epoch"]  # stage one's choice, no early stop
        assert rb["pred_val"] == ra["pred_val"]  # stacks fit on validation rows no member trained on
        assert rb["pred_test"] != ra["pred_test"] and np.all(np.isfinite(rb["pred_test"]))
    with pytest.raises(SystemExit) as e:  # a stage-one label that is not in the report
        lfo.main(common + ["--refit-from", str(one), "--refit-of=@x", "--json", str(tmp_path / "x.json")])
    assert "gcn@x" in str(e.value) and "--refit-of" in str(e.value)
    with pytest.raises(SystemExit) as e:  # other folds: other validation rows
        lfo.main(common[:-2] + ["--folds", "4", "--hidden", "8", "--refit-from", str(one), "--refit-of=",
                                "--json", str(tmp_path / "y.json")])
    assert "other validation rows" in str(e.value)


def test_leave_families_out_stack_merge_and_interval_coverage(tiny_families, tmp_path):
    import intervals
    import leave_families_out as lfo

    a, b, merged = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "m.json"
    common = ["--settings", "timm:gpu_a:infer", "--folds", "3", "--hidden", "8", "--epochs", "1"]
    lfo.main(common + ["--methods", "flops,gcn", "--stack", "gcn+flops", "--json", str(a)])
    lfo.main(common + ["--methods", "flops", "--label-suffix", "@b", "--only-folds", "0,1,2", "--json", str(b)])
    c = tmp_path / "c.json"
    lfo.main(common + ["--methods", "gcn", "--seed", "1", "--label-suffix=-s1", "--json", str(c)])
    # a run whose name has a "+" inside brackets is a run, not a stack: the merge keeps it
    d = tmp_path / "d.json"
    lfo.main(common + ["--methods", "gbm[features=global+ops]", "--json", str(d)])
    lfo.main(["--merge", str(a), str(b), str(c), str(d), "--stack",
              "flops+flops@b,gcn-seedmean+flops,gcn+gbm[features=global+ops]", "--seed-mean", "gcn",
              "--shift", "--json", str(merged)])
    rep = json.loads(merged.read_text())["settings"]["timm:gpu_a:infer"]
    for f in rep["folds"]:
        by = {r["method"]: r for r in f["results"]}
        assert {"flops", "gcn", "flops@b", "stack:gcn+flops", "stack:flops+flops@b",
                "stack+shift:flops+flops@b", "gbm[features=global+ops]", "stack:gcn+gbm[features=global+ops]"} <= set(by)
        shifted = by["stack+shift:flops+flops@b"]  # the same blend times exp(shift), no worse on validation
        plain = np.asarray(by["stack:flops+flops@b"]["pred_test"])
        assert np.allclose(shifted["pred_test"], np.exp(shifted["shift"]) * plain)
        assert shifted["val_mape"] <= by["stack:flops+flops@b"]["val_mape"] + 1e-9
        mean = by["gcn-seedmean"]  # the equal-weight geometric mean of the two seeds, usable in a stack
        assert mean["seeds"] == ["gcn", "gcn-s1"] and "stack:gcn-seedmean+flops" in by
        assert np.allclose(mean["pred_test"], np.sqrt(np.asarray(by["gcn"]["pred_test"]) * by["gcn-s1"]["pred_test"]))
        w = by["stack:gcn+flops"]["weights"]
        assert len(w) == 2 and abs(sum(w) - 1) < 1e-9
        assert by["stack:gcn+flops"]["val_mape"] <= min(by["gcn"]["val_mape"], by["flops"]["val_mape"]) + 1e-9
    cov = intervals.lfo_part([merged])["timm:gpu_a:infer"]["methods"]
    assert 0 <= cov["gcn"]["coverage_family_calibrated"] <= 100 and cov["gcn"]["rows"] == 80
    assert len(cov["stack:gcn+flops"]["per_fold"]) == 3


def test_lfo_uncertainty_shift_fits_on_validation_and_scores_test(tmp_path):
    import lfo_uncertainty_shift as us

    rng = np.random.default_rng(0)

    def fold(k):
        yv, yt = np.exp(rng.normal(0, 1, 40)), np.exp(rng.normal(0, 1, 30))
        res = [{"method": m, "pred_val": (yv * np.exp(rng.normal(0, 0.1, 40))).tolist(),
                "pred_test": (yt * np.exp(rng.normal(0, 0.1, 30))).tolist()} for m in ("a", "b", "c")]
        return {"fold": k, "val_y": yv.tolist(), "test_rows": {"y": yt.tolist()}, "results": res}

    rep = tmp_path / "m.json"
    rep.write_text(json.dumps({"settings": {"s": {"folds": [fold(0), fold(1)]}}}))
    out = tmp_path / "o.json"
    assert us.main([str(rep), "--setting", "s", "--blend", "a+b", "--spread", "a,b,c", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["form"] for r in runs] == ["s2", "s"]
    for r in runs:
        for f in r["folds"]:  # the adaptive fit has b1 = 0 among its candidates: never worse on validation
            assert f["adaptive"]["val"] <= f["constant"]["val"] + 1e-9 and f["adaptive"]["b1"] <= 0
        assert 0 < r["pooled"]["constant"] < 100 and 0 < r["pooled"]["adaptive"] < 100
    with pytest.raises(SystemExit, match="no run"):
        us.main([str(rep), "--setting", "s", "--blend", "a+z", "--spread", "a,b"])


def test_cache_roofline_discounts_cached_bytes_and_restores_the_costs(tiny_families, tmp_path):
    import lfo_cache_roofline as lcr

    import perfseer.models.roofline as roofline

    b = lcr.cache_bytes(np.array([0.0, 1e6, 4e6, 10e6]), 4e6, 4.0)
    assert np.allclose(b, [0.0, 0.25e6, 1e6, 1e6 + 6e6])  # within the cache at 1/4, the spill at full cost
    assert np.allclose(lcr.cache_bytes([3.0], 4.0, 1.0), [3.0])
    plain = roofline.node_costs
    preds = {}
    for kappa in ("1", "8"):
        out = tmp_path / f"k{kappa}.json"
        assert lcr.main(["--kappa", kappa, "--cache-mib", "0.001", "--settings", "timm:gpu_a:infer",
                         "--methods", "roofline[fit=all]", "--folds", "3", "--json", str(out)]) == 0
        assert roofline.node_costs is plain
        rep = json.loads(out.read_text())["settings"]["timm:gpu_a:infer"]
        preds[kappa] = [r["pred_test"] for f in rep["folds"] for r in f["results"]]
    assert preds["1"] != preds["8"]
