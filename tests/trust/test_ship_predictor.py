"""scripts/ship_predictor.py: installs a retrained card in place of the bundled one, keeping the replaced
card's test score and the fields training does not write (role, basis), and refuses a worse one."""

from __future__ import annotations

import json

import pytest

from helpers import load_script


def _script():
    return load_script("ship_predictor")


def _card(mape: float, fit: list[str], **extra) -> dict:
    scores = {"val": {"t": {"mape": mape}}}
    if fit == ["train"]:
        scores["test"] = {"t": {"mape": 7.0}}
    return {"name": "x.infer", "training": {"fit_splits": fit, "rows": {"train": 10}, "epochs_run": 5},
            "scores": scores, **extra}


@pytest.fixture()
def bundled(tmp_path, monkeypatch):
    import perfseer.runtime.predictor as P

    d = tmp_path / "bundled"
    d.mkdir()
    monkeypatch.setattr(P, "BUNDLED", d)
    (d / "x.infer.json").write_text(json.dumps(_card(8.0, ["train"], role="memory-fallback", basis="the basis")))
    (d / "x.infer.safetensors").write_bytes(b"old")
    return d


def _new(tmp_path, mape):
    src = tmp_path / "new" / "x.infer.json"
    src.parent.mkdir()
    src.write_text(json.dumps(_card(mape, ["train", "test"])))
    src.with_suffix(".safetensors").write_bytes(b"new")
    return src


def test_ships_and_keeps_the_replaced_cards_test_score_role_and_basis(tmp_path, bundled):
    assert _script().main([str(_new(tmp_path, 7.5)), "--tolerance", "0"]) == 0
    card = json.loads((bundled / "x.infer.json").read_text())
    assert card["scores"]["previous_test"] == {"t": {"mape": 7.0}}
    assert card["role"] == "memory-fallback" and card["basis"] == "the basis"
    assert (bundled / "x.infer.safetensors").read_bytes() == b"new"


def test_refuses_a_card_worse_on_validation(tmp_path, bundled):
    assert _script().main([str(_new(tmp_path, 8.6)), "--tolerance", "0.5"]) == 1
    assert (bundled / "x.infer.safetensors").read_bytes() == b"old"
