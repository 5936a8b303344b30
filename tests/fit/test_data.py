"""Selecting examples: device, phase, metrics, missing values, splits, and the errors."""

import pandas as pd
import pytest
from train_helpers import flops_dataset

from perfseer.errors import PerfseerError
from perfseer.fit.data import select

NAN = float("nan")


class Dataset:
    def __init__(self):
        self.graphs = flops_dataset(4)
        rows = [  # graph, device, phase, latency, memory, split, family_split
            (0, "gpu", "infer", 1.0, 10.0, "train", "train"),
            (0, "gpu", "train", 3.0, 30.0, "train", "train"),
            (1, "gpu", "infer", 2.0, NAN, "train", NAN),
            (2, "gpu", "infer", 4.0, 40.0, "val", "test"),
            (3, "gpu", "infer", NAN, 50.0, "test", "val"),
            (3, "cpu", "infer", 9.0, NAN, "test", "val"),
            (1, "gpu", "infer", 0.0, 5.0, "train", NAN),
        ]
        self.labels = pd.DataFrame(rows, columns=["graph", "device", "phase", "latency_ms", "memory_mb", "split",
                                                  "family_split"])
        self.labels["util_pct"] = NAN
        self.labels["energy_j"] = NAN


def test_single_target_selection():
    sel = select(Dataset(), "latency_ms", devices="gpu", phase="infer")
    assert [len(sel.train), len(sel.val), len(sel.test)] == [2, 1, 0]
    assert sel.train[0].y.shape == (1, 1) and sel.train[0].y.item() == 1.0
    assert sel.labels.loc[int(sel.val[0].row), "latency_ms"] == 4.0
    assert sel.dropped["missing latency_ms"] == 1 and sel.dropped["non-positive latency_ms"] == 1
    assert "latency_ms on gpu (infer)" in sel.describe()


def test_multi_target_keeps_rows_with_every_target():
    sel = select(Dataset(), ["latency_ms", "memory_mb"], devices="gpu", phase="infer")
    assert sel.targets == ["latency_ms", "memory_mb"]
    ys = sorted(tuple(d.y[0].tolist()) for d in sel.train + sel.val + sel.test)
    assert ys == [(1.0, 10.0), (4.0, 40.0)]
    assert sel.dropped["missing latency_ms"] == 1 and sel.dropped["missing memory_mb"] == 1


def test_family_split_and_several_devices():
    sel = select(Dataset(), "latency_ms", devices=["gpu", "cpu"], phase="infer", split_column="family_split")
    assert [len(sel.train), len(sel.val), len(sel.test)] == [1, 1, 1]
    assert sel.dropped["no family_split"] == 1


def test_empty_or_unknown_selections_say_what_exists():
    ds = Dataset()
    with pytest.raises(PerfseerError, match="choose from cpu, gpu"):
        select(ds, "latency_ms", devices="tpu", phase="infer")
    with pytest.raises(PerfseerError, match="2 devices"):
        select(ds, "latency_ms", phase="infer")
    with pytest.raises(PerfseerError, match="infer, train; choose one"):
        select(ds, "latency_ms", devices="gpu")
    with pytest.raises(PerfseerError, match="phases measured there: infer"):
        select(ds, "latency_ms", devices="cpu", phase="train")
    with pytest.raises(PerfseerError, match="measurements of: latency_ms, memory_mb"):
        select(ds, "latency", devices="gpu", phase="infer")
    with pytest.raises(PerfseerError, match="has: cpu infer: latency_ms; gpu infer: latency_ms,memory_mb"):
        select(ds, "memory_mb", devices="cpu", phase="infer")
