"""``perfseer data build``: graphs once per model, re-bound per batch, labels joined, failures
reported, the skeleton cache, resumption and worker crashes."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

import perfseer
from helpers import build_or_crash, conv_model, run_cli
from perfseer.data.dataset import (FAILURE_COLUMNS, SkeletonCache, build_dataset, failure_summary, make_tasks,
                                   run_tasks)
from perfseer.data.table import read_table, write_table
from perfseer.errors import ModelLoadError
from perfseer.features.pyg import load_graphs
from perfseer.data import dataset
from perfseer.sources import load as sources_load
from perfseer.sources.load import example_path
from perfseer.graph.onnx_io import read_skeleton

RESNET, MOBILENET = "example:resnet18", "example:mobilenet_v3_small"


def row(model, shape, batch, device="a100", phase="infer", latency=1.0):
    return {"model": model, "input_shape": shape, "batch_size": batch, "phase": phase, "device": device,
            "latency_ms": latency}


@pytest.fixture
def table(tmp_path):
    """Two bundled graphs and a tiny ONNX file (given relative to the table) at several batch sizes
    and devices, and a missing ONNX file."""
    import onnx

    onnx.save(conv_model(with_fc=True), tmp_path / "tiny.onnx")
    rows = [row(RESNET, "3x224x224", 1, latency=1.1), row(RESNET, "3x224x224", 8, latency=2.2),
            row(RESNET, "3x224x224", 8, "v100", latency=3.3), row(RESNET, "3x224x224", 8, "v100", "train", 9.9),
            row(MOBILENET, "3x224x224", 4, latency=0.5), row(MOBILENET, "3x224x224", 2, "v100", latency=0.4),
            row("tiny.onnx", "3x16x16", 32, latency=0.3), row("tiny.onnx", "3x16x16", 1, latency=0.1),
            row("tiny.onnx", "3x16x16", 4, "cpu", latency=0.2), row("missing.onnx", "3x8x8", 1)]
    path = tmp_path / "runs.csv"
    write_table(rows, path)
    return path


def graphs_equal(a, b) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k)) for k in ("x", "edge_index", "edge_attr", "u", "op_type"))


def test_build_joins_labels_and_rebinds_each_batch(table, tmp_path):
    out = tmp_path / "ds"
    report = build_dataset(table, out, workers=0, cache=tmp_path / "cache", split_seed=3)

    graphs, meta = load_graphs(out / "graphs.safetensors")
    expected = [(RESNET, "3x224x224", 1), (RESNET, "3x224x224", 8), (MOBILENET, "3x224x224", 2),
                (MOBILENET, "3x224x224", 4), ("tiny.onnx", "3x16x16", 1), ("tiny.onnx", "3x16x16", 4),
                ("tiny.onnx", "3x16x16", 32)]  # one per distinct (model, shape, batch), table order
    assert [(m["model"], m["input_shape"], m["batch_size"]) for m in meta] == expected
    for g, (model, shape, batch) in zip(graphs, expected):  # re-bound == extracted afresh at that batch
        ref = str(tmp_path / model) if model.endswith(".onnx") else model
        fresh = perfseer.extract(ref, batch=batch, input_shape=tuple(map(int, shape.split("x")))).to_pyg()
        assert graphs_equal(g, fresh), (model, batch)

    labels = read_table(report.labels_path)
    source = read_table(table)
    assert len(labels) == 9 and "missing.onnx" not in set(labels["model"])
    for r in labels.itertuples():  # every row points at the graph of its model, shape and batch
        assert expected[r.graph] == (r.model, r.input_shape, r.batch_size)
    built = source[source["model"] != "missing.onnx"].reset_index(drop=True)
    pd.testing.assert_frame_equal(labels[list(source.columns)], built)
    assert set(labels["split"]) <= {"train", "val", "test"}
    assert labels.groupby("model")["split"].nunique().eq(1).all()
    assert labels.loc[labels["model"] == RESNET, "family"].unique().tolist() == ["resnet"]
    assert labels.loc[labels["model"] == "tiny.onnx", "family_split"].isna().all()

    failures = pd.read_csv(out / "failures.csv")
    assert list(failures.columns) == list(FAILURE_COLUMNS)
    assert failures["model"].tolist() == ["missing.onnx"] and failures["rows"].tolist() == [1]
    assert "does not exist" in failures["reason"][0] and failures["stage"][0] == "export"

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["table"]["sha256"] == hashlib.sha256(table.read_bytes()).hexdigest()
    assert manifest["schema_version"] == perfseer.features.schema.SCHEMA_VERSION
    assert manifest["perfseer_version"] == perfseer.__version__
    assert manifest["splits"]["split"]["seed"] == 3 and manifest["splits"]["split"]["ratios"]["train"] == 2
    c = manifest["counts"]
    assert (c["rows"], c["rows_labelled"], c["graphs"], c["model_shapes_built"], c["model_shapes_failed"]) == \
        (10, 9, 7, 3, 1)
    assert manifest["files"]["labels"] == report.labels_path.name
    assert report.labels_path.suffix == (".parquet" if _has_pyarrow() else ".csv")
    assert not list((tmp_path / "cache").glob("*.onnx"))  # files and examples are read, not cached


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


@pytest.fixture
def fake_zoo(monkeypatch):
    """``timm:fake_resnet`` 'exports' to the bundled resnet18 graph; ``timm:does_not_exist`` fails.
    Returns the list of references exported so far."""
    calls = []
    real = sources_load.load_skeleton

    def load_skeleton(model, input_shape=None, input_dtypes=None):
        if not str(model).startswith("timm:"):
            return real(model, input_shape, input_dtypes)
        calls.append(model)
        if model == "timm:does_not_exist":
            raise ModelLoadError("timm has no model named 'does_not_exist'", "check the name")
        skel = read_skeleton(example_path("resnet18"))
        skel.input_shape_applied = True  # as the exporter reports
        return skel

    monkeypatch.setattr(sources_load, "load_skeleton", load_skeleton)
    monkeypatch.setattr(dataset, "load_skeleton", load_skeleton)  # where the export tasks call it
    return calls


@pytest.fixture
def zoo_table(tmp_path):
    path = tmp_path / "zoo.csv"
    write_table([row("timm:fake_resnet", "3x224x224", 2), row("timm:fake_resnet", "3x224x224", 16, "v100"),
                 row("timm:does_not_exist", "3x224x224", 1), row(RESNET, "3x224x224", 2)], path)
    return path


def test_resume_uses_the_cache_and_remembers_failures(zoo_table, fake_zoo, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "ds"
    first = build_dataset(zoo_table, out, workers=0, cache=cache)
    assert sorted(fake_zoo) == ["timm:does_not_exist", "timm:fake_resnet"]
    assert first.counts["model_shapes_exported"] == 1 and first.counts["model_shapes_read"] == 1
    assert len(list(cache.glob("*.onnx"))) == 1 and len(list(cache.glob("*.error.json"))) == 1
    entry = SkeletonCache(cache).skeleton_path("timm:fake_resnet", "3x224x224")
    mtime = entry.stat().st_mtime_ns
    graphs_1, _ = load_graphs(out / "graphs.safetensors")

    for name in os.listdir(out):  # a fresh output folder, the same cache
        os.remove(out / name)
    fake_zoo.clear()
    second = build_dataset(zoo_table, out, workers=0, cache=cache)
    assert fake_zoo == []  # nothing exported again, not even the failure
    assert entry.stat().st_mtime_ns == mtime
    assert second.counts["model_shapes_cached"] == 1 and second.counts["model_shapes_failed"] == 1
    assert "earlier run" in second.failures["reason"][0]
    graphs_2, meta = load_graphs(out / "graphs.safetensors")
    assert len(graphs_2) == len(graphs_1) == 3
    assert all(graphs_equal(a, b) for a, b in zip(graphs_1, graphs_2))  # the cached skeleton is the export
    fresh = perfseer.extract(RESNET, batch=16).to_pyg()
    assert meta[1]["batch_size"] == 16 and graphs_equal(graphs_2[1], fresh)

    build_dataset(zoo_table, out, workers=0, cache=cache, retry_failed=True)
    assert fake_zoo == ["timm:does_not_exist"]


def test_leftovers_of_a_killed_run_do_not_break_the_next(zoo_table, fake_zoo, tmp_path):
    cache, out = tmp_path / "cache", tmp_path / "ds"
    cache.mkdir()
    store = SkeletonCache(cache)
    key = store.key("timm:fake_resnet", "3x224x224")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = cache / f".{key}.{socket.gethostname()}.{int(gone.stdout)}.0a1b.tmp"  # its writer is gone
    dead.write_bytes(b"\x08\x07partial")
    old = cache / f".{key}.otherhost.1.0a1b.tmp"  # another machine's, two hours old
    old.write_bytes(b"partial")
    os.utime(old, (time.time() - 7200,) * 2)
    live = cache / f".{key}.otherhost.2.0a1b.tmp"  # another machine's, maybe still being written
    live.write_bytes(b"partial")
    store.skeleton_path("timm:fake_resnet", "3x224x224").write_bytes(b"\x0a\xff truncated")  # a bad entry
    (out / "sub").mkdir(parents=True)
    (out / "manifest.json").write_text("{}")
    (out / ".labels.csv.dead.tmp").write_text("partial")

    report = build_dataset(zoo_table, out, workers=0, cache=cache)
    assert not dead.exists() and not old.exists() and live.exists()
    assert fake_zoo.count("timm:fake_resnet") == 1  # the bad entry was replaced by a new export
    assert report.counts["graphs"] == 3
    assert json.loads((out / "manifest.json").read_text())["counts"]["graphs"] == 3
    assert store.get("timm:fake_resnet", "3x224x224") is not None


def test_a_worker_crash_is_recorded_and_the_build_goes_on(tmp_path):
    import onnx

    model = conv_model(with_fc=True)
    for name in ("a.onnx", "crash.onnx", "b.onnx"):
        onnx.save(model, tmp_path / name)
    table = pd.DataFrame([row(n, "3x8x8", b) for n in ("a.onnx", "crash.onnx", "b.onnx") for b in (1, 4)])
    tasks = make_tasks(table, tmp_path, cache_dir=None)
    results = {r.task.model: r for r in run_tasks(tasks, workers=2, fn=build_or_crash, tasks_per_worker=1)}
    assert set(results) == {"a.onnx", "crash.onnx", "b.onnx"}
    assert results["crash.onnx"].failure.stage == "worker" and results["crash.onnx"].failure.error == "WorkerCrash"
    for name in ("a.onnx", "b.onnx"):
        assert results[name].failure is None and [b for b, _ in results[name].graphs] == [1, 4]
    expected = perfseer.extract(str(tmp_path / "a.onnx"), batch=4, input_shape=(3, 8, 8))
    assert np.array_equal(results["b.onnx"].graphs[1][1]["x"], expected.x.astype(np.float32))


def test_a_crash_is_remembered_in_the_cache(zoo_table, fake_zoo, tmp_path, monkeypatch):
    from perfseer.data import dataset

    cache, out, original = tmp_path / "cache", tmp_path / "ds", dataset.run_tasks
    crashing = lambda tasks, workers, **kwargs: (dataset._crashed(t) if t.exported else dataset.build_pair(t)  # noqa: E731
                                       for t in tasks)
    monkeypatch.setattr(dataset, "run_tasks", crashing)
    first = build_dataset(zoo_table, out, workers=2, cache=cache)
    assert set(first.failures["stage"]) == {"worker"} and len(first.failures) == 2
    assert first.counts["graphs"] == 1  # example:resnet18 at batch 2
    monkeypatch.setattr(dataset, "run_tasks", original)
    fake_zoo.clear()
    second = build_dataset(zoo_table, out, workers=0, cache=cache)
    assert fake_zoo == [] and set(second.failures["error"]) == {"WorkerCrash"}
    assert set(second.failures["stage"]) == {"worker"}


def test_failure_summary_groups_by_reason():
    failures = pd.DataFrame([
        ("timm:foo", "3x224x224", "export", "ModelLoadError", "timm has no model named 'foo'; fix: check", 2),
        ("timm:bar", "3x224x224", "export", "ModelLoadError", "timm has no model named 'bar'; fix: check", 1),
        ("a/x.onnx", "3x8x8", "export", "ModelLoadError", "model file /t/a/x.onnx does not exist; fix: path", 1),
    ], columns=list(FAILURE_COLUMNS))
    assert failure_summary(failures) == [
        ("export: timm has no model named '<model>'", 2, 3, "timm:foo"),
        ("export: model file <model> does not exist", 1, 1, "a/x.onnx"),
    ]


def test_cli_build(table, tmp_path, capsys, monkeypatch):
    from perfseer.data import dataset

    monkeypatch.setattr(dataset, "_parquet_available", lambda: False)  # as in CI: no pyarrow
    out = tmp_path / "ds"
    code, stdout, err = run_cli(capsys, "data", "build", str(table), "--out", str(out), "--workers", "0",
                                "--cache", str(tmp_path / "cache"), "--split-seed", "1")
    assert code == 0, err
    assert "failed models by reason" in stdout and "does not exist" in stdout and "missing.onnx" in stdout
    assert "wrote 7 graphs and 9 labelled rows" in stdout
    assert json.loads((out / "manifest.json").read_text())["splits"]["split"]["seed"] == 1
    labels = read_table(out / "labels.csv")
    assert labels["graph"].tolist() == [0, 1, 1, 1, 3, 2, 6, 4, 5]
    assert not (out / "labels.parquet").exists()

    code, stdout, err = run_cli(capsys, "data", "build", str(tmp_path / "nope.csv"), "--out", str(out))
    assert code == 2 and "no table at" in err and err.count("\n") == 1 and stdout == ""
    code, _, err = run_cli(capsys, "data", "build", str(table), "--out", str(out), "--workers", "-1")
    assert code == 2 and "--workers" in err
