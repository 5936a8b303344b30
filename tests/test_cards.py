"""The one card reader (perfseer.cards): each bad file gets its own clear error, of the class of the
card's kind, through each of the three loaders that use it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from perfseer.cards import CardFormat, read_card, read_weights, weights_path
from perfseer.errors import PerfseerError
from perfseer.features import schema


class ToyError(PerfseerError):
    pass


FMT = CardFormat("perfseer.toy", 2, "toy", writer="toy.save", remedy="write it again", schema=True, error=ToyError)


def card(tmp_path, name="t", **fields):
    body = {"format": "perfseer.toy", "format_version": 2, "schema_version": schema.SCHEMA_VERSION, **fields}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(body))
    return path


def test_a_good_card_and_its_weights(tmp_path):
    path = card(tmp_path, "x.infer")
    save_file({"a": torch.ones(2), "b": torch.zeros(1)}, str(weights_path(path)))
    assert weights_path(path).name == "x.infer.safetensors"
    assert read_card(path, FMT)["format"] == "perfseer.toy"
    assert set(read_weights(weights_path(path), FMT, required=["a", "b"])) == {"a", "b"}


@pytest.mark.parametrize("write, words", [
    (None, "no toy card at"),
    ("{not json", "is unreadable"),
    ("[1, 2]", "is not a toy card (format 'list'"),
    ({"format": "perfseer.other"}, "is not a toy card (format 'perfseer.other', expected 'perfseer.toy')"),
    ({"format_version": "two"}, "format_version 'two', not a version number"),
    ({"format_version": 3}, "is toy format 3, this perfseer reads up to 2"),
    ({"schema_version": "0.1"}, "trained on feature schema 0.1"),
])
def test_each_bad_card_names_its_problem(tmp_path, write, words):
    path = tmp_path / "bad.json"
    if isinstance(write, str):
        path.write_text(write)
    elif isinstance(write, dict):
        path = card(tmp_path, "bad", **write)
    with pytest.raises(ToyError, match=words.replace("(", r"\(").replace(")", r"\)")) as e:
        read_card(path, FMT)
    assert e.value.fix  # every error says what to do


def test_each_bad_weights_file_names_its_problem(tmp_path):
    path = card(tmp_path)
    with pytest.raises(ToyError, match="toy weights .* are missing") as e:
        read_weights(weights_path(path), FMT)
    assert "t.safetensors next to its .json card" in e.value.fix
    save_file({"a": torch.ones(64)}, str(weights_path(path)))
    with pytest.raises(ToyError, match=r"lack the tensor\(s\) b, c that its card needs"):
        read_weights(weights_path(path), FMT, required=["a", "b", "c"])
    blob = weights_path(path).read_bytes()
    for broken in (blob[:40], b"not safetensors at all"):
        weights_path(path).write_bytes(broken)
        with pytest.raises(ToyError, match="are corrupt") as e:
            read_weights(weights_path(path), FMT)
        assert e.value.fix == "write it again"


def test_the_three_loaders_share_the_reader(tmp_path):
    from perfseer.runtime.predictor import PredictorError, load_predictor
    from perfseer.specmodel.net import KernelModel, SpecModelError
    from perfseer.fit.pretrain import init_from_pretrained, pretrained_config

    for fmt, loader, error in (("perfseer.predictor", load_predictor, PredictorError),
                               ("perfseer.specmodel", KernelModel.load, SpecModelError),
                               ("perfseer.pretrained-encoder", pretrained_config, PerfseerError)):
        path = tmp_path / f"{fmt}.json"
        path.write_text(json.dumps({"format": fmt, "format_version": 99}))
        with pytest.raises(error, match="this perfseer reads up to 1"):
            loader(path)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"format": "perfseer.specmodel", "format_version": 1, "config": {},
                                "families": ["gemm"]}))
    save_file({"gemm.x_mean": torch.zeros(3)}, str(weights_path(spec)))
    with pytest.raises(SpecModelError, match="lack the tensor"):
        KernelModel.load(spec)
    enc = tmp_path / "enc.json"
    enc.write_text(json.dumps({"format": "perfseer.pretrained-encoder", "format_version": 1,
                               "schema_version": schema.SCHEMA_VERSION}))
    weights_path(enc).write_bytes(b"\x00" * 16)
    with pytest.raises(PerfseerError, match="pre-trained encoder weights .* are corrupt"):
        init_from_pretrained(None, enc)


def test_a_card_nested_too_deep_or_with_sections_of_the_wrong_type_is_refused(tmp_path):
    import json as _json

    from perfseer.runtime.predictor import PredictorError, load_predictor

    src = Path(__file__).resolve().parents[1] / "src" / "perfseer" / "predictors" / "nb201-gpus.infer.json"
    card = _json.loads(src.read_text())
    deep = tmp_path / "deep.json"
    deep.write_text(_json.dumps(dict(card, extra="x")).replace('"x"', "[" * 100_000 + "]" * 100_000))
    with pytest.raises(PredictorError, match="nested"):
        load_predictor(deep)
    for section, value in (("domain", 3), ("targets", [{"metric": 1}]), ("model", "seernet")):
        bad = tmp_path / f"bad_{section}.json"
        bad.write_text(_json.dumps(dict(card, **{section: value})))
        with pytest.raises(PredictorError, match=section if section != "model" else "model"):
            load_predictor(bad)
