"""perfseer predict --energy / --power-limit: the energy table, the JSON fields, the refusals."""

import json

from perfseer.cli.main import main

NB201 = "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|"


def test_energy_adds_a_table_and_the_json_fields(capsys, tmp_path):
    out_file = tmp_path / "rows.json"
    assert main(["predict", NB201, "--device", "h200", "--device", "l4", "--batch", "8", "--energy",
                 "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "energy (power model)" in out and "J / sample" in out and "util %" in out
    assert "rule of thumb" in out  # the L4's idle power is not measured, and the table says so
    rows = json.loads(out_file.read_text())["predictions"]
    assert len(rows) == 2
    for row in rows:
        for k in ("power_w", "energy_j", "energy_j_per_sample", "util_pct"):
            assert row[k] > 0
        assert abs(row["energy_j"] - row["power_w"] * row["value"] / 1000) < 1e-9


def test_a_power_limit_is_checked_and_reported(capsys):
    assert main(["predict", NB201, "--device", "h200", "--batch", "256", "--power-limit", "200", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["predictions"]
    assert row["power_limit_w"] == 200 and row["power_w"] <= 200 + 1e-6
    assert main(["predict", NB201, "--device", "h200", "--power-limit", "5000"]) != 0
    assert "above h200's TDP" in capsys.readouterr().err


def test_a_cpu_is_refused_with_the_reason(capsys):
    assert main(["predict", NB201, "--device", "epyc-vm", "--energy"]) != 0
    err = capsys.readouterr().err
    assert "covers GPUs" in err and "util_pct" in err
