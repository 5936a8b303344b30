"""``perfseer graph/predict hf:NAME --seq-len N``, inference and training step."""

from __future__ import annotations

import json
import math

import pytest

from helpers import assert_cli_error, run_cli

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    # GPT-2's shipped values, one layer of width 64: a seconds-long export
    from perfseer.graph.hf import resolve_config

    config, _ = resolve_config("gpt2")
    config.update(n_layer=1, n_embd=64, n_head=4)
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(config))
    return f"hf:{path}"


def test_predict_train_phase_with_seq_len(tiny_gpt2, capsys):
    # The training-step predictor reads the forward graph, as for timm models: --phase train.
    code, out, err = run_cli(capsys, "predict", tiny_gpt2, "--seq-len", "32", "--batch", "1,4",
                             "--predictor", "rtx3090-amp-nchw-pt112.train", "--phase", "train", "--json")
    assert code == 0, err
    rows = json.loads(out)["predictions"]
    assert [(r["batch_size"], r["phase"], r["metric"]) for r in rows] == [(1, "train", "latency_ms"),
                                                                        (4, "train", "latency_ms")]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)


def test_graph_seq_len_errors(tiny_gpt2, capsys):
    assert_cli_error(capsys, ["graph", tiny_gpt2, "--seq-len", "0"], "--seq-len")
    assert_cli_error(capsys, ["graph", tiny_gpt2, "--seq-len", "4096"], "1024", "n_positions")
    assert_cli_error(capsys, ["graph", "hf:gpt-7", "--seq-len", "8"], "hf:gpt-7", "config.json")
