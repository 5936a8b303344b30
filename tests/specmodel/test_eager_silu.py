"""SiLU as the one kernel eager PyTorch runs (perfseer.specmodel.eager), on a real export and by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfseer.devices import get_device
from perfseer.specmodel import anygpu
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.eager import fuse_silu, silu_pairs


def _vec(op, elems, read, write, p="fw"):
    t = kt.vec_rows(elems, 1, 1, dtype_bytes=2.0, read_bytes=read, write_bytes=write)
    t["op"], t["pass"], t["scale"], t["attn"] = op, p, 1.0, 0
    return t


def _se_silu_table():
    """A SiLU over 1000 elements (2-byte), then an SE gate: Sigmoid of 10, Mul of the 1000 by it."""
    e = 1000.0
    return pd.concat([_vec("Sigmoid", e, 2 * e, 2 * e), _vec("Mul", 2 * e, 4 * e, 2 * e),  # SiLU
                      _vec("Sigmoid", 10.0, 20.0, 20.0), _vec("Mul", e + 10, 2 * e + 20, 2 * e)],  # gate
                     ignore_index=True)


def test_only_the_silu_pair_is_fused():
    t = _se_silu_table()
    assert silu_pairs(t).tolist() == [False, True, False, False]
    f = fuse_silu(t)
    assert f["op"].tolist() == ["Sigmoid", "Sigmoid", "Mul"]
    # the fused kernel reads x and writes y (2 x 1000 x 2 bytes), its FLOPs both kernels'
    assert f["bytes"].iloc[0] == 4000.0 and f["flops"].iloc[0] == 1000.0 + 2000.0
    assert fuse_silu(t.drop(columns="op")) is not None and len(fuse_silu(t.drop(columns="op"))) == 4


def test_a_pair_across_passes_is_not_fused():
    e = 1000.0
    t = pd.concat([_vec("Sigmoid", e, 2 * e, 2 * e, "fw"), _vec("Mul", 2 * e, 4 * e, 2 * e, "bw")], ignore_index=True)
    assert not silu_pairs(t).any()


def test_the_step_pays_one_kernel_per_silu():
    """Hand-computed: memory-bound kernels at the bandwidth (no inefficiency, no slope, no L2
    term), a 2 us floor and no host cost.  Without the fusion the SiLU costs 4000 + 6000 bytes
    (two kernels), with it 4000 bytes (one)."""
    spec = get_device("rtx4090")
    th = dict(anygpu.INIT)
    th.update(m_vec=0.0, bw_slope=0.0, l2=0.0, kernel_floor=np.log(2.0), host_train=-20.0, overlap=3.0)
    ov = np.array([[-20.0, -20.0]])  # negligible host and step costs
    bw_us = spec.mem_bandwidth_gbs * 1e3  # bytes per us
    t = _se_silu_table()
    got = anygpu.step_us(th, ov, anygpu.design([(t, spec, "fp16", 0.0)]))[0]
    mem = (4000.0 + (2020.0 + 2000.0 + 40.0)) / bw_us  # fused SiLU, the gate's Mul and Sigmoid
    assert got == pytest.approx(mem + 3 * 2.0, rel=1e-6)


def test_exported_silu_is_found_forward_and_backward():
    torch = pytest.importorskip("torch")
    from perfseer.features.extract import extract
    from perfseer.specmodel.compose import step_kernels

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.act = torch.nn.SiLU()
            self.fc1, self.fc2 = torch.nn.Conv2d(16, 4, 1), torch.nn.Conv2d(4, 16, 1)

        def forward(self, x):
            y = self.act(self.conv(x))
            g = torch.sigmoid(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
            return y * g

    pg = extract(Net().eval(), batch=2, input_shape=(3, 8, 8))
    t = step_kernels(pg.x.astype(np.float64), pg.op_types, phase="train", precision="fp16",
                     edge_index=pg.edge_index, params=float(pg.params))
    mask = silu_pairs(t)
    assert mask.sum() == 2  # the SiLU's forward Mul and its gradient's; the gate is left alone
    assert sorted(t["pass"][mask]) == ["bw", "fw"]
    f = fuse_silu(t)
    assert len(f) == len(t) - 2 and (f["op"] == "Sigmoid").sum() == 4
