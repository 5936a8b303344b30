"""PERFSEER_GEMM_FOLD: a MatMul with a 2-D weight described as the one GEMM PyTorch runs, at
extraction and by rewriting a stored compact dataset (the two must agree)."""

from __future__ import annotations

import numpy as np
import pytest

from perfseer.data.dataset import build_dataset, load_dataset
from perfseer.data.table import write_table
from perfseer.features.schema import NODE_FEATURES
from tests.helpers import load_script

MM_M, MM_BATCH = NODE_FEATURES.index("mm_m"), NODE_FEATURES.index("mm_batch")


def _build(tmp, name, monkeypatch, fold: bool):
    if fold:
        monkeypatch.setenv("PERFSEER_GEMM_FOLD", "1")
    else:
        monkeypatch.delenv("PERFSEER_GEMM_FOLD", raising=False)
    rows = [{"model": "example:vit_b_16", "input_shape": "3x224x224", "batch_size": b, "phase": "infer",
             "device": "a100", "latency_ms": 1.0} for b in (2, 16)]
    write_table(rows, tmp / f"{name}.csv")
    build_dataset(tmp / f"{name}.csv", tmp / name, workers=0, compact=True)
    monkeypatch.delenv("PERFSEER_GEMM_FOLD", raising=False)
    return tmp / name


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("gemm")
    try:
        yield _build(tmp, "plain", mp, False), _build(tmp, "folded", mp, True), tmp
    finally:
        mp.undo()


def test_the_switch_folds_weight_matmuls_into_one_gemm(built):
    plain, folded = load_dataset(built[0]), load_dataset(built[1])
    for i, b in enumerate((2, 16)):
        a, f = plain.graphs[i].x.numpy(), folded.graphs[i].x.numpy()
        changed = np.flatnonzero((a[:, MM_BATCH] != f[:, MM_BATCH]) | (a[:, MM_M] != f[:, MM_M]))
        assert len(changed) == 12 * 3  # per block: the attention output projection and the two MLP layers
        assert (a[changed, MM_BATCH] > 1).all() and (f[changed, MM_BATCH] == 1).all()
        np.testing.assert_array_equal(f[changed, MM_M], a[changed, MM_M] * a[changed, MM_BATCH])
        assert set(f[changed, MM_M]) == {197 * b}  # every token of every image: [B, 197, C] and [197, B, C] alike
        keep = np.setdiff1d(np.arange(len(a)), changed)
        np.testing.assert_array_equal(a[keep], f[keep])  # attention's batched products stay batched
        np.testing.assert_allclose(plain.graphs[i].u.numpy(), folded.graphs[i].u.numpy(), rtol=1e-6)


def test_rewriting_a_stored_dataset_gives_the_folded_extraction(built):
    script = load_script("gemm_fold_dataset")
    plain, folded, tmp = built
    changed = script.fold_dataset(plain, tmp / "rewritten")
    assert changed > 0
    a, b = load_dataset(tmp / "rewritten"), load_dataset(folded)
    for g, h in zip(a.graphs, b.graphs):
        np.testing.assert_allclose(g.x.numpy(), h.x.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g.u.numpy(), h.u.numpy(), rtol=1e-5)
    assert a.labels.equals(b.labels)
    assert a.manifest["gemm_fold"]["matmul_nodes_changed"] == changed
    assert script.fold_dataset(tmp / "rewritten", tmp / "again") == 0  # nothing left to fold
    with pytest.raises(SystemExit, match="must differ"):
        script.fold_dataset(plain, plain)
    with pytest.raises(SystemExit, match="no graphs.npz"):
        script.fold_dataset(tmp, tmp / "x")
