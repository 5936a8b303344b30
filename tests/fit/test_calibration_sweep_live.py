"""calibration_sweep.py --live: the live columns of perfseer.graph.liveness as correction and
K-centre features, on a synthetic cache (seconds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest


from benchmarks.lib import calibration_sweep as S  # noqa: E402
from test_calibration_sweep import _cache  # noqa: E402


def test_live_modes(tmp_path, capsys, monkeypatch):
    from perfseer.fit import calibrate as C

    monkeypatch.setattr(C, "LIVE_RIDGE_WEIGHT", C.LIVE_RIDGE_WEIGHT)  # the sweep sets it: restored after
    cache = tmp_path / "cache.npz"
    _cache(cache)
    z = S.load_cache(str(cache))
    with pytest.raises(SystemExit, match="no live shares"):
        S.target_view(z, "dev_c", ["dev_a", "dev_x"], live="indep")
    live = np.tile([1.0, 1.0, 0.0], (len(z["glob"]), 1))
    live[[3, 45], :] = [0.0, 0.0, 1.0]  # two networks whose result does not depend on the input
    np.savez_compressed(cache, **{**z, "live": live})
    z = S.load_cache(str(cache))
    v = S.target_view(z, "dev_c", ["dev_a", "dev_x"], live="indep")
    assert v.glob.shape[1] == 6 and v.sel_glob.shape[1] == 6 and v.glob[3, 5] == 1
    v = S.target_view(z, "dev_c", ["dev_a", "dev_x"], live="indep-fit")
    assert v.glob.shape[1] == 6 and v.sel_glob.shape[1] == 5  # K-centre on the five features only
    out = tmp_path / "sweep_nb201_live.json"
    assert S.main(["sweep", "--cache", str(cache), "--k", "6", "--draws", "2", "--kcentre-draws", "1",
                   "--selection", "random,kcentre-glob", "--variants", "full,cols", "--live", "none,indep",
                   "--live-ridge-weight", "0.01", "--json", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    assert {r["live"] for r in res} == {"none", "indep"} and len(res) == 3 * 2 * 3 * 2
    capsys.readouterr()
    assert S.main(["report", str(out), "--variant", "auto"]) == 0
    assert "| indep |" in capsys.readouterr().out
    assert C.LIVE_RIDGE_WEIGHT == 0.01
