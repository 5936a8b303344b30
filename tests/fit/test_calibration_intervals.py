"""benchmarks/calibration_intervals.py end to end on the tiny synthetic cache of
test_calibration_sweep.py (seconds): rows, learn, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import calibration_intervals as I  # noqa: E402
from test_calibration_sweep import _cache  # noqa: E402


def test_rows_learn_and_report(tmp_path, capsys):
    cache = tmp_path / "cache.npz"
    _cache(cache)
    rows = tmp_path / "rows_nb201.npz"
    assert I.main(["rows", "--cache", str(cache), "--out", str(rows), "--k", "6,10", "--draws", "3",
                   "--kcentre-draws", "2"]) == 0
    sims = I.Sims([rows])
    assert len(sims.meta) == 3 * 2 * (3 + 2)  # devices x K x draws
    assert set(sims.meta["variant"]) <= {"full", "cols", "emb"} and sims.meta["setting"].eq("NAS-Bench-201").all()
    for i, m in sims.meta.iterrows():  # K rows with their nested residuals and distances; 20 held-out rows
        assert len(sims.cal_r[i]) == m["rows"] and sims.cal_d[i].shape == (m["rows"], len(sims.spaces))
        assert sims.test_r[i].shape == (20,) and (sims.test_d[i] >= 0).all()
    # the interval's residuals nest the variant choice (calibrate.auto_residuals); cal_r_min keeps the
    # chosen variant's own, whose RMS is the recorded s_min and never above every candidate's
    for i, m in sims.meta.iterrows():
        assert len(sims.cal_r_min[i]) == m["rows"]
        assert np.isclose(np.sqrt(np.mean(sims.cal_r[i] ** 2)), m["s"], rtol=1e-4)
        assert np.isclose(np.sqrt(np.mean(sims.cal_r_min[i] ** 2)), m["s_min"], rtol=1e-4)
    # a calibration model's leave-one-model-out distance is positive; the held-out rows' distances are finite
    assert all((d > 0).all() for d in sims.cal_d) and all(np.isfinite(d).all() for d in sims.test_d)
    # the old rule, its c(K) learned on the sim/val devices: coverage in [0, 1], the test device scored
    ev = I.evaluate_rule(sims, I.BEFORE, 0.9, roles=("sim", "val", "test"))
    assert np.nanmin(ev["coverage"]) >= 0 and np.nanmax(ev["coverage"]) <= 1
    assert not np.isnan(ev["coverage"][sims.meta["role"].eq("test").to_numpy()]).any()
    learned = tmp_path / "learn.json"
    assert I.main(["learn", str(rows), "--json", str(learned)]) == 0
    d = json.loads(learned.read_text())
    assert set(d["chosen"]) == set(I.BEFORE) and d["ranking"][0]["name"] == I._name(d["chosen"])
    assert all(0 < c < 30 for c in d["table"].values()) and set(d["scaled_table"]) == set(d["table"])
    capsys.readouterr()
    assert I.main(["report", str(rows), "--learned", str(learned)]) == 0
    text = capsys.readouterr().out
    assert "Coverage of the 90 % interval" in text and "flagged" in text and "before: scaled" in text
    assert "coverage over the draws" in text  # per test device: lowest, highest, standard error
    assert I.main(["report", str(rows), "--learned", str(learned), "--shipped-min"]) == 0
    assert "auto's own residuals" in capsys.readouterr().out
    # --stats adds rules whose spread is the conformal rank (or the median) of |r|, reported for reference
    assert I.main(["learn", str(rows), "--stats", "rms,conformal", "--json", str(learned)]) == 0
    d = json.loads(learned.read_text())
    stats = {r.get("stat", "rms") for r in d["ranking"]}
    assert stats == {"rms", "conformal"} and len(d["ranking"]) == 2 * len(I.candidates(I.Sims([rows]).spaces))
    capsys.readouterr()
    assert I.main(["report", str(rows), "--learned", str(learned)]) == 0
    assert "conformal spread" in capsys.readouterr().out


def test_rows_of_one_variant(tmp_path):
    """``rows --variant cost``: every calibration is the named variant, its residuals its own."""
    cache = tmp_path / "cache.npz"
    _cache(cache)
    rows = tmp_path / "rows_timm3090.npz"
    assert I.main(["rows", "--cache", str(cache), "--out", str(rows), "--k", "6", "--draws", "2",
                   "--kcentre-draws", "1", "--variant", "cost"]) == 0
    sims = I.Sims([rows])
    assert len(sims.meta) == 3 * (2 + 1) and set(sims.meta["variant"]) == {"cost"}
    assert all(np.allclose(sims.cal_r[i], sims.cal_r_min[i]) for i in range(len(sims.meta)))
