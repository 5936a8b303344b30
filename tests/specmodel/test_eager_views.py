"""Slices and broadcasts as the views eager PyTorch makes of them (perfseer.specmodel.eager.drop_views)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import anygpu
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.eager import drop_views


def _vec(op, elems, read, write, p="fw"):
    t = kt.vec_rows(elems, 1, 1, dtype_bytes=2.0, read_bytes=read, write_bytes=write)
    t["op"], t["pass"], t["scale"], t["attn"] = op, p, 1.0, 0
    return t


def test_forward_slices_and_expands_launch_nothing_their_gradients_do():
    e = 1000.0
    t = pd.concat([_vec("Slice", e, 2 * e, 2 * e), _vec("Expand", e, 20.0, 2 * e), _vec("Mul", 2 * e, 4 * e, 2 * e),
                   _vec("Split", e, 2 * e, 2 * e), _vec("Slice", e, 2 * e, 2 * e, "bw"),
                   _vec("Expand", e, 2 * e, 20.0, "bw")], ignore_index=True)
    d = drop_views(t)
    assert d["op"].tolist() == ["Mul", "Split", "Slice", "Expand"]
    assert d["pass"].tolist() == ["fw", "fw", "bw", "bw"]
    assert drop_views(d) is d  # nothing left to drop: the same table
    # unfused attention: torch.matmul copies the slices, which stay
    assert drop_views(t, slices=False)["op"].tolist() == ["Slice", "Mul", "Split", "Slice", "Expand"]
    assert len(drop_views(t.drop(columns="op"))) == len(t)


def test_the_step_pays_nothing_for_a_view():
    """Hand-computed: memory-bound kernels at the bandwidth, a 2 us floor, no host cost.  Where
    attention is fused, the forward Slice (4000 bytes) adds nothing: the step is the Mul's 6000
    bytes and one floor; where it is not, the Slice is a copy."""
    spec = get_device("rtx4090")
    th = dict(anygpu.INIT)
    th.update(m_vec=0.0, bw_slope=0.0, l2=0.0, kernel_floor=np.log(2.0), host_train=-20.0, overlap=3.0)
    ov = np.array([[-20.0, -20.0]])
    e = 1000.0
    t = pd.concat([_vec("Slice", e, 2 * e, 2 * e), _vec("Mul", 2 * e, 4 * e, 2 * e)], ignore_index=True)
    bw_us = spec.mem_bandwidth_gbs * 1e3  # bytes per us
    got = anygpu.step_us(th, ov, anygpu.design([(t, spec, "fp16", 0.0, False, True)]))[0]
    assert got == pytest.approx(6000.0 / bw_us + 2.0, rel=1e-6)
    got = anygpu.step_us(th, ov, anygpu.design([(t, spec, "fp16", 0.0, False, False)]))[0]
    assert got == pytest.approx(10000.0 / bw_us + 2 * 2.0, rel=1e-6)


def test_exported_qkv_unbind_and_expand_are_views():
    torch = pytest.importorskip("torch")
    from perfseer.features.extract import extract
    from perfseer.specmodel.compose import step_kernels

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(x.shape[0], x.shape[1], 3, 16).permute(2, 0, 1, 3).unbind(0)
            g = x.mean(1, keepdim=True).expand_as(x)  # a gate broadcast over the tokens
            return q * g + k * v

    pg = extract(Net().eval(), batch=2, input_shape=(8, 16))
    t = step_kernels(pg.x.astype(np.float64), pg.op_types, phase="infer", precision="fp32",
                     edge_index=pg.edge_index, params=float(pg.params))
    assert (t["op"] == "Slice").sum() == 3 and (t["op"] == "Expand").sum() == 1  # composed as copies
    assert drop_views(t)["op"].tolist() == ["MatMul", "Transpose", "ReduceMean", "Mul", "Mul", "Add"]
