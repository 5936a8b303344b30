"""The compact graph format: the same graphs as the full file, from one entry per model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from perfseer.data.compact import CompactGraphs, pack
from perfseer.data.dataset import build_dataset, compact_dataset, load_dataset
from perfseer.data.table import write_table
from perfseer.errors import SchemaError
from perfseer.features.pyg import OP_VOCAB

NB201 = "nb201:|nor_conv_3x3~0|+|skip_connect~0|avg_pool_3x3~1|+|none~0|nor_conv_1x1~1|skip_connect~2|"


def row(model, shape, batch, device="a100", latency=1.0):
    return {"model": model, "input_shape": shape, "batch_size": batch, "phase": "infer", "device": device,
            "latency_ms": latency}


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    d = tmp_path_factory.mktemp("full")
    rows = [row("example:resnet18", "3x224x224", b) for b in (1, 3, 64)]
    rows += [row("example:vit_b_16", "3x224x224", b) for b in (2, 16)]
    rows += [row(NB201, "3x32x32", b, dev) for b in (1, 256) for dev in ("a", "b")]
    rows += [row("example:mobilenet_v3_small", "3x160x160", 8)]  # one batch: no slope to learn
    write_table(rows, d / "t.csv")
    build_dataset(d / "t.csv", d / "ds", workers=0)
    return d / "ds"


def close(a, b):
    for k in ("x", "edge_attr", "u"):
        x, y = getattr(a, k).numpy().astype(np.float64), getattr(b, k).numpy().astype(np.float64)
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6, err_msg=k)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.op_type, b.op_type)
    assert a.num_nodes == b.num_nodes


def test_compact_dataset_reproduces_every_graph(full, tmp_path):
    counts = compact_dataset(full, tmp_path / "c")
    a, b = load_dataset(full), load_dataset(tmp_path / "c")
    assert len(a.graphs) == len(b.graphs) == counts["graphs"] == 8
    assert counts["models"] == counts["stored"] == 4 and counts["per_batch"] == 0
    assert counts["distinct_node_rows"] < counts["node_rows"]  # repeated blocks stored once
    for i in range(len(a.graphs)):
        close(a.graphs[i], b.graphs[i])
    assert a.labels.equals(b.labels)
    assert b.manifest["files"]["graphs"] == "graphs.npz"
    assert (tmp_path / "c" / "graphs.npz").stat().st_size * 20 < (full / "graphs.safetensors").stat().st_size


def test_build_compact_directly(full, tmp_path):
    src = json.loads((full / "manifest.json").read_text())["table"]["path"]
    build_dataset(src, tmp_path / "d", workers=0, compact=True)
    a, b = load_dataset(full), load_dataset(tmp_path / "d")
    assert not (tmp_path / "d" / "graphs.safetensors").exists()
    for i in range(len(a.graphs)):
        close(a.graphs[i], b.graphs[i])


def test_features_not_affine_in_batch_are_stored_per_batch(full, tmp_path):
    from perfseer.features.pyg import load_graphs

    graphs, meta = load_graphs(full / "graphs.safetensors")
    graphs[1].x[0, 0] += 5.0  # resnet18 at batch 3: no longer on the line through batches 1 and 64
    counts = pack(graphs, meta, tmp_path / "g.npz", OP_VOCAB)
    assert counts["per_batch"] == 1 and counts["stored"] == 3 + 3
    back = CompactGraphs(tmp_path / "g.npz")
    for i in range(len(graphs)):
        close(graphs[i], back[i])
    with pytest.raises(IndexError):
        back[len(graphs)]


def test_bad_files(tmp_path, full):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(SchemaError, match="not a readable compact graph file"):
        CompactGraphs(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", header=np.array(json.dumps({"format": "something else"})))
    with pytest.raises(SchemaError, match="not a perfseer compact graph file"):
        CompactGraphs(tmp_path / "other.npz")
    with pytest.raises(SchemaError, match="does not exist"):
        load_dataset(tmp_path / "absent")
    (tmp_path / "half").mkdir()
    with pytest.raises(SchemaError, match="build did not finish"):
        load_dataset(tmp_path / "half")
