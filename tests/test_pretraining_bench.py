"""benchmarks/pretraining.py finetune: epoch budget without a time limit, patience, and --resume."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "fit"))

import _training_bench as tb  # noqa: E402
import pretraining  # noqa: E402
from train_helpers import GLOBAL, chain_graph  # noqa: E402


def _tiny(monkeypatch, tmp_path):
    import perfseer.data.dataset as ds
    from perfseer.fit.pretrain import PretrainConfig, pretrain, save_pretrained

    rng = np.random.default_rng(0)
    graphs, rows = [], []
    for a in range(24):
        g = chain_graph(rng, batch=1)
        graphs.append(g)
        rows.append({"model": f"arch{a}", "batch_size": 1, "device": pretraining.DEVICE, "phase": "infer",
                     "latency_ms": 1e-6 * float(g.u[0, GLOBAL["flops_total"]]) + 0.1, "graph": a,
                     "split": ("train", "train", "val", "test")[a % 4], "family_split": None})
    view = tb.View(graphs, pd.DataFrame(rows))
    monkeypatch.setattr(ds, "resolve_dataset", lambda name: name)
    monkeypatch.setattr(ds, "load_dataset", lambda path: view)
    monkeypatch.setattr(tb, "set_threads", lambda n: None)
    gae, fs, hist = pretrain(graphs, {"hidden_dim": 8, "head_hidden_dim": 8}, PretrainConfig(epochs=1))
    return save_pretrained(tmp_path, "gae", gae, fs, {}, hist)


def test_finetune_epoch_budget_patience_and_resume(monkeypatch, tmp_path):
    card = _tiny(monkeypatch, tmp_path)
    out = tmp_path / "ft.json"
    base = ["finetune", "--card", str(card), "--hidden", "8", "--seeds", "0", "--time-limit", "0",
            "--epochs", "3", "--patience", "1", "--json", str(out)]
    assert pretraining.main(base + ["--sizes", "4"]) == 0
    first = json.loads(out.read_text())["results"]
    assert [(r["size"], r["init"]) for r in first] == [("4", "none"), ("4", "gae")]
    assert all(r["stopped"] in ("max_epochs", "early_stopping") and r["epochs"] <= 3 for r in first)
    # --resume keeps the finished runs as they are and adds only the missing ones
    assert pretraining.main(base + ["--sizes", "4,all", "--resume"]) == 0
    res = json.loads(out.read_text())["results"]
    assert res[:2] == first
    assert [(r["size"], r["init"]) for r in res[2:]] == [("all", "none"), ("all", "gae")]
    assert res[2]["train_models"] == 12
    table = pretraining.summary(res).splitlines()
    assert len(table) == 2 + 4 and "best epoch" in table[0] and "stopped by" in table[0]


def test_time_limit_zero_is_no_limit_and_negative_is_refused():
    assert pretraining.nonnegative("0") == 0.0
    import argparse

    import pytest

    with pytest.raises(argparse.ArgumentTypeError):
        pretraining.nonnegative("-1")
