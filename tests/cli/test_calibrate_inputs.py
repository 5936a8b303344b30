"""``perfseer calibrate`` refuses what would write outside --out or crash late: a card name that is
a path, an output folder that is a file or a device, measured values that are not finite, positive
and bounded, device names that are not plain, and too many rows: one line, no traceback."""

import csv

import pytest
from tests.helpers import assert_cli_error

P = "rtx3090-amp-nchw-pt240.infer"


def _table(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "input_shape", "batch_size", "phase", "device", "latency_ms"])
        for r in rows:
            w.writerow(r)
    return str(path)


def _good(path, device="newgpu/amp", value=5.0, n=3):
    return _table(path, [["example:resnet18", "3x224x224", b, "infer", device, value] for b in range(1, n + 1)])


def _args(table, out, *extra):
    return ["calibrate", "--predictor", P, "--measurements", table, "--out", str(out), *extra]


def test_a_name_that_is_a_path_is_refused(capsys, tmp_path):
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv"), tmp_path / "out", "--name", "../.."), "--name", "'../..'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("out, words", [("/dev/null", "kernel file system"), ("/proc/perfseer", "kernel file system")])
def test_an_output_folder_in_a_device_is_refused(capsys, tmp_path, out, words):
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv"), out), "--out", words)


def test_an_output_folder_under_a_file_is_refused(capsys, tmp_path):
    (tmp_path / "f").write_text("x")
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv"), tmp_path / "f"), "--out", "not a folder")
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv"), tmp_path / "f" / "sub"), "--out", "which is a file")


@pytest.mark.parametrize("value, words", [("1e308", "not finite, not positive or above"),
                                          ("1e9", "not finite, not positive or above"),
                                          ("inf", "not a number"), ("0", "not > 0"), ("-2", "not > 0")])
def test_a_latency_that_is_not_finite_positive_and_bounded_is_refused(capsys, tmp_path, value, words):
    table = _table(tmp_path / "m.csv", [["example:resnet18", "3x224x224", 1, "infer", "newgpu/amp", 5.0],
                                        ["example:resnet18", "3x224x224", 2, "infer", "newgpu/amp", value]])
    assert_cli_error(capsys, _args(table, tmp_path / "out"), "latency_ms", words)


@pytest.mark.parametrize("device", ["gpu\x00x", "g" * 5000, "../../etc", "a\\b"])
def test_a_device_name_that_is_not_plain_is_refused(capsys, tmp_path, device):
    msg = assert_cli_error(capsys, _args(_good(tmp_path / "m.csv", device=device), tmp_path / "out"),
                           "not a plain name")
    assert len(msg) < 600 and "\x00" not in msg
    assert not (tmp_path / "out").exists()


def test_a_device_flag_that_is_not_plain_is_refused(capsys, tmp_path):
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv"), tmp_path / "out", "--device", "x" * 500),
                     "--device", "not a plain name")


def test_too_many_rows_are_refused(capsys, tmp_path, monkeypatch):
    import perfseer.cli.calibrate as cal

    monkeypatch.setattr(cal, "MAX_CALIBRATION_ROWS", 2)
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv", n=3), tmp_path / "out"), "3 calibration rows", "at most 2")
