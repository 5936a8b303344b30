"""The measurement table: cleaning, bad rows named by row number, CSV/Parquet round trips."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from helpers import assert_user_error
from perfseer.data.table import COLUMNS, read_table, validate, write_table
from perfseer.errors import MissingDependencyError, TableError

HEADER = "model,input_shape,batch_size,phase,device,latency_ms,memory_mb,precision,notes"
GOOD = [
    "timm:resnet50,3x224x224,32,infer,rtx3090/amp-nchw-pt240,41.5,,amp,first",
    "nets/net.onnx,3x32x32,1,train,i9_10940x/fp32,2.25,120.5,,",
    "nb201:|nor_conv_3x3~0|+|none~0|skip_connect~1|+|none~0|none~1|avg_pool_3x3~2|,3x32x32,256,infer,titan_rtx,7.0,,,",
]


def rows() -> list[dict]:
    return [
        {"model": "timm:resnet50", "input_shape": "3x224x224", "batch_size": 32, "phase": "infer",
         "device": "rtx3090/amp-nchw-pt240", "latency_ms": 41.5, "precision": "amp", "notes": "a"},
        {"model": "ofa:ks=3,5;e=3,4;d=2;r=160", "input_shape": "3x160x160", "batch_size": 64, "phase": "train",
         "device": "v100", "latency_ms": 12.345678901234567, "energy_j": 3.5, "notes": "b"},
    ]


def write_csv(tmp_path, lines, header=HEADER, name="table.csv"):
    path = tmp_path / name
    path.write_text("\n".join([header, *lines]) + "\n")
    return path


def test_csv_is_read_and_cleaned(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text(HEADER + '\n timm:resnet50 ," 3, 224, 224 ",8.0, INFER ,rtx3090/amp, 41.5 ,,amp,x\n')
    df = read_table(path)
    assert list(df.columns) == [*COLUMNS, "notes"]
    row = df.iloc[0]
    assert row["model"] == "timm:resnet50" and row["input_shape"] == "3x224x224"
    assert row["batch_size"] == 8 and df["batch_size"].dtype == np.int64
    assert row["phase"] == "infer" and row["device"] == "rtx3090/amp"
    assert row["latency_ms"] == 41.5 and np.isnan(row["memory_mb"]) and np.isnan(row["util_pct"])
    assert pd.isna(row["source"]) and row["precision"] == "amp"


def test_good_rows_pass(tmp_path):
    df = read_table(write_csv(tmp_path, GOOD))
    assert len(df) == 3
    assert df["model"].tolist()[1] == "nets/net.onnx"
    assert df["memory_mb"].tolist()[1] == 120.5
    assert df["notes"].tolist()[0] == "first"  # unknown columns are kept


def test_csv_round_trip(tmp_path):
    path = tmp_path / "t.csv"
    written = write_table(rows(), path)
    back = read_table(path)
    pd.testing.assert_frame_equal(back, written)
    assert back["latency_ms"].tolist()[1] == 12.345678901234567  # floats survive exactly
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]  # no temporary file left


def test_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "t.parquet"
    written = write_table(pd.DataFrame(rows()), path)
    back = read_table(path)
    pd.testing.assert_frame_equal(back, written)
    assert back["batch_size"].dtype == np.int64


def test_parquet_without_pyarrow(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    for action in (lambda: write_table(rows(), tmp_path / "t.parquet"), lambda: read_table(tmp_path / "t.pq")):
        with pytest.raises(MissingDependencyError) as e:
            action()
        assert_user_error(str(e.value), "pyarrow", "pip install 'perfseer[parquet]'")


BAD_CELLS = [
    # (column, value, words the error must contain)
    ("model", "", "model is empty"),
    ("model", "hub:resnet50", "unknown reference scheme 'hub'"),
    ("model", "timm:", "names no model"),
    ("model", "resnet50", "neither a model reference nor an .onnx path"),
    ("input_shape", "", "input_shape is empty"),
    ("input_shape", "3x0x224", "input_shape '3x0x224' is not a shape"),
    ("input_shape", "big", "input_shape 'big' is not a shape"),
    ("batch_size", "0", "batch_size '0' is not a positive integer"),
    ("batch_size", "-4", "batch_size '-4' is not a positive integer"),
    ("batch_size", "1.5", "batch_size '1.5' is not a positive integer"),
    ("batch_size", "many", "batch_size 'many' is not a positive integer"),
    ("batch_size", "", "batch_size is empty"),
    ("phase", "inference", "phase 'inference' is neither infer nor train"),
    ("phase", "", "phase is empty"),
    ("device", "", "device is empty"),
    ("latency_ms", "fast", "latency_ms 'fast' is not a number"),
    ("latency_ms", "NA", "latency_ms 'NA' is not a number"),
    ("latency_ms", "inf", "latency_ms 'inf' is not a number"),
    ("latency_ms", "0", "latency_ms '0' is not > 0"),
    ("memory_mb", "-5", "memory_mb '-5' is not >= 0"),
]


@pytest.mark.parametrize("column,value,words", BAD_CELLS, ids=[f"{c}={v!r}" for c, v, _ in BAD_CELLS])
def test_bad_cell_names_its_row(tmp_path, column, value, words):
    cells = dict(zip(HEADER.split(","), GOOD[0].split(",")))
    cells[column] = value
    path = write_csv(tmp_path, [GOOD[1], GOOD[2], ",".join(cells.values())])
    with pytest.raises(TableError) as e:
        read_table(path)
    message = str(e.value)
    assert_user_error(message, str(path), "row 3: ", words)
    assert "more row" not in message


def test_util_pct_above_100(tmp_path):
    path = write_csv(tmp_path, ["timm:a,3x8x8,1,infer,cpu,,120"],
                     header="model,input_shape,batch_size,phase,device,latency_ms,util_pct")
    with pytest.raises(TableError, match=r"row 1: util_pct '120' is not between 0 and 100; fix: "):
        read_table(path)


def test_row_without_any_metric(tmp_path):
    path = write_csv(tmp_path, [GOOD[0], "timm:a,3x8x8,1,infer,cpu,,,,"])
    with pytest.raises(TableError, match=r"row 2: no metric value \(latency_ms, memory_mb all empty\)"):
        read_table(path)


def test_first_bad_row_and_count(tmp_path):
    bad_batch = GOOD[0].replace(",32,", ",0,")
    bad_phase = GOOD[0].replace(",infer,", ",eval,")
    path = write_csv(tmp_path, [GOOD[0], bad_phase, GOOD[1], bad_batch, bad_batch])
    with pytest.raises(TableError) as e:
        read_table(path)
    assert str(e.value).startswith(
        f"{path}: row 2: phase 'eval' is neither infer nor train (2 more rows with problems); fix: ")


def test_validate_typed_frame():
    # a DataFrame with numeric columns (as from Parquet or code): positions count from 1
    df = pd.DataFrame(rows(), index=[10, 20])
    df.loc[20, "batch_size"] = 0
    with pytest.raises(TableError, match=r"^row 2: batch_size '0' is not a positive integer"):
        validate(df)


@pytest.mark.parametrize("header,words", [
    ("model,input_shape,batch_size,phase,latency_ms", ["missing column device"]),
    ("model,batch_size,phase,latency_ms", ["missing columns input_shape, device"]),
    ("model,input_shape,batch_size,phase,device,latency", ["no metric column", "rename 'latency' to 'latency_ms'"]),
    ("model,input_shape,batch_size,phase,device,seconds", ["no metric column", "latency_ms, memory_mb"]),
    ("model,input_shape,batch_size,phase,device,latency_ms,model", ["column 'model' appears more than once"]),
])
def test_bad_header(tmp_path, header, words):
    path = write_csv(tmp_path, [], header=header)
    with pytest.raises(TableError) as e:
        read_table(path)
    assert_user_error(str(e.value), *words)


def test_header_only_table_is_empty(tmp_path):
    df = read_table(write_csv(tmp_path, []))
    assert len(df) == 0 and list(df.columns) == [*COLUMNS, "notes"]


def test_model_paths(tmp_path):
    lines = [GOOD[0].replace("timm:resnet50", m) for m in ("C:\\models\\net.ONNX", "/abs/net.onnx", "example:resnet18")]
    assert read_table(write_csv(tmp_path, lines))["model"].tolist()[0] == "C:\\models\\net.ONNX"


@pytest.mark.parametrize("name,words", [("t.txt", ["cannot tell the format", ".csv or .parquet"]),
                                        ("missing.csv", ["no table at"])])
def test_bad_paths(tmp_path, name, words):
    with pytest.raises(TableError) as e:
        read_table(tmp_path / name)
    assert_user_error(str(e.value), *words)


def test_unreadable_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"")
    with pytest.raises(TableError, match="cannot read"):
        read_table(path)


def test_write_failures_keep_the_old_table(tmp_path, monkeypatch):
    path = tmp_path / "t.csv"
    write_table(rows(), path)
    before = path.read_bytes()
    bad = rows()
    bad[1]["phase"] = "both"
    with pytest.raises(TableError, match="row 2: phase 'both'"):
        write_table(bad, path)

    def broken(self, target, *args, **kwargs):
        with open(target, "w") as f:
            f.write("partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken)
    with pytest.raises(TableError) as e:
        write_table(rows(), path)
    assert_user_error(str(e.value), "cannot write", "No space left on device")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_write_into_missing_folder(tmp_path):
    with pytest.raises(TableError) as e:
        write_table(rows(), tmp_path / "nope" / "t.csv")
    assert_user_error(str(e.value), "cannot write")


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_iter_table_reads_in_chunks_what_read_table_reads_whole(tmp_path, suffix):
    from perfseer.data.table import iter_table

    if suffix == ".parquet" and importlib.util.find_spec("pyarrow") is None:
        pytest.skip("pyarrow")
    many = [dict(r, batch_size=b) for b in range(1, 26) for r in rows()]
    path = tmp_path / f"t{suffix}"
    write_table(many, path)
    chunks = list(iter_table(path, chunk_rows=7))
    assert [len(c) for c in chunks][:-1] == [7] * (len(chunks) - 1)
    whole = pd.concat(chunks, ignore_index=True)
    pd.testing.assert_frame_equal(whole, read_table(path))


def test_iter_table_names_a_bad_row_by_its_place_in_the_table(tmp_path):
    from perfseer.data.table import iter_table

    lines = ["model,input_shape,batch_size,phase,device,latency_ms"]
    lines += [f"timm:resnet50,3x224x224,{b},infer,gpu,1.0" for b in range(1, 21)] + ["timm:resnet50,3x224x224,0,infer,gpu,1.0"]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(TableError, match="row 21: batch_size '0'"):
        list(iter_table(tmp_path / "t.csv", chunk_rows=6))
