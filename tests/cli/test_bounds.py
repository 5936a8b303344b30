"""Command-line values are bounded and checked before any work; outputs are valid and atomic."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from helpers import assert_cli_error, run_cli
from perfseer.cli.bounds import dumps
from perfseer.runtime.predictor import BUNDLED, PredictorError, load_predictor


def _usage_error(capsys, *argv) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and "Traceback" not in err, err
    return err


def test_train_name_cannot_leave_out_and_is_checked_before_training(capsys, tmp_path):
    for name in ("../evil", "/etc/passwd", "a/b", "..", ".hidden", "x" * 200):
        msg = assert_cli_error(capsys, ["train", "--data", str(tmp_path / "no-such-dataset"), "--out",
                                        str(tmp_path / "out"), "--name", name], "--name")
        assert "not a plain file name" in msg
    assert not (tmp_path / "out").exists() and not (tmp_path.parent / "evil.json").exists()


@pytest.mark.parametrize("argv, text", [
    (["train", "--data", "nb201", "--out", "o", "--hidden", "100000"], "from 1 to 4096"),
    (["train", "--data", "nb201", "--out", "o", "--batch-size", "10000000"], "from 1 to 4096"),
    (["predict", "example:resnet18", "--predictor", "nb201-gpus.infer", "--batch", "1,99999999"], "from 1 to 65536"),
])
def test_numbers_have_upper_bounds(capsys, argv, text):
    assert text in _usage_error(capsys, *argv)


def test_graph_batch_and_input_shape_bounds(capsys):
    assert_cli_error(capsys, ["graph", "example:resnet18", "--batch", str(2 ** 40)], "--batch")
    msg = assert_cli_error(capsys, ["graph", "example:resnet18", "--input-shape", "3x100000000x224"], "--input-shape")
    assert "too large" in msg
    assert_cli_error(capsys, ["graph", "example:resnet18", "--dim", f"seq={2 ** 40}"], "--dim")


def test_collect_space_batches_and_backend_are_checked_up_front(capsys, tmp_path):
    db = str(tmp_path / "runs.sqlite")
    msg = assert_cli_error(capsys, ["collect", "run", "--db", db, "--space", str(10 ** 9)], "--space")
    assert "above the limit" in msg
    assert_cli_error(capsys, ["collect", "run", "--db", db, "--space", "2", "--batches", f"1,{2 ** 30}"], "--batches")
    msg = assert_cli_error(capsys, ["collect", "run", "--db", db, "--space", "2", "--backend", "os.path:join;rm"],
                           "backend")
    assert "unknown backend" in msg
    msg = assert_cli_error(capsys, ["collect", "run", "--db", db, "--space", "2", "--backend",
                                    "no_such_module_xyz.sub:Backend"], "no_such_module_xyz")
    assert "no module 'no_such_module_xyz'" in msg
    assert not Path(db).exists()  # nothing was started


def test_json_output_has_no_bare_nan():
    text = dumps({"a": math.nan, "b": [1.0, math.inf, -math.inf], "c": "x"})
    assert json.loads(text) == {"a": None, "b": [1.0, None, None], "c": "x"}
    assert "NaN" not in text and "Infinity" not in text


@pytest.mark.parametrize("edit, text", [
    (lambda c: c.update(format_version="2"), "format_version '2'"),
    (lambda c: c["model"].update(kind="pickle"), "model kind 'pickle'"),
    (lambda c: c["scaling"]["features"].update(mean=[math.nan]), "non-finite"),
])
def test_corrupt_cards_are_refused(tmp_path, edit, text):
    name = "nb201-gpus.infer"
    for suffix in (".json", ".safetensors"):
        shutil.copy(BUNDLED / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    card_path = tmp_path / f"{name}.json"
    card = json.loads(card_path.read_text())
    edit(card)
    card_path.write_text(json.dumps(card))
    with pytest.raises(PredictorError, match=text):
        load_predictor(card_path)


def test_evaluate_with_nothing_scorable_says_so(capsys, tmp_path):
    table = tmp_path / "m.csv"
    table.write_text("model,input_shape,batch_size,phase,device,latency_ms\n"
                     "example:resnet18,3x224x224,1,infer,some_other_gpu,3.0\n")
    msg = assert_cli_error(capsys, ["evaluate", "--predictor", "nb201-gpus.infer", "--measurements", str(table)],
                           "nothing")
    assert "could be scored" in msg
