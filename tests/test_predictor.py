"""Predictors: training into a card, saving and loading without pickle, coverage, bad files, unseen
operators, ``perfseer evaluate`` and the train/predict/predictors/evaluate commands."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from helpers import nb201_arch as arch
from helpers import run_cli
from perfseer.data.dataset import load_dataset
from perfseer.data.table import write_table
from perfseer.fit.evaluate import evaluate_predictor
from perfseer.runtime.predictor import PredictorError, UnseenOperatorWarning, load_predictor
from perfseer.fit.recipe import train_predictor
from perfseer.fit.trainer import TrainConfig


@pytest.fixture(scope="module")
def dataset(nb201_dataset):
    """16 NB201 cells at batches 1 and 8 on two devices; latency grows with the FLOPs."""
    return nb201_dataset(seed=0, draws=16, batches=(1, 8), devices={"gpu-a": 1.0, "gpu-b": 2.0})


CFG = dict(max_epochs=3, progress=False, num_threads=1, batch_size=16)


@pytest.fixture(scope="module")
def trained(dataset):
    p, _ = train_predictor(load_dataset(dataset / "ds"), "seernet", devices=["gpu-a", "gpu-b"], phase="infer",
                           model_config={"hidden_dim": 8, "head_hidden_dim": 8}, train_config=TrainConfig(**CFG))
    p.save(dataset / "preds")
    return p


def test_card_describes_the_predictor(trained):
    c = trained.card
    assert c["format"] == "perfseer.predictor" and c["schema_version"] == "1.0"
    assert [(t["metric"], t["device"], t["phase"], t["unit"]) for t in c["targets"]] == [
        ("latency_ms", "gpu-a", "infer", "ms"), ("latency_ms", "gpu-b", "infer", "ms")]
    assert c["model"]["name"] == "seernet" and c["model"]["config"]["hidden_dim"] == 8
    assert set(c["scores"]) == {"val", "test"} and "latency_ms@gpu-a:infer" in c["scores"]["test"]
    assert c["training"]["split_column"] == "split" and sum(c["training"]["rows"].values()) > 0
    assert "Conv" in c["op_types_seen"]


def test_save_load_round_trip(trained, dataset):
    card = next((dataset / "preds").glob("*.json"))
    back = load_predictor(card)
    a = trained.predict(arch(random.Random(5)), batch=[1, 4])
    b = back.predict(arch(random.Random(5)), batch=[1, 4])
    assert [r["value"] for r in a] == pytest.approx([r["value"] for r in b], rel=1e-6)
    assert len(a) == 4 and {r["device"] for r in a} == {"gpu-a", "gpu-b"}
    only_b = back.predict(arch(random.Random(5)), batch=2, device="gpu-b")
    assert [r["device"] for r in only_b] == ["gpu-b"]


def test_uncovered_device_and_bad_batch(trained):
    with pytest.raises(PredictorError, match="does not cover device rtx3090"):
        trained.predict(arch(random.Random(1)), device="rtx3090")
    with pytest.raises(PredictorError, match="batch sizes must be integers"):
        trained.predict(arch(random.Random(1)), batch=[0])


def test_unseen_operators_warn_but_predict(trained):
    with pytest.warns(UnseenOperatorWarning, match="MaxPool"):
        rows = trained.predict("example:resnet18")
    assert all(np.isfinite(r["value"]) for r in rows) and "MaxPool" in rows[0]["unseen_ops"]


def test_bad_predictor_files(trained, dataset, tmp_path):
    src = next((dataset / "preds").glob("*.json"))
    card = json.loads(src.read_text())
    weights = src.with_name(src.name[: -len(".json")] + ".safetensors").read_bytes()

    def write(name, card_obj, blob):
        (tmp_path / f"{name}.json").write_text(json.dumps(card_obj))
        (tmp_path / f"{name}.safetensors").write_bytes(blob)
        return tmp_path / f"{name}.json"

    with pytest.raises(PredictorError, match="corrupt"):
        load_predictor(write("corrupt", card, weights[:100]))
    with pytest.raises(PredictorError, match="feature schema 9.0"):
        load_predictor(write("newer", dict(card, schema_version="9.0"), weights))
    with pytest.raises(PredictorError, match="upgrade perfseer"):
        load_predictor(write("future", dict(card, format_version=99), weights))
    with pytest.raises(PredictorError, match="does not fit its network"):
        load_predictor(write("mismatch", dict(card, model=dict(card["model"], config=dict(card["model"]["config"],
                                                                                        hidden_dim=16))), weights))
    from safetensors.torch import load, save

    state = load(weights)
    state.pop(next(k for k in sorted(state) if not k.startswith("domain.")))
    with pytest.raises(PredictorError, match=r"lack the tensor\(s\) "):
        load_predictor(write("lacking", card, save(state)))
    (tmp_path / "lacking.safetensors").unlink()
    with pytest.raises(PredictorError, match="predictor weights .* are missing"):
        load_predictor(tmp_path / "lacking.json")
    with pytest.raises(PredictorError, match="is not a predictor card"):
        load_predictor(write("foreign", dict(card, format="perfseer.specmodel"), weights))
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(PredictorError, match="unreadable"):
        load_predictor(tmp_path / "junk.json")
    with pytest.raises(PredictorError, match="no predictor named"):
        load_predictor("no-such-predictor")


def test_baseline_predictor_is_all_card(dataset, tmp_path):
    p, _ = train_predictor(load_dataset(dataset / "ds"), "flops", devices="gpu-a", phase="infer")
    p.save(tmp_path)
    assert not list(tmp_path.glob("*.safetensors"))
    back = load_predictor(next(tmp_path.glob("*.json")))
    a = arch(random.Random(3))
    assert back.predict(a, batch=8)[0]["value"] == pytest.approx(p.predict(a, batch=8)[0]["value"])


def test_max_train_models_keeps_val_and_test(dataset):
    ds = load_dataset(dataset / "ds")
    full, _ = train_predictor(ds, "flops", devices="gpu-a", phase="infer")
    small, _ = train_predictor(ds, "flops", devices="gpu-a", phase="infer", max_train_models=2)
    assert small.card["training"]["rows"]["train"] == 2 * 2  # two models, each at batch 1 and 8
    assert full.card["training"]["rows"]["train"] > 4
    assert small.card["training"]["rows"]["test"] == full.card["training"]["rows"]["test"]


def test_evaluate_counts_uncovered_rows(trained, dataset, tmp_path):
    rows = [{"model": arch(random.Random(7)), "input_shape": "3x32x32", "batch_size": b, "phase": "infer",
             "device": dev, "latency_ms": 1.0 + b} for b in (1, 2) for dev in ("gpu-a", "tpu")]
    rows.append({"model": "missing.onnx", "input_shape": "3x32x32", "batch_size": 1, "phase": "infer",
                 "device": "gpu-b", "latency_ms": 1.0})
    write_table(rows, tmp_path / "m.csv")
    r = evaluate_predictor(trained, tmp_path / "m.csv")
    assert r["rows_scored"] == 2 and r["rows_not_covered"] == 2 and r["not_covered"] == {"tpu (infer)": 2}
    assert r["failures"][0]["model"] == "missing.onnx"
    assert r["scores"]["latency_ms@gpu-a:infer"]["n"] == 2
    test_only = evaluate_predictor(trained, dataset / "ds", split="test")
    assert test_only["rows_scored"] == sum(m["n"] for m in test_only["scores"].values())


def test_commands(dataset, tmp_path, capsys):
    out = tmp_path / "p"
    code, stdout, _ = run_cli(capsys, "train", "--data", str(dataset / "ds"), "--device", "gpu-a", "--phase", "infer",
                              "--hidden", "8", "--epochs", "2", "--threads", "1", "--out", str(out), "--name", "tiny",
                              "--set", "head_globals=true")
    assert code == 0 and "tiny" in stdout and (out / "tiny.json").exists() and (out / "tiny.safetensors").exists()
    cfg = json.loads((out / "tiny.json").read_text())["model"]["config"]
    assert cfg["head_globals"] is True and cfg["hidden_dim"] == 8  # --set and --hidden reach the model
    code, stdout, _ = run_cli(capsys, "predictors", "--dir", str(out), "--json")
    assert code == 0 and json.loads(stdout)[0]["name"] == "tiny"
    code, stdout, _ = run_cli(capsys, "predict", arch(random.Random(2)), "--predictor", str(out / "tiny.json"),
                              "--batch", "1,16", "--json")
    preds = json.loads(stdout)["predictions"]
    assert code == 0 and [p["batch_size"] for p in preds] == [1, 16]
    code, stdout, _ = run_cli(capsys, "evaluate", "--predictor", str(out / "tiny.json"), "--measurements",
                              str(dataset / "ds"), "--json")
    assert code == 0 and json.loads(stdout)["rows_not_covered"] > 0  # the gpu-b rows
    (out / "tiny.safetensors").write_bytes(b"broken")
    code, _, err = run_cli(capsys, "predict", "example:resnet18", "--predictor", str(out / "tiny.json"))
    assert code == 2 and "corrupt" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "train", "--data", str(dataset / "ds"), "--out", str(out), "--set", "dropuot=0.1")
    assert code == 2 and "seernet has no config field(s) dropuot" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "train", "--data", str(tmp_path / "nope"), "--out", str(out))
    assert code == 2 and "no dataset folder or committed dataset named" in err


def test_a_blend_trains_and_predicts_from_the_command_line(dataset, tmp_path, capsys):
    out = tmp_path / "b"
    code, _, err = run_cli(capsys, "train", "--data", str(dataset / "ds"), "--device", "gpu-a", "--phase", "infer",
                           "--model", "blend", "--set", "members=seernet[readout=sum]+pmgns", "--hidden", "8",
                           "--set", "head_hidden_dim=8", "--epochs", "2", "--threads", "1", "--out", str(out),
                           "--name", "mix")
    assert code == 0, err
    card = json.loads((out / "mix.json").read_text())
    cfg = card["model"]["config"]
    assert card["model"]["name"] == "blend" and cfg["members"] == "seernet[readout=sum]+pmgns"
    assert len(cfg["weights"].split(",")) == 2 and card["training"]["epochs_run"] == 4
    code, stdout, _ = run_cli(capsys, "predict", arch(random.Random(2)), "--predictor", str(out / "mix.json"),
                              "--batch", "1,16", "--json")
    preds = json.loads(stdout)["predictions"]
    assert code == 0 and all(p["value"] > 0 for p in preds)
    from perfseer.features.extract import extract

    mix = load_predictor(out / "mix.json")  # embed() works (the model-space check reads the embeddings)
    _, emb = mix.predict_with_embeddings([extract(arch(random.Random(2)), batch=16).to_pyg()])
    assert emb is not None and emb.shape == (1, mix.domain_embeddings.shape[1])


def test_a_blend_goes_through_kfold_stages_and_resumes(dataset, tmp_path):
    cfg = {"members": "gcn+pmgns", "hidden_dim": 8, "head_hidden_dim": 8}
    tc = TrainConfig(**CFG | {"max_epochs": 1})
    p, _ = train_predictor(load_dataset(dataset / "ds"), "blend", devices=["gpu-a"], phase="infer", model_config=cfg,
                           train_config=tc, kfold=2, stage_dir=tmp_path)
    assert (tmp_path / "final.json").is_file() and (tmp_path / "fold1.json").is_file()
    assert p.card["model"]["name"] == "blend" and "kfold" in p.card["scores"]
    resume = TrainConfig(**CFG | {"max_epochs": 1, "resume": True, "checkpoint_dir": str(tmp_path)})
    again, _ = train_predictor(load_dataset(dataset / "ds"), "blend", devices=["gpu-a"], phase="infer",
                               model_config=cfg, train_config=resume, kfold=2, stage_dir=tmp_path)
    assert again.card["scores"]["kfold"] == p.card["scores"]["kfold"]  # finished stages are loaded, not retrained


def test_stages_trained_apart_build_the_same_card(dataset, tmp_path):
    ds = load_dataset(dataset / "ds")
    kw = dict(devices=["gpu-a"], phase="infer", model_config={"hidden_dim": 8}, kfold=2)
    whole, _ = train_predictor(ds, "pmgns", train_config=TrainConfig(**CFG | {"max_epochs": 1}),
                               stage_dir=tmp_path / "whole", **kw)
    apart = tmp_path / "apart"
    for stages in (["fold1"], ["final", "fold0"]):  # as two processes would
        assert train_predictor(ds, "pmgns", train_config=TrainConfig(**CFG | {"max_epochs": 1}), stage_dir=apart,
                               only_stages=stages, **kw) == (None, None)
    assert sorted(f.name for f in apart.glob("*.json")) == ["final.json", "fold0.json", "fold1.json"]
    resume = {"max_epochs": 1, "resume": True, "checkpoint_dir": str(tmp_path / "ck")}
    built, _ = train_predictor(ds, "pmgns", train_config=TrainConfig(**CFG | resume),
                               stage_dir=apart, **kw)
    assert built.card["scores"]["kfold"] == whole.card["scores"]["kfold"]  # same seed, same folds, same networks
    with pytest.raises(PredictorError, match="fold2"):
        train_predictor(ds, "pmgns", train_config=TrainConfig(**CFG), stage_dir=apart, only_stages=["fold2"], **kw)


def test_train_cli_trains_one_stage(dataset, tmp_path, capsys):
    args = ["train", "--data", str(dataset / "ds"), "--device", "gpu-a", "--phase", "infer", "--model", "pmgns",
            "--hidden", "8", "--epochs", "1", "--fit", "train+test", "--kfold", "2", "--name", "p",
            "--out", str(tmp_path)]
    code, stdout, _ = run_cli(capsys, *args, "--stage", "fold0")
    assert code == 0 and "without --stage" in stdout
    assert [f.name for f in (tmp_path / ".stages" / "p").glob("*.json")] == ["fold0.json"]
    assert not (tmp_path / "p.json").exists()  # no card until every stage is there
    code, _, stderr = run_cli(capsys, *args[:-2], "--out", str(tmp_path / "x"), "--stage", "fold5")
    assert code != 0 and "fold5" in stderr and "Traceback" not in stderr


def test_a_card_extracts_the_way_its_training_graphs_were(trained, dataset, tmp_path):
    """A card records how its training graphs were extracted; predict extracts a model the same way,
    and a graph extracted the other way is out of domain with the reason and the fix."""
    import copy
    import warnings

    import onnx
    from onnx import helper

    import perfseer
    from helpers import make_model
    from perfseer.data.dataset import load_dataset
    from perfseer.runtime.predictor import Predictor

    assert load_dataset(dataset / "ds").manifest["extraction"] == {"weight_work": False}
    assert trained.card["extraction"] == {"weight_work": False} and trained.weight_work is False
    w = np.ones((16, 3, 3, 3), np.float32)  # a weight scaled at every forward, as weight standardisation
    nodes = [helper.make_node("Mul", ["w", "gain"], ["ws"], name="scale_w"),
             helper.make_node("Conv", ["x", "ws"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    path = tmp_path / "scaled.onnx"
    onnx.save(make_model(nodes, {"x": (1, 3, 32, 32)}, ["y"], {"w": w, "gain": np.full((16, 1, 1, 1), 2.0, np.float32)}),
              path)
    card = copy.deepcopy(trained.card)
    card["extraction"] = {"weight_work": True}
    kept = Predictor(card, trained.net)
    kept.domain_embeddings = trained.domain_embeddings
    mismatch = "extracted with the work on weights folded"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnseenOperatorWarning)
        by_model = kept.predict(str(path), batch=1, device="gpu-a")
        by_graph = kept.predict(perfseer.extract(str(path), weight_work=True), batch=1, device="gpu-a")
        folded_graph = perfseer.extract(str(path))  # the default: folded
        other_way = kept.predict(folded_graph, batch=1, device="gpu-a")
        plain = trained.predict(folded_graph, batch=1, device="gpu-a")
    assert by_model[0]["value"] == by_graph[0]["value"]  # predict extracted with the work kept
    assert not any(mismatch in r for r in by_model[0]["domain_reasons"] + plain[0]["domain_reasons"])
    assert other_way[0]["in_domain"] is False
    reason = next(r for r in other_way[0]["domain_reasons"] if mismatch in r)
    assert "weight_work=True" in reason and "PERFSEER_WEIGHT_WORK=1" in reason


def test_the_device_route_extracts_the_way_the_routed_card_wants(monkeypatch, capsys):
    """``perfseer predict --device D`` extracts the model again when the measured card D routes to
    learned from graphs extracted the other way; the spec model takes the default extraction."""
    from perfseer.runtime import route

    assert route.routed_extraction("rtx3090", "infer") is False  # the bundled card: folded graphs
    assert route.routed_extraction("rtx3090", "infer", prefer="spec") is None
    calls = []
    real = route.extract
    monkeypatch.setattr(route, "extract", lambda *a, **k: calls.append(k.get("weight_work")) or real(*a, **k))
    monkeypatch.setattr(route, "routed_extraction", lambda *a, **k: True)  # as if its card had kept the work
    code, out, _ = run_cli(capsys, "predict", "example:resnet18", "--device", "rtx3090", "--json")
    assert code == 0 and calls == [True]  # the card's extraction only
    calls.clear()
    monkeypatch.setattr(route, "routed_extraction", lambda device, *a, **k: None if device == "h100-sxm" else True)
    code, _, _ = run_cli(capsys, "predict", "example:resnet18", "--device", "rtx3090", "--device", "h100-sxm", "--json")
    assert code == 0 and calls == [True, False]  # the spec model's device gets the default extraction
    rows = json.loads(out)["predictions"]
    # the real card learned from folded graphs, so the graph it got is out of domain, and says why
    assert rows and all(any("work on weights kept" in r for r in row["domain_reasons"]) for row in rows)
