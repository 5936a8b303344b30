"""``perfseer collect``: one-line errors for bad arguments, and run / status / export end to end
with a fake backend."""

from __future__ import annotations

import pytest

from helpers import assert_cli_error, run_cli
from perfseer.data.table import read_table

FAKE = "fake_backends:FakeBackend"


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "runs.sqlite")


@pytest.mark.parametrize("args, names", [
    (["--space", "2", "--batches", "1,0"], ["--batches", "'0'"]),
    (["--space", "2", "--batches", "a"], ["--batches", "'a'"]),
    (["--space", "2", "--phases", "infer,fit"], ["--phases", "'fit'"]),
    (["--space", "2", "--precisions", "int8"], ["--precisions", "'int8'"]),
    (["--space", "2", "--optimizer", "lion"], ["--optimizer", "'lion'"]),
    (["--space", "2", "--input-shape", "3x64"], ["3x64", "3xHxW"]),
    (["--space", "2", "--input-shape", "3x0x64"], ["input shape", "3x0x64"]),
    (["--space", "-1"], ["--space"]),
    (["--space", "2", "--threads", "0"], ["--threads"]),
    (["--space", "2", "--time-cap", "soon"], ["--time-cap"]),
    (["--space", "2", "--min-reps", "50", "--max-reps", "10"], ["max_reps 10", "min_reps 50"]),
    (["--space", "2", "--backend", "tpu"], ["unknown backend 'tpu'", "torch-cpu"]),
    (["--space", "2", "--backend", "ort-cpu"], ["ort-cpu", "train"]),
    (["--space", "2", "--precisions", "amp_fp16"], ["torch-cpu", "amp_fp16"]),
    (["--model", "foo:bar"], ["foo:bar", "scheme"]),
    (["--model", "space:{oops"], ["not JSON"]),
    (["--model", "resnet50"], ["resnet50", "neither"]),
    (["--model", "missing.onnx", "--backend", "ort-cpu", "--phases", "infer"], ["missing.onnx"]),
    (["--models", "nope.txt"], ["nope.txt"]),
    ([], ["nothing to measure"]),
])
def test_bad_arguments_are_one_line_errors(capsys, db, args, names):
    assert_cli_error(capsys, ["collect", "run", "--db", db, *args], *names)


def test_bad_store_paths(capsys, tmp_path):
    assert_cli_error(capsys, ["collect", "run", "--db", str(tmp_path / "no" / "r.sqlite"), "--space", "1"], "--db")
    assert_cli_error(capsys, ["collect", "export", "--db", str(tmp_path / "r.sqlite"), "--out", "t.csv"],
                     "no collection store")
    assert_cli_error(capsys, ["collect", "status", "--db", str(tmp_path / "r.sqlite")], "no collection store")
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database at all" * 100)
    assert_cli_error(capsys, ["collect", "status", "--db", str(junk)], "cannot open")


def test_run_status_and_export(capsys, db, tmp_path):
    argv = ["collect", "run", "--db", db, "--model", "example:ok", "--model", "example:crash", "--model",
            "example:oom", "--input-shape", "3x8x8", "--batches", "1,4,8", "--phases", "infer,train",
            "--backend", FAKE, "--quiet"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "measured 18 jobs: 6 crash, 8 ok, 4 oom" in out  # oom: batch 4 fails, batch 8 is inferred
    code, out, err = run_cli(capsys, "collect", "status", "--db", db)
    assert code == 0 and "fakecpu/fake" in out and "crash" in out and "SIGSEGV" in out
    table, failures = tmp_path / "t.csv", tmp_path / "f.csv"
    code, out, err = run_cli(capsys, "collect", "export", "--db", db, "--out", str(table), "--failures", str(failures))
    assert code == 0, err
    assert "wrote 8 rows" in out and "6 crash" in out and "4 oom" in out
    t = read_table(table)
    assert set(t["model"]) == {"example:ok", "example:oom"} and (t["device"] == "fakecpu/fake").all()
    assert t.loc[t["phase"] == "train", "optimizer"].eq("sgd").all()
    # resuming measures only what failed, when asked to
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "up to date" in out
    code, out, _ = run_cli(capsys, *argv, "--retry-failed", "--limit", "2")
    assert code == 0 and "measured 2 jobs" in out
