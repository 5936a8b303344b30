"""Kernel tables, the PerfGraph -> kernels composition and the backward rules (no trained model)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import perfseer
from helpers import conv_model, make_model
from perfseer.devices import get_device
from perfseer.specmodel import kernels as kt
from perfseer.specmodel.backward import backward_kernels
from perfseer.specmodel.compose import node_kernels, step_kernels
from perfseer.specmodel.neusight import op_kernels


def test_gemm_and_conv_rows_by_hand():
    g = kt.gemm_rows(2, 8, 16, 4, dtype_bytes=2, bias=1, shared_b=1)
    assert g["flops"][0] == 2 * 2 * 8 * 16 * 4 + 2 * 8 * 16
    assert g["bytes"][0] == (2 * 8 * 4 + 4 * 16 + 2 * 8 * 16 + 16) * 2  # weight read once
    c = kt.conv_rows(1, 3, 4, 3, 8, 8, 1, 1)
    assert (c["M"][0], c["N"][0], c["K"][0]) == (64, 4, 27)
    assert c["flops"][0] == 2 * 64 * 4 * 27


def test_features_are_finite_and_roofline_is_the_bound():
    spec = get_device("a100-40gb-pcie")
    t = kt.gemm_rows([1, 4], [4096, 7], [4096, 3], [4096, 5])
    dev = kt.device_frame([spec] * 2, ["fp32"] * 2, t["family"])
    x, t_roof = kt.features("gemm", t, dev)
    assert np.isfinite(x).all() and x.shape[0] == 2
    assert t_roof[0] == pytest.approx(2 * 4096**3 / (spec.peak("fp32") * 1e6))  # compute-bound, µs
    half = kt.device_frame([spec] * 2, ["fp16"] * 2, t["family"])
    assert half["peak_tflops"][0] == spec.peak("fp16")


def _mlp_model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["y"], name="reshape")]
    return make_model(nodes, {"x": ("N", 64)}, ["y"],
                      {"w": np.ones((64, 32), np.float32), "shape": np.array([-1, 32], np.int64)})


def test_node_kernels_of_a_small_graph():
    pg = perfseer.extract(_mlp_model(), batch=16)
    k = node_kernels(pg.x, pg.op_types, "fp32")
    assert list(k["op"]) == ["MatMul", "Relu"]  # the reshape is a view: no kernel
    mm = k.iloc[0]
    assert (mm["family"], mm["M"], mm["N"], mm["K"]) == ("gemm", 16, 32, 64)
    half = node_kernels(pg.x, pg.op_types, "fp16")
    assert half["bytes"].sum() == pytest.approx(k["bytes"].sum() / 2)


def test_conv_becomes_an_implicit_gemm_and_training_adds_backward_and_optimizer():
    pg = perfseer.extract(conv_model(with_fc=True), batch=2)
    k = step_kernels(pg.x, pg.op_types, "infer", "fp32")
    conv = k[k["op"] == "Conv"].iloc[0]
    assert (conv["family"], conv["M"], conv["N"], conv["K"]) == ("conv", 2 * 64, 4, 27)
    tr = step_kernels(pg.x, pg.op_types, "train", "fp32", params=pg.params, optimizer="sgd")
    assert set(tr["pass"]) == {"fw", "bw", "opt"}
    assert (tr["pass"] == "bw").sum() >= 2 * ((tr["pass"] == "fw") & tr["family"].isin(["gemm", "conv"])).sum()
    opt = tr[tr["pass"] == "opt"].iloc[0]
    assert opt["elems"] == pg.params and opt["bytes"] == pg.params * (12 + 8)
    with pytest.raises(ValueError, match="phase"):
        step_kernels(pg.x, pg.op_types, "serve")


def test_backward_rules():
    lin = kt.gemm_rows(1, 128, 256, 64, bias=1, shared_b=1)
    b = backward_kernels(lin, "linear")
    gemms = b[b["family"] == "gemm"]
    assert len(gemms) == 2 and gemms["flops"].sum() == pytest.approx(2 * 2 * 128 * 256 * 64)
    bias = b[b["family"] == "vec"]
    assert len(bias) == 1 and bias["elems"].iloc[0] == 128 * 256  # the bias gradient: a pass over dY
    assert not len(backward_kernels(kt.vec_rows(1000, 2, 1), "add"))
    gelu = backward_kernels(kt.vec_rows(1000, 1, 8), "gelu")
    assert gelu["bytes"][0] == 3 * 1000 * 4


def test_neusight_trace_ops():
    lin = op_kernels("Linear", [[2, 512, 1024]], (2, 512, 4096), 4, training=False)
    assert (lin["M"][0], lin["K"][0], lin["N"][0]) == (1024, 1024, 4096)
    bmm = op_kernels("matmul", [[2, 16, 512, 64], [2, 16, 64, 512]], (2, 16, 512, 512), 4, training=False)
    assert (bmm["B"][0], bmm["M"][0], bmm["K"][0], bmm["N"][0]) == (32, 512, 64, 512)
    assert op_kernels("view", [[2, 3]], (6,), 4, training=False) is None
    assert op_kernels("Dropout", [[2, 3, 4]], (2, 3, 4), 4, training=False) is None
    assert op_kernels("Dropout", [[2, 3, 4]], (2, 3, 4), 4, training=True)["family"][0] == "vec"
    sm = op_kernels("softmax", [[2, 16, 512, 512]], (2, 16, 512, 512), 4, training=False)
    assert (sm["family"][0], sm["rows"][0], sm["cols"][0]) == ("softmax", 2 * 16 * 512, 512)


def _token_linear_model():
    """``nn.Linear(64, 32)`` on ``(N, 16, 64)`` tokens as ONNX writes it (MatMul + bias Add), then
    a product whose output feeds two nodes (its Add is no bias) and a batched activation product."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "b"], ["hb"], name="bias"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["h2"], name="mm2"),
             helper.make_node("Add", ["h2", "b2"], ["s"], name="not_bias"),
             helper.make_node("Mul", ["h2", "s"], ["m"], name="mul"),
             helper.make_node("Transpose", ["m"], ["mt"], perm=[0, 2, 1], name="tr"),
             helper.make_node("MatMul", ["m", "mt"], ["y"], name="bmm")]
    return make_model(nodes, {"x": ("N", 16, 64)}, ["y"],
                      {"w": np.ones((64, 32), np.float32), "b": np.ones(32, np.float32),
                       "w2": np.ones((32, 32), np.float32), "b2": np.ones(32, np.float32)})


