"""Fused scaled-dot-product attention: the decomposed attention found in a graph, its kernels
fused into one (forward and backward) by hand-computed FLOPs and bytes, and the any-GPU model
costing it on the tensor cores where the software fuses it."""

from __future__ import annotations

import numpy as np
import pytest

from perfseer.devices import get_device
from perfseer.features import schema
from perfseer.specmodel import anygpu
from perfseer.specmodel.attention import attention_groups, fuse_attention
from perfseer.specmodel.compose import step_kernels

# batch 2 x 3 heads, 8 queries over 8 keys, head size 4 (FP32 graph bytes, 4 per element)
B, H, L, S, E = 2, 3, 8, 8, 4
BH = B * H


def _graph(both_scaled: bool = True, mask: bool = False, guard: bool = False):
    """The exporter's decomposition of ``scaled_dot_product_attention`` (``both_scaled``), or an
    explicit ``q * scale @ k.transpose(-2, -1)`` attention (one ``Mul``): node features and edges
    (``guard``: HF's ``Where(IsNaN(p), 0, p)`` after the softmax)."""
    names = ["Mul", "Transpose", "Mul", "MatMul", "Softmax", "MatMul"]
    if mask:
        names.insert(4, "Add")
    if guard:
        names[-1:-1] = ["IsNaN", "Where"]
    if not both_scaled:
        names.remove("Mul")  # the K side's scaling
    x = np.zeros((len(names), len(schema.NODE_FEATURES)))
    col = {n: i for i, n in enumerate(schema.NODE_FEATURES)}
    q, sc = BH * L * E * 4.0, BH * L * S * 4.0
    for i, op in enumerate(names):
        f = {}
        if op in ("Mul", "Transpose"):
            f = {"input_bytes": q, "output_bytes": q, "weight_bytes": 4.0 if op == "Mul" else 0.0,
                 "flops": BH * L * E if op == "Mul" else 0.0}
        elif op == "MatMul" and "Softmax" not in names[:i]:  # scores
            f = {"macs": BH * L * S * E, "flops": 2 * BH * L * S * E, "input_bytes": 2 * q, "output_bytes": sc,
                 "mm_m": L, "mm_batch": BH, "in_features": E, "out_features": S}
        elif op == "MatMul":  # weighted values
            f = {"macs": BH * L * S * E, "flops": 2 * BH * L * S * E, "input_bytes": sc + q, "output_bytes": q,
                 "mm_m": L, "mm_batch": BH, "in_features": S, "out_features": E}
        elif op == "Add":  # an additive mask of (heads, L, S), broadcast over the batch
            f = {"input_bytes": sc + H * L * S * 4.0, "output_bytes": sc, "flops": BH * L * S}
        elif op == "Softmax":
            f = {"input_bytes": sc, "output_bytes": sc, "axis_size": S}
        elif op in ("IsNaN", "Where"):
            f = {"input_bytes": sc, "output_bytes": sc / 4 if op == "IsNaN" else sc}
        for k, v in f.items():
            x[i, col[k]] = v
    at = {n: i for i, n in enumerate(names)}
    mm = [i for i, n in enumerate(names) if n == "MatMul"]
    muls = [i for i, n in enumerate(names) if n == "Mul"]
    edges = [(m, mm[0]) for m in muls]
    if both_scaled:
        edges.append((at["Transpose"], muls[1]))
    else:
        edges.append((at["Transpose"], mm[0]))
    if mask:
        edges += [(mm[0], at["Add"]), (at["Add"], at["Softmax"])]
    else:
        edges.append((mm[0], at["Softmax"]))
    if guard:
        edges += [(at["Softmax"], at["IsNaN"]), (at["Softmax"], at["Where"]), (at["IsNaN"], at["Where"]),
                  (at["Where"], mm[1])]
    else:
        edges.append((at["Softmax"], mm[1]))
    return x, names, np.array(edges, dtype=np.int64).T


def test_the_decomposed_attention_is_one_group_and_explicit_attention_none():
    x, ops, e = _graph()
    assert list(attention_groups(x, ops, e)) == [1] * 6
    x, ops, e = _graph(mask=True)
    assert list(attention_groups(x, ops, e)) == [1] * 7
    x, ops, e = _graph(mask=True, guard=True)
    assert list(attention_groups(x, ops, e)) == [1] * 9
    x, ops, e = _graph(both_scaled=False)  # the model's own attention: unfused under any PyTorch
    assert list(attention_groups(x, ops, e)) == [0] * 5
    assert list(attention_groups(*_graph()[:2], None)) == [0] * 6  # no edges: nothing found


