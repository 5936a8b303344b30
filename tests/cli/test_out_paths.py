"""Commands that write a file or folder by name check it before any work (issue 38): a table goes
to a plain file name in a writable folder, a dataset to a folder; never a device, a kernel file
system, a path under a file or an existing folder taken for a file."""

import pytest

from perfseer.cli.bounds import check_out_dir, check_out_file
from perfseer.cli.main import main
from perfseer.errors import PerfseerError


def test_a_table_path_must_be_a_writable_file_name(tmp_path):
    assert check_out_file(tmp_path / "t.csv", suffixes=(".csv",)) == tmp_path / "t.csv"
    (tmp_path / "file").write_text("x")
    for bad, why in ((tmp_path, "is a folder"), (tmp_path / "file" / "t.csv", "not a folder"),
                     ("/proc/t.csv", "kernel file system"), (tmp_path / "t.txt", "must end in"), ("", "not a file name")):
        with pytest.raises(PerfseerError, match=why):
            check_out_file(bad, suffixes=(".csv", ".parquet"))
    with pytest.raises(PerfseerError, match="kernel file system"):
        check_out_dir("/sys/perfseer")


@pytest.mark.parametrize("argv", [
    ["data", "import", "timm-benchmark", "nowhere", "--out", "/proc/table.csv"],
    ["data", "compact", "nowhere", "--out", "/proc/x"],
])
def test_data_commands_check_the_output_before_reading_anything(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "kernel file system" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["train", "--data", "nowhere", "--out", "/proc/perfseer"], "kernel file system"),
    (["train", "--data", "nowhere", "--out", "/dev/null"], "kernel file system"),
    (["train", "--data", "nowhere", "--out", "{file}/sub"], "which is a file"),
    (["data", "build", "nowhere.csv", "--out", "/proc/x"], "kernel file system"),
    (["data", "build", "nowhere.csv", "--out", "{file}"], "not a folder"),
    (["collect", "export", "--db", "{db}", "--out", "/proc/t.csv"], "kernel file system"),
    (["collect", "export", "--db", "{db}", "--out", "{file}/t.csv"], "not a folder"),
])
def test_train_build_and_export_check_the_output_before_any_work(argv, words, capsys, tmp_path):
    """The output is checked before the data is read (train: before training, whose end it would fail)."""
    from perfseer.profiling.store import Store

    (tmp_path / "file").write_text("x")
    Store(tmp_path / "runs.sqlite").close()
    argv = [a.format(file=tmp_path / "file", db=tmp_path / "runs.sqlite") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "--out" in err and "Traceback" not in err
