"""``perfseer graph/predict hf:NAME --seq-len N``, inference and training step."""

from __future__ import annotations

import json
import math

import pytest

from helpers import assert_cli_error, run_cli
from hf_counts import gpt2_counts

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    # GPT-2's shipped values, one layer of width 64: a seconds-long export
    from perfseer.sources.hf import resolve_config

    config, _ = resolve_config("gpt2")
    config.update(n_layer=1, n_embd=64, n_head=4)
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(config))
    return f"hf:{path}"


def test_predict_train_phase_with_seq_len(tiny_gpt2, capsys):
    # The training-step predictor reads the forward graph, as for timm models: --phase train.  A
    # language model is outside the model space of a card trained on images: refused unless forced.
    args = ("predict", tiny_gpt2, "--seq-len", "32", "--batch", "1,4", "--predictor", "rtx3090-amp-nchw-pt112.train",
            "--phase", "train", "--json")
    code, out, err = run_cli(capsys, *args)
    assert code != 0 and "model space" in err and "--force" in err
    code, out, err = run_cli(capsys, *args, "--force")
    assert code == 0, err
    rows = json.loads(out)["predictions"]
    assert [(r["batch_size"], r["phase"], r["metric"]) for r in rows] == [(1, "train", "latency_ms"),
                                                                        (4, "train", "latency_ms")]
    assert all(math.isfinite(r["value"]) and r["value"] > 0 for r in rows)


def test_graph_seq_len_errors(tiny_gpt2, capsys):
    assert_cli_error(capsys, ["graph", tiny_gpt2, "--seq-len", "0"], "--seq-len")
    assert_cli_error(capsys, ["graph", tiny_gpt2, "--seq-len", "4096"], "1024", "n_positions")
    assert_cli_error(capsys, ["graph", "hf:gpt-7", "--seq-len", "8"], "hf:gpt-7", "config.json")


def test_measurement_table_rows_of_hf_models(tiny_gpt2, tmp_path):
    # In a measurement table an hf: row's input_shape is its sequence length; the dataset build
    # exports each (model, seq_len) once and re-binds it to each batch size.
    from perfseer.data.dataset import build_dataset, load_dataset
    from perfseer.data.table import write_table
    from perfseer.features.schema import GLOBAL_FEATURES

    rows = [{"model": tiny_gpt2, "input_shape": "16", "batch_size": b, "phase": "train", "device": "gpu0",
             "latency_ms": 1.0 + b} for b in (1, 2)]
    write_table(rows, tmp_path / "t.csv")
    report = build_dataset(tmp_path / "t.csv", tmp_path / "ds", workers=0, cache=tmp_path / "cache")
    assert len(report.failures) == 0
    # a local config.json can change under the same path: its export is not cached
    assert not list((tmp_path / "cache").glob("**/*.onnx"))
    ds = load_dataset(tmp_path / "ds")
    assert sorted(ds.labels["batch_size"]) == [1, 2]
    for _, row in ds.labels.iterrows():
        b = int(row["batch_size"])
        u = ds.graphs[int(row["graph"])].u.numpy().ravel()
        assert u[GLOBAL_FEATURES.index("batch_size")] == b
        # GPT-2 FLOPs by hand (tests/graph/test_hf.py): d 64, 1 layer, 4 heads, V 50257, 16 tokens
        assert u[GLOBAL_FEATURES.index("flops_total")] == pytest.approx(gpt2_counts(64, 1, 4, 50257, 1024, 16, b)[2],
                                                                          rel=1e-6)
