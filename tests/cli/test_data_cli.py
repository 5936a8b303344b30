"""``perfseer data import``: tables written, the report printed, exit codes."""

from __future__ import annotations

import importlib.util

import pytest

from helpers import assert_cli_error, run_cli
from perfseer.data.table import read_table

TIMM_FILE = "benchmark-infer-amp-nchw-pt291-cu130-5090-dynamo.csv"


@pytest.fixture
def timm_dir(tmp_path):
    folder = tmp_path / "timm"
    folder.mkdir()
    (folder / TIMM_FILE).write_text("model,infer_img_size,infer_step_time,infer_batch_size\n"
                                    "resnet50,224,50.0,256\nresnet18,224,,256\nvit_tiny,224,0.01,256\n")
    return folder


@pytest.fixture
def help_dir(tmp_path):
    folder = tmp_path / "help"
    folder.mkdir()
    (folder / "nasbench201_latency.csv").write_text(
        "arch_index,arch_str,titan_rtx_1,titan_rtx_32,pixel3\n"
        "0,|nor_conv_3x3~0|+|none~0|none~1|+|none~0|none~1|none~2|,5.5,6.5,0.001\n")
    return folder


def test_import_timm(timm_dir, tmp_path, capsys):
    out = tmp_path / "timm.csv"
    code, stdout, err = run_cli(capsys, "data", "import", "timm-benchmark", str(timm_dir), "--out", str(out))
    assert code == 0, err
    assert "rtx5090/amp-nchw-pt291-dynamo" in stdout
    assert "missing latency" in stdout and "latency <= 0.05 ms" in stdout
    assert "wrote 1 row to" in stdout
    table = read_table(out)
    assert table["model"].tolist() == ["timm:resnet50@reparam"] and table["latency_ms"].tolist() == [50.0]


def test_import_help_nas(help_dir, tmp_path, capsys):
    out = tmp_path / "help.csv"
    code, stdout, err = run_cli(capsys, "data", "import", "help-nas", str(help_dir), "--out", str(out))
    assert code == 0, err
    assert "titan_rtx" in stdout and "1, 32" in stdout and "pixel3" in stdout
    assert sorted(read_table(out)["batch_size"]) == [1, 32]


def test_import_parquet(help_dir, tmp_path, capsys):
    pytest.importorskip("pyarrow")
    out = tmp_path / "help.parquet"
    code, _, err = run_cli(capsys, "data", "import", "help-nas", str(help_dir), "--out", str(out))
    assert code == 0, err
    assert len(read_table(out)) == 2


def test_parquet_without_pyarrow(help_dir, tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    assert_cli_error(capsys, ["data", "import", "help-nas", str(help_dir), "--out", str(tmp_path / "t.parquet")],
                     "pyarrow", "perfseer[parquet]")
    assert not (tmp_path / "t.parquet").exists()


def test_user_errors(timm_dir, help_dir, tmp_path, capsys):
    out = str(tmp_path / "t.csv")
    assert_cli_error(capsys, ["data", "import", "timm-benchmark", str(tmp_path / "nope"), "--out", out], "no folder")
    assert_cli_error(capsys, ["data", "import", "timm-benchmark", str(help_dir), "--out", out], "benchmark-*.csv")
    assert_cli_error(capsys, ["data", "import", "help-nas", str(timm_dir), "--out", out], "no HELP latency file")
    assert_cli_error(capsys, ["data", "import", "help-nas", str(help_dir), "--out", str(tmp_path / "t.xlsx")],
                     ".csv or .parquet")
    assert_cli_error(capsys, ["data", "import", "help-nas", str(help_dir), "--out", str(tmp_path / "no" / "t.csv")],
                     "cannot write")
    (timm_dir / "benchmark-infer-amp.csv").write_text("model\n")
    assert_cli_error(capsys, ["data", "import", "timm-benchmark", str(timm_dir), "--out", out],
                     "benchmark-infer-amp.csv")
    assert not (tmp_path / "t.csv").exists()


def test_sources_are_the_importers():
    from perfseer.cli.data import SOURCES
    from perfseer.data.importers import IMPORTERS

    assert sorted(SOURCES) == sorted(IMPORTERS)


@pytest.mark.parametrize("argv", [["data"], ["data", "import"], ["data", "import", "mlperf", ".", "--out", "t.csv"],
                                  ["data", "import", "help-nas", "."]])
def test_usage_errors(capsys, argv):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and "usage:" in err and "Traceback" not in err
