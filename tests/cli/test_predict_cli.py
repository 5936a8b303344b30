"""perfseer predict: devices side by side, throughput, --out, --plot; perfseer predictors at 80 columns."""

import json

import pytest

from perfseer.cli.main import main

P = "nb201-gpus.infer"
NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_two_devices_of_one_predictor_side_by_side_with_throughput(capsys, tmp_path):
    out = tmp_path / "rows.json"
    assert main(["predict", NB201, "--predictor", P, "--device", "1080ti", "--device", "titan_rtx",
                 "--batch", "1,64", "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    rows = printed["predictions"]
    assert {(r["device"], r["batch_size"]) for r in rows} == {(d, b) for d in ("1080ti", "titan_rtx") for b in (1, 64)}
    for r in rows:
        assert r["model"] == NB201
        assert r["throughput_per_s"] == pytest.approx(r["batch_size"] * 1000 / r["value"])


def test_the_table_names_constant_columns_in_its_title(capsys):
    assert main(["predict", NB201, "--predictor", P, "--device", "1080ti", "--batch", "1,8"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the title may wrap at the terminal's width
    assert "(1080ti, infer, latency_ms, as measured)" in out and "per s" in out


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "sweep.png"
    assert main(["predict", NB201, "--predictor", P, "--device", "1080ti", "--device", "2080ti",
                 "--batch", "1,16,256", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {png}" in capsys.readouterr().out


def test_plot_needs_a_known_suffix(capsys):
    assert main(["predict", NB201, "--predictor", P, "--plot", "sweep.gif"]) == 2
    assert "must end in .png, .svg or .pdf" in capsys.readouterr().err


def test_predictors_fit_in_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["predictors"]) == 0
    out = capsys.readouterr().out
    assert P in out and "covers" in out and "test" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    # a calibrated card shows its rows, its source and its leave-one-model-out score, not "no test score"
    block = out[out.index("h200-amp-nchw-pt211.infer"):].split("\n\n")[0]
    assert "117 calibration rows, from rtx4090-amp-nchw-pt291.infer" in block
    assert "leave-one-model-out 23.34 %" in block and "no test score" not in block