def test_linear_on_tokens_is_one_gemm_with_its_bias_as_pytorch_runs_it():
    pg = perfseer.extract(_token_linear_model(), batch=4)
    k = node_kernels(pg.x, pg.op_types, "fp32", pg.edge_index)
    assert list(k["op"]) == ["MatMul", "Relu", "MatMul", "Add", "Mul", "Transpose", "MatMul"]
    lin = k.iloc[0]
    # the trace path's nn.Linear: one (N*16) x 64 @ 64 x 32 GEMM with its bias (PyTorch's addmm)
    ref = op_kernels("Linear", [[4, 16, 64]], (4, 16, 32), 4, training=False).iloc[0]
    for c in ("B", "M", "N", "K", "flops", "bytes", "weights"):
        assert lin[c] == pytest.approx(ref[c]), c
    mm2 = k.iloc[2]  # feeds two nodes: the Add after it is not a bias
    assert (mm2["B"], mm2["M"], mm2["flops"]) == (1, 64, 2 * 64 * 32 * 32)
    bmm = k.iloc[-1]  # a product of two activations stays batched
    assert (bmm["B"], bmm["M"], bmm["N"], bmm["K"]) == (4, 16, 16, 32)
    # without the edges the bias Add stays a kernel, the GEMM is folded all the same
    plain = node_kernels(pg.x, pg.op_types, "fp32")
    assert list(plain["op"]).count("Add") == 2 and plain.iloc[0]["M"] == 64
    # training: the bias gradient (a column sum of dY) is reduced, as for the traced nn.Linear
    tr = step_kernels(pg.x, pg.op_types, "train", "fp32", edge_index=pg.edge_index)
    bw = tr[(tr["pass"] == "bw") & (tr["node"] == lin["node"])]
    assert len(bw) == len(backward_kernels(ref.to_frame().T.astype({"family": object}), "linear")) == 3