def test_fused_kernel_by_hand():
    """Forward at fp16: FLOPs 2 (B H) L S (E + Ev) + 6 per score = 2*6*8*8*8 + 6*384 = 8448;
    bytes Q + K + V + O = 6 * (8*4 * 4) elements * 2 bytes = 1536 (the unfused form moves the
    384 scores four more times).  Backward: 2 (B H) L S (3 E + 2 Ev) + 8 per score = 15360 + 3072
    = 18432 FLOPs; reads Q, K, V, O, dO and writes dQ, dK, dV: 8 * 192 elements * 2 = 3072 bytes."""
    x, ops, e = _graph()
    t = step_kernels(x, ops, phase="train", precision="fp16", edge_index=e)
    assert len(t) > 2 and (t["attn"] == 1).all()
    f = fuse_attention(t)
    assert list(f["family"]) == ["attn", "attn"] and list(f["pass"]) == ["fw", "bw"]
    fw, bw = f.iloc[0], f.iloc[1]
    assert fw["flops"] == pytest.approx(8448.0)
    assert fw["bytes"] == pytest.approx(1536.0)
    assert (fw["B"], fw["M"], fw["N"], fw["K"], fw["cols"]) == (6, 8, 4, 8, 4)
    assert bw["flops"] == pytest.approx(18432.0)
    assert bw["bytes"] == pytest.approx(3072.0)
    assert fuse_attention(f).equals(f)  # fused once: nothing left to fuse


def test_mask_bytes_are_read_by_the_fused_kernel():
    """The additive mask (3 heads x 8 x 8, FP32 in the graph: 768 bytes, 384 at fp16) is read
    once more; the mask adds a FLOP per score (8448 + 384)."""
    x, ops, e = _graph(mask=True)
    f = fuse_attention(step_kernels(x, ops, phase="infer", precision="fp16", edge_index=e))
    assert len(f) == 1
    assert f["bytes"].iloc[0] == pytest.approx(1536.0 + 384.0)
    assert f["flops"].iloc[0] == pytest.approx(8448.0 + 384.0)
    assert f["inputs"].iloc[0] == 4


def test_other_kernels_keep_their_order():
    x, ops, e = _graph()
    x2 = np.vstack([x, x[[0]]])  # a seventh node after the attention, not part of it
    t = step_kernels(x2, ops + ["Mul"], phase="infer", precision="fp16", edge_index=e)
    f = fuse_attention(t)
    assert list(f["family"]) == ["attn", "vec"]
    assert list(f["attn"]) == [1, 0]


def test_anygpu_costs_it_on_the_tensor_cores():
    """At fp16 on an H100 the fused kernel is a tensor-core attention (code 6) at the FP16 peak;
    at fp32 on the CUDA cores (code 7); its time follows c_attn_tensor."""
    x, ops, e = _graph()
    t = fuse_attention(step_kernels(x, ops, phase="infer", precision="fp16", edge_index=e))
    t["scale"] = 1.0
    h100 = get_device("h100-sxm")
    a = anygpu.kernel_inputs(t, h100, "fp16")
    assert list(a["code"]) == [6]
    assert a["t_c0"][0] == pytest.approx(8448.0 / (h100.peak("fp16") * 1e6))
    assert a["dim_n"][0] == 1e9 and a["dim_k"][0] == 1e9  # no GEMM size terms
    assert list(anygpu.kernel_inputs(t, h100, "fp32")["code"]) == [7]
    th = dict(anygpu.INIT, kernel_floor=-20.0, overlap=3.0, peak_slope=0.0)
    d = anygpu.design([(t, h100, "fp16", 0.0)])
    slow = anygpu.kernel_us(dict(th, c_attn_tensor=3.0), d)[0]
    fast = anygpu.kernel_us(dict(th, c_attn_tensor=1.0), d)[0]
    assert slow > fast


def test_design_fuses_only_where_the_setting_does():
    x, ops, e = _graph()
    t = step_kernels(x, ops, phase="infer", precision="fp16", edge_index=e)
    t["scale"] = 1.0
    s = get_device("rtx4090")
    unfused = anygpu.design([(t, s, "fp16", 0.0, True, False)])
    fused = anygpu.design([(t, s, "fp16", 0.0, True, True)])
    assert (fused.code == 6).sum() == 1 and (unfused.code == 6).sum() == 0
    assert fused.t_m0.sum() < unfused.t_m0.sum()


def _card(params, fused=None):
    card = {"format": anygpu.CARD_FORMAT, "params": params, "overheads": {"pt2": [np.log(8.0), np.log(20.0)]},
            "default_setting": "pt2"}
    if fused is not None:
        card["fused_attention"] = {"pt2": fused}
    return card


def test_the_card_says_whether_answers_fuse_attention():
    x, ops, e = _graph()
    t = step_kernels(x, ops, phase="train", precision="fp16", edge_index=e)
    s = get_device("h100-sxm")
    old = {k: v for k, v in anygpu.INIT.items() if k not in anygpu.ATTENTION_PARAMS}
    m = anygpu.AnyGpuModel(_card(old))  # a card fitted before fused attention: the unfused kernels
    assert not m.fused_attention
    assert m.step_ms(t, s, "fp16")["kernel_us"].size > 2  # distinct kernels (repeats merged)
    with pytest.raises(anygpu.AnyGpuError, match="fused-attention constants"):
        m.step_ms(t, s, "fp16", fused_attention=True)
    with pytest.raises(anygpu.AnyGpuError, match="c_attn_tensor"):
        anygpu.AnyGpuModel(_card(old, fused=True))
    m = anygpu.AnyGpuModel(_card(dict(anygpu.INIT), fused=True))
    assert m.fused_attention
    fused = m.step_ms(t, s, "fp16")
    assert fused["kernel_us"].size == 2  # one forward and one backward kernel
    assert fused["latency_ms"] != m.step_ms(t, s, "fp16", fused_attention=False)["latency_ms"]
