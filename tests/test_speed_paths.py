"""The faster ways of doing the same work give the same values bit for bit: in-place feature
scaling, the kept heap of a batched prediction (:mod:`perfseer.runtime.heap`), the spec model's
kernel networks read from arrays instead of DataFrames."""

import numpy as np
import pytest
import torch

from perfseer.runtime import heap
from perfseer.runtime.scaling import FEATURE_GROUPS, FeatureScaler, signed_log1p


def _reference(fs: FeatureScaler, field: str, values: torch.Tensor) -> torch.Tensor:
    mean = torch.as_tensor(fs.mean_[field], dtype=torch.float32)
    std = torch.as_tensor(fs.std_[field], dtype=torch.float32)
    out = (signed_log1p(values.float()) - mean) / std
    for group in fs.mask:
        gfield, cols = FEATURE_GROUPS[group]
        if gfield == field:
            out[..., list(cols)] = 0.0
    return out


@pytest.mark.parametrize("mask", [(), ("node_hp",)])
def test_in_place_scaling_is_the_formula_bit_for_bit(mask):
    from perfseer.features import schema

    g = torch.Generator().manual_seed(0)
    n = len(schema.NODE_FEATURES)
    x = torch.randn(50, n, generator=g, dtype=torch.float64) * 10 ** torch.randint(0, 9, (50, n), generator=g)
    x[0] = 0.0
    x[1, :3] = -x[1, :3].abs()
    fs = FeatureScaler(mask=mask)
    fs.mean_ = {"x": np.linspace(-1, 5, n)}
    fs.std_ = {"x": np.linspace(0.5, 3, n)}
    for values in (x, x.float()):
        before = values.clone()
        assert torch.equal(fs.transform_field("x", values), _reference(fs, "x", values))
        assert torch.equal(values, before)  # the input is not touched


class _Recorder:
    def __init__(self):
        self.calls = []

    def __call__(self, param, value):
        self.calls.append((param, value))
        return 1


def test_the_heap_pad_is_set_for_the_outermost_block_and_restored(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(heap, "_MALLOPT", rec)
    monkeypatch.delenv("PERFSEER_HEAP_PAD", raising=False)
    with heap.kept():
        with heap.kept():  # nested (another thread's call): set once
            pass
        assert rec.calls == [(heap.M_MMAP_THRESHOLD, heap.MMAP_THRESHOLD), (heap.M_TOP_PAD, heap.PAD_BYTES)]
    assert rec.calls[-1] == (heap.M_TOP_PAD, heap.DEFAULT_TOP_PAD) and len(rec.calls) == 3
    with pytest.raises(ValueError), heap.kept():
        raise ValueError("restored on errors too")
    assert rec.calls[-1] == (heap.M_TOP_PAD, heap.DEFAULT_TOP_PAD) and heap._DEPTH == 0
    monkeypatch.setenv("PERFSEER_HEAP_PAD", "0")
    with heap.kept():
        pass
    assert len(rec.calls) == 6  # untouched


def test_a_batched_prediction_is_the_same_with_and_without_the_kept_heap(monkeypatch):
    import perfseer
    from perfseer.runtime.predictor import load_predictor
    from perfseer.sources.nas.nb201 import OPS

    rng = np.random.default_rng(0)
    archs = ["+".join("|" + "|".join(f"{OPS[rng.integers(len(OPS))]}~{j}" for j in range(i)) + "|" for i in (1, 2, 3))
             for _ in range(8)]
    graphs = [perfseer.extract(f"nb201:{a}", batch=256).to_pyg() for a in archs] * 9  # 72: a batched call
    p = load_predictor("nb201-gpus.infer")
    monkeypatch.setenv("PERFSEER_HEAP_PAD", "0")
    plain = p.predict_graphs(graphs)
    monkeypatch.delenv("PERFSEER_HEAP_PAD")
    kept = p.predict_graphs(graphs)
    assert np.array_equal(plain, kept) and np.isfinite(kept).all()


def test_the_kernel_networks_give_the_same_from_arrays_as_from_dataframes():
    import perfseer
    from perfseer.devices import get_device
    from perfseer.runtime.spec import load_spec_model
    from perfseer.specmodel import kernels as kt
    from perfseer.specmodel.compose import step_kernels

    pg = perfseer.extract("example:resnet18", batch=4)
    sm = load_spec_model()
    for device, precision, phase in (("a100-40gb", "fp32", "train"), ("l4", "fp16", "infer"), ("mi210", "fp32", "infer")):
        table = step_kernels(pg.x, pg.op_types, phase=phase, precision=precision, edge_index=pg.edge_index,
                             params=float(pg.params)).drop(columns=["node", "op", "pass"])
        spec = get_device(device)
        args = ([spec] * len(table), [precision] * len(table), table["family"])
        frame = sm.kernels.predict(table, kt.device_frame(*args))
        arrays = sm.kernels.predict(kt.columns(table), kt.device_frame(*args, frame=False))
        assert np.array_equal(frame, arrays) and np.isfinite(arrays).all() and len(arrays) == len(table)


def test_the_same_values_check_reports_every_difference_beyond_its_tolerance():
    from benchmarks.lib.same_values import differences

    a = {"x": [{"value": "1.0", "basis": "spec"}], "y": "PerfseerError: no", "z": ["2.0"]}
    assert differences(a, a) == []
    b = {"x": [{"value": repr(1.0 + 1e-12), "basis": "spec"}], "y": "PerfseerError: no", "z": ["2.0"]}
    assert differences(a, b) == []  # within 1e-9 relative
    c = {"x": [{"value": "1.001", "basis": "transfer"}], "y": "PerfseerError: no", "w": ["2.0"]}
    d = differences(a, c)
    assert any(p.startswith("/x[0]/value") for p in d) and any(p.startswith("/x[0]/basis") for p in d)
    assert any("/w" in p for p in d) and any("/z" in p for p in d)
