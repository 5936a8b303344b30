"""``perfseer calibrate`` refuses what would write outside --out or crash late: a card name that is
a path, an output folder that is a file or a device, measured values that are not finite, positive
and bounded, device names that are not plain, and too many rows: one line, no traceback."""

import csv

import pytest
from tests.helpers import assert_cli_error

from perfseer.errors import PerfseerError

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
    assert_cli_error(capsys, _args(_good(tmp_path / "m.csv", n=3), tmp_path / "out"), "over 2 calibration rows",
                     "at most 2")


def test_the_rows_are_read_as_a_stream_that_stops_at_the_limit(tmp_path, monkeypatch):
    """A table far over the limit is not read whole: the reader stops at the chunk that passes it,
    and rows of other devices are not kept."""
    import perfseer.cli.calibrate as cal
    import perfseer.data.table as tbl

    rows = [["example:resnet18", "3x224x224", 1 + i % 64, "infer", "other/amp" if i % 2 else "newgpu/amp", 5.0]
            for i in range(20_000)]
    path = _table(tmp_path / "big.csv", rows)
    chunks = []
    real = tbl.iter_table

    def counting(path, chunk_rows=10_000):
        for chunk in real(path, chunk_rows):
            chunks.append(len(chunk))
            yield chunk

    monkeypatch.setattr(tbl, "iter_table", counting)
    monkeypatch.setattr(cal, "MAX_CALIBRATION_ROWS", 1_000)
    with pytest.raises(PerfseerError, match=r"over 1,000 calibration rows of newgpu/amp .*stopped reading big.csv at "
                                            r"row 2,500"):
        cal.read_rows(path, "newgpu/amp", None, "latency_ms", chunk_rows=500)
    assert chunks == [500] * 5  # 2,500 of 20,000 rows read: 1,250 of newgpu/amp passed the limit
    monkeypatch.setattr(cal, "MAX_CALIBRATION_ROWS", 100_000)
    chunks.clear()
    kept, device, phase = cal.read_rows(path, "newgpu/amp", None, "latency_ms", chunk_rows=5_000)
    assert len(kept) == 10_000 and set(kept["device"]) == {"newgpu/amp"} and phase == "infer"
    assert chunks == [5_000] * 4


def test_a_streamed_table_names_a_bad_row_by_its_place_in_the_whole_table(tmp_path):
    import perfseer.cli.calibrate as cal

    rows = [["example:resnet18", "3x224x224", 1, "infer", "newgpu/amp", 5.0]] * 1_234
    rows.append(["example:resnet18", "3x224x224", "x", "infer", "newgpu/amp", 5.0])
    with pytest.raises(PerfseerError, match="row 1235: batch_size 'x'"):
        cal.read_rows(_table(tmp_path / "m.csv", rows), None, None, "latency_ms", chunk_rows=100)


def test_a_device_without_rows_is_named_with_the_devices_the_table_has(tmp_path):
    import perfseer.cli.calibrate as cal

    with pytest.raises(PerfseerError, match="no latency_ms measurement of device 'gpu2'") as e:
        cal.read_rows(_good(tmp_path / "m.csv"), "gpu2", None, "latency_ms")
    assert "newgpu/amp" in e.value.fix
