"""Every prediction carries its interval, domain verdict and flags; k-fold training; old cards."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from helpers import nb201_arch as arch
from helpers import run_cli
from perfseer.data.dataset import load_dataset
from perfseer.runtime.predictor import PredictorError, UnseenOperatorWarning, load_predictor
from perfseer.fit.recipe import kfold_of, train_predictor
from perfseer.fit.trainer import TrainConfig


@pytest.fixture(scope="module")
def data(nb201_dataset):
    """40 NB201 cells at batches 1, 4 and 16 on one device (enough validation rows for a 90 % quantile)."""
    return nb201_dataset(seed=1, draws=48, keep=40, batches=(1, 4, 16), devices={"rtx3090/amp-nchw-pt240": 1.0})


CFG = dict(max_epochs=2, progress=False, num_threads=1, batch_size=16)


@pytest.fixture(scope="module")
def kfolded(data):
    p, _ = train_predictor(load_dataset(data / "ds"), "seernet", model_config={"hidden_dim": 8, "head_hidden_dim": 8},
                           train_config=TrainConfig(**CFG), fit=("train", "test"), kfold=2,
                           stage_dir=data / "stages")
    p.save(data / "preds")
    return p


def test_kfold_card(kfolded, data):
    c = kfolded.card
    rows = c["training"]["rows"]
    assert c["training"]["fit_splits"] == ["train", "test"] and rows["test"] == 0
    kf = c["training"]["kfold"]
    assert kf["k"] == 2 and kf["folds_done"] == 2 and sum(f["rows_held"] for f in kf["folds"]) == rows["train"]
    assert set(c["scores"]) == {"val", "kfold"} and c["scores"]["kfold"]["latency_ms@rtx3090/amp-nchw-pt240:infer"]["n"] == rows["train"]
    pooled = c["scores"]["kfold"]["latency_ms@rtx3090/amp-nchw-pt240:infer"]
    per = [f["mape"]["latency_ms@rtx3090/amp-nchw-pt240:infer"] for f in kf["folds"]]
    assert pooled["mape_fold_mean"] == pytest.approx(np.mean(per)) and pooled["mape_fold_sd"] == pytest.approx(np.std(per, ddof=1))
    assert kf["fit_splits"] == ["train", "test"] and "architecture" in kf["rule"] and -1 <= pooled["spearman_fold_mean"] <= 1
    assert {p.name for p in (data / "stages").glob("*.json")} == {"final.json", "fold0.json", "fold1.json"}
    d = c["domain"]
    assert d["batch_sizes"] == [1, 16] and d["inputs"]["values_per_sample"] == [3072, 3072] and d["embedding"]["threshold"] > 0
    assert c["intervals"]["targets"]["latency_ms@rtx3090/amp-nchw-pt240:infer"]["q"] > 0


def test_prediction_rows_carry_trust(kfolded, data):
    back = load_predictor(data / "preds" / f"{kfolded.name}.json")
    assert back.domain_embeddings is not None and back.domain_embeddings.shape == (
        kfolded.card["domain"]["embedding"]["stored"], kfolded.card["domain"]["embedding"]["dim"])
    rows = back.predict(arch(random.Random(7)), batch=[4, 512])
    for r in rows:
        assert {"interval", "in_domain", "domain_reasons", "flags"} <= set(r)
        lo, hi = r["interval"]
        assert 0 < lo <= r["value"] <= hi and np.isfinite(r["value"])
    # batch 512 on a card trained at 1-16: the same model (in domain), a step beyond the training steps
    assert rows[1]["in_domain"] and rows[1]["domain_reasons"] == []
    q = back.card["intervals"]["targets"][rows[1]["metric"] + "@" + rows[1]["device"] + ":infer"]["q"]
    wide = np.log(rows[1]["interval"][1] / rows[1]["value"])
    stepped = any(f.startswith("step larger than the training steps at batch 512") for f in rows[1]["flags"])
    assert wide == pytest.approx(2 * q if stepped else q, rel=1e-6)  # widened when the step is beyond the training's
    with pytest.warns(UnseenOperatorWarning, match="MaxPool"):
        resnet = back.predict("example:resnet50", batch=1)[0]
    assert not resnet["in_domain"] and any("input of 150,528 values" in t for t in resnet["domain_reasons"])


def test_kfold_of_is_by_name_and_stable():
    a = kfold_of(["m1", "m2", "m3", "m1"], 3, seed=0)
    assert a[0] == a[3] and set(a) <= {0, 1, 2}
    assert list(kfold_of(["m1", "m2"], 3, seed=0)) == list(a[:2])
    with pytest.raises(PredictorError, match="k >= 2"):
        kfold_of(["m1"], 1, seed=0)


def test_fit_on_validation_is_refused(data):
    with pytest.raises(PredictorError, match="validation is kept for early stopping"):
        train_predictor(load_dataset(data / "ds"), "flops", fit=("train", "val"))


def test_card_without_domain_still_predicts(kfolded, data, tmp_path):
    card = json.loads((data / "preds" / f"{kfolded.name}.json").read_text())
    for k in ("domain", "intervals"):
        card.pop(k)
    (tmp_path / "old.json").write_text(json.dumps(card))
    (tmp_path / "old.safetensors").write_bytes((data / "preds" / f"{kfolded.name}.safetensors").read_bytes())
    r = load_predictor(tmp_path / "old.json").predict(arch(random.Random(3)), batch=2)[0]
    assert r["interval"] is None and not r["in_domain"] and "no domain" in r["domain_reasons"][0]
    assert np.isfinite(r["value"]) and any("no interval" in f for f in r["flags"])


def test_cli_shows_interval_and_verdict(kfolded, data, capsys):
    card = str(data / "preds" / f"{kfolded.name}.json")
    # a card trained on NAS-Bench-201 cells refuses ImageNet's ResNet-18 (outside its model space) unless forced
    code, _, err = run_cli(capsys, "predict", "example:resnet18", "--predictor", card, "--batch", "1,2")
    assert code != 0 and "model space" in err and "--force" in err
    code, out, _ = run_cli(capsys, "predict", "example:resnet18", "--predictor", card, "--batch", "1,2", "--force")
    assert code == 0 and "interval" in out and "OUT" in out and "\n  [1] " in out and "input values per sample" in out
    code, out, _ = run_cli(capsys, "predict", "example:resnet18", "--predictor", card, "--json", "--force")
    row = json.loads(out)["predictions"][0]
    assert code == 0 and row["in_domain"] is False and len(row["interval"]) == 2 and isinstance(row["flags"], list)


def test_predictors_lists_kfold_and_interval(kfolded, data, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # rich folds columns to the terminal's width
    code, out, _ = run_cli(capsys, "predictors", "--dir", str(data / "preds"), "--json")
    item = json.loads(out)[0]
    key = "latency_ms@rtx3090/amp-nchw-pt240:infer"
    assert code == 0 and item["scores"]["kfold"][key]["n"] == kfolded.card["training"]["rows"]["train"]
    assert item["intervals"][key] == kfolded.card["intervals"]["targets"][key]["q"]
    assert item["domain"]["batch_sizes"] == [1, 16] and item["training"]["fit_splits"] == ["train", "test"]
    code, out, _ = run_cli(capsys, "predictors", "--dir", str(data / "preds"))
    assert code == 0 and f"{kfolded.card['scores']['kfold'][key]['mape']:.2f}" in out and "×/÷" in out
