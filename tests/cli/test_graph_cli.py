"""``perfseer graph``: JSON summaries, saved feature files, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import perfseer
from helpers import assert_cli_error, conv_model, run_cli

SUMMARY_KEYS = {"num_nodes", "num_edges", "params", "macs", "flops", "memory_access_bytes", "uncovered_ops"}
MACS = 4 * 8 * 8 * 27 + 4 * 10  # conv_model(with_fc=True), one sample


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "net.onnx"
    path.write_bytes(conv_model(with_fc=True).SerializeToString())
    return path


def test_json_file(model_file, tmp_path, capsys):
    out_path = tmp_path / "out.json"
    code, out, err = run_cli(capsys, "graph", str(model_file), "--json", str(out_path))
    assert code == 0, err
    assert "Traceback" not in err
    summary = json.loads(out_path.read_text())
    assert SUMMARY_KEYS <= summary.keys()
    pg = perfseer.extract(model_file)
    assert summary["num_nodes"] == pg.num_nodes == 5
    assert summary["num_edges"] == pg.num_edges == 4
    assert summary["params"] == pg.params
    assert summary["macs"] == pg.macs == MACS
    assert summary["flops"] == pg.flops and summary["memory_access_bytes"] == pg.memory_access_bytes
    assert summary["uncovered_ops"] == {}
    assert not (tmp_path / "out.json.tmp").exists()
    assert "net.onnx" in out  # the human-readable table is still printed


def test_json_stdout(model_file, capsys):
    code, out, err = run_cli(capsys, "graph", str(model_file), "--json", "-", "--batch", "4")
    assert code == 0, err
    summary = json.loads(out)  # stdout is exactly the JSON document
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["batch_size"] == 4 and summary["macs"] == 4 * MACS


def test_uncovered_ops_are_listed(tmp_path, capsys):
    from onnx import helper

    from helpers import make_model

    from perfseer.features.ops import REGISTRY

    # an operator without a cost function of its own (today): reported with its count
    m = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                    helper.make_node("Hardmax", ["r"], ["h"], name="hardmax1"),
                    helper.make_node("Hardmax", ["h"], ["y"], name="hardmax2")], {"x": ("N", 4, 4)}, ["y"])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    code, out, err = run_cli(capsys, "graph", str(path), "--json", "-")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["uncovered_ops"] == perfseer.extract(m).uncovered_ops
    assert summary["uncovered_ops"] == ({} if "Hardmax" in REGISTRY else {"Hardmax": 2})


def test_save_round_trip(model_file, tmp_path, capsys):
    from perfseer.features.pyg import load_graphs

    saved = tmp_path / "g.safetensors"
    code, out, err = run_cli(capsys, "graph", str(model_file), "--batch", "2", "--save", str(saved))
    assert code == 0, err
    assert saved.exists() and not (tmp_path / "g.safetensors.tmp").exists()
    datas, meta = load_graphs(saved)
    assert len(datas) == 1 and meta[0]["batch_size"] == 2 and meta[0]["model"] == str(model_file)
    pg = perfseer.extract(model_file, batch=2)
    expected = pg.to_pyg()
    assert np.array_equal(datas[0].x.numpy(), expected.x.numpy())
    assert np.array_equal(datas[0].x.numpy(), pg.x.astype(np.float32))
    assert np.array_equal(datas[0].edge_index.numpy(), pg.edge_index)
    assert np.array_equal(datas[0].edge_attr.numpy(), expected.edge_attr.numpy())
    assert datas[0].num_nodes == pg.num_nodes


def test_json_and_save_together(model_file, tmp_path, capsys):
    from perfseer.features.pyg import load_graphs

    code, out, err = run_cli(capsys, "graph", str(model_file), "--json", str(tmp_path / "s.json"),
                             "--save", str(tmp_path / "g.safetensors"))
    assert code == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    datas, _ = load_graphs(tmp_path / "g.safetensors")
    assert summary["num_nodes"] == datas[0].num_nodes
    assert summary["num_edges"] == datas[0].edge_index.shape[1]


@pytest.mark.parametrize("flag", ["--out", "--json"])
def test_json_to_unwritable_path(model_file, tmp_path, capsys, flag):
    target = tmp_path / "no_such_dir" / "out.json"
    assert_cli_error(capsys, ["graph", str(model_file), flag, str(target)], str(target), "--out")


def test_json_flag_prints_and_out_writes_the_same_summary(model_file, tmp_path, capsys):
    import json

    from perfseer.cli.main import main

    target = tmp_path / "g.json"
    assert main(["graph", str(model_file), "--json", "--out", str(target)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(target.read_text()) and printed["num_nodes"] > 0


@pytest.mark.parametrize("target", ["no_such_dir/g.safetensors", "graphs"], ids=["missing-dir", "a-directory"])
def test_save_to_unwritable_path(model_file, tmp_path, capsys, target):
    (tmp_path / "graphs").mkdir()
    path = tmp_path / target
    assert_cli_error(capsys, ["graph", str(model_file), "--save", str(path)], "--save")


def test_empty_input_shape_is_an_error(model_file, capsys):
    assert_cli_error(capsys, ["graph", str(model_file), "--input-shape", ""], "input shape")


def test_version_and_help_exit_zero(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0 and out.startswith("perfseer ")
    code, out, _ = run_cli(capsys, "graph", "--help")
    assert code == 0 and "--input-shape" in out


def test_ops_lists_every_registered_operator(capsys):
    import json

    from perfseer.cli.main import main
    from perfseer.features.ops import REGISTRY

    assert main(["ops", "--json"]) == 0
    cov = json.loads(capsys.readouterr().out)
    assert sorted(op for fam in cov.values() for op in fam["ops"]) == sorted(REGISTRY)
    assert "MACs" in cov["conv"]["convention"]
