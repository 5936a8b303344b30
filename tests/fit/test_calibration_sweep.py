"""benchmarks/lib/calibration_sweep.py end to end on a tiny synthetic cache (seconds): sweep, learn-scale, report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


from benchmarks.lib import calibration_sweep as S  # noqa: E402


def _cache(path: Path) -> None:
    """Three devices (one per role) of 60 models, 40 train / 20 test; the source has 2 columns."""
    rng = np.random.default_rng(0)
    n_graph = 60
    f = rng.normal(0, 1, n_graph)
    logp = np.stack([f + rng.normal(0, 0.1, n_graph), f + rng.normal(0, 0.1, n_graph)], axis=1)
    glob = rng.normal(0, 1, (n_graph, 5))
    emb = rng.normal(0, 1, (n_graph, 4)).astype(np.float32)
    cols = {k: [] for k in ("target", "role", "model", "split", "y", "graph_index")}
    for dev, role, a in (("dev_a", "sim", 0.5), ("dev_b", "val", 1.0), ("dev_c", "test", 2.0)):
        for g in range(n_graph):
            cols["target"].append(dev)
            cols["role"].append(role)
            cols["model"].append(f"m{g}")
            cols["split"].append("train" if g < 40 else "test")
            cols["y"].append(float(np.exp(a + logp[g, 0] + rng.normal(0, 0.1))))
            cols["graph_index"].append(g)
    np.savez_compressed(path, **{k: np.asarray(v) for k, v in cols.items()}, batch=np.ones(3 * n_graph, int),
                        logp=logp, glob=glob, emb=emb, source_devices=np.array(["dev_a", "dev_x"]),
                        source=np.array("synthetic"))


def test_sweep_learn_scale_and_report(tmp_path, capsys):
    cache = tmp_path / "cache.npz"
    _cache(cache)
    out = tmp_path / "sweep_nb201.json"
    assert S.main(["sweep", "--cache", str(cache), "--k", "6", "--draws", "3", "--kcentre-draws", "2",
                   "--selection", "random,kcentre-glob", "--variants", "full,cols,emb", "--json", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    assert len(res) == 3 * (3 + 2) * 3  # devices x draws x variants
    a = [r for r in res if r["target"] == "dev_a"]
    assert all(r["dropped_columns"] == ["dev_a"] for r in a)  # a source device: its own column left out
    assert all(0 <= r["coverage"]["conformal"][0] <= 1 and len(r["ratio_q"]) == len(S.RATIO_LEVELS) for r in res)
    assert np.median([r["mape"] for r in res]) < 30  # y is a scaled source column: easy to calibrate
    scale = tmp_path / "scale.json"
    assert S.main(["learn-scale", str(out), "--json", str(scale)]) == 0
    table = json.loads(scale.read_text())["table"]
    assert set(table) == {"random", "spanning"} and all(0 < c < 10 for t in table.values() for c in t.values())
    capsys.readouterr()
    assert S.main(["report", str(out), "--variant", "auto"]) == 0
    text = capsys.readouterr().out
    assert "NAS-Bench-201 test devices, K = 10" not in text  # K = 6 only
    assert "Coverage of the 90 % interval" in text and "| auto |" in text


def test_cost_fit_scores_the_source_free_fit_and_its_blends(tmp_path):
    """--cost-fit: per draw, ``cost`` (the library's variant: no source term) and its two blends with
    ``auto``; a device whose latency is its global features' linear function is fitted by ``cost``
    and missed by the source corrections.  Without cost among the variants: a clear error."""
    cache = tmp_path / "cache.npz"
    _cache(cache)
    z = dict(np.load(cache))
    z["y"] = np.exp(1.0 + 0.8 * z["glob"][z["graph_index"], 0] + 0.3 * z["glob"][z["graph_index"], 1])
    np.savez_compressed(cache, **z)
    out = tmp_path / "sweep_timm3090.json"
    assert S.main(["sweep", "--cache", str(cache), "--k", "8", "--draws", "2", "--variants", "full,cols,emb,cost",
                   "--cost-fit", "--json", str(out)]) == 0
    res = json.loads(out.read_text())["results"]
    assert {r["variant"] for r in res} == {"full", "cols", "emb", "cost", "auto+cost", "auto|cost", "auto|blend",
                                           "auto|all"}
    mape = {v: np.mean([r["mape"] for r in res if r["variant"] == v]) for v in ("full", "cost", "auto+cost")}
    assert mape["cost"] < 1 < mape["full"] and mape["cost"] < mape["auto+cost"] < mape["full"]

    def same(variant, other):  # every draw of ``variant`` scored as ``other``
        return all(r["mape"] == next(c["mape"] for c in res if c["variant"] == other and c["target"] == r["target"]
                                     and c["draw"] == r["draw"]) for r in res if r["variant"] == variant)

    assert same("auto|cost", "cost")  # cost's LOO error is the lowest
    assert same("auto|all", "cost")  # the lowest of the three
    assert same("auto|blend", "auto+cost")  # half of an exact fit's residuals beat the source correction's
    assert S.main(["report", str(out)]) == 0  # no registered CPU among the targets: no across-kinds table
    import pytest

    with pytest.raises(SystemExit, match="add cost to --variants"):
        S.cost_variants({"full": (np.zeros(2), np.zeros(3))})
