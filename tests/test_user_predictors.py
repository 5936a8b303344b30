"""Cards in the folders of $PERFSEER_PREDICTORS (e.g. perfseer calibrate --out DIR) are found by
name and by --device, after the bundled ones."""

import json
import shutil

import pytest

from perfseer.errors import PerfseerError
from perfseer.runtime import route
from perfseer.runtime.predictor import BUNDLED, list_predictors, load_predictor

SOURCE = "epyc-torch-t1.infer"


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """A copy of a bundled card as a user card of device ``mybox/torch-t1``, on the search path."""
    text = (BUNDLED / f"{SOURCE}.json").read_text()
    card = json.loads(text.replace("epyc/torch-t1", "mybox/torch-t1"))
    card["name"] = "mybox.infer"
    (tmp_path / "mybox.infer.json").write_text(json.dumps(card))
    shutil.copy(BUNDLED / f"{SOURCE}.safetensors", tmp_path / "mybox.infer.safetensors")
    monkeypatch.setenv("PERFSEER_PREDICTORS", str(tmp_path))
    return tmp_path


def test_listed_after_the_bundled_ones_and_loaded_by_name(user_folder):
    names = [p["name"] for p in list_predictors()]
    assert names[-1] == "mybox.infer" and SOURCE in names
    assert load_predictor("mybox.infer").card["devices"] == ["mybox/torch-t1"]


def test_a_device_name_finds_the_user_card(user_folder):
    assert route.measured_predictors("mybox") == [("mybox.infer", "mybox/torch-t1")]
    units, _ = route.plan(["mybox"])
    assert units[0].device == "mybox" and route.fallbacks(units[0], route.Resolved(None, None, None)) == []


def test_a_user_card_never_shadows_a_bundled_name(user_folder):
    card = json.loads((user_folder / "mybox.infer.json").read_text())
    (user_folder / f"{SOURCE}.json").write_text(json.dumps(dict(card, name=SOURCE)))
    shutil.copy(user_folder / "mybox.infer.safetensors", user_folder / f"{SOURCE}.safetensors")
    listed = [p for p in list_predictors() if p["name"] == SOURCE]
    assert len(listed) == 1 and listed[0]["devices"] == ["epyc/torch-t1"]


def test_without_the_folder_the_device_is_unknown(monkeypatch):
    monkeypatch.delenv("PERFSEER_PREDICTORS", raising=False)
    with pytest.raises(PerfseerError, match="mybox"):
        route.plan(["mybox"])
