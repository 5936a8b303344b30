"""Fused attention (ONNX ``Attention``, opset 23).

Q: (B, H, L, E) or (B, L, H*E); K: (B, H_kv, S, E); V: (B, H_kv, S, E_v).  With a KV cache
(``past_key``: (B, H_kv, P, E)) each query attends to the P cached keys and the S new ones: S
below stands for P + S.  Scores Q K^T cost B H L S E MACs, the weighted sum of values
B H L S E_v MACs; FLOPs = 2 * MACs + 6 B H L S (scale: 1, softmax: 5 per score).
"""

from __future__ import annotations

from perfseer.features.ops.registry import NodeView, OpCost, register


@register("Attention")
def attention(view: NodeView) -> OpCost:
    q, k, v = view.inp(0), view.inp(1), view.inp(2)
    if q.rank == 4:
        b, h, length, e = q.shape
        s, ev = k.shape[2], v.shape[3]
    else:
        h = view.attr("q_num_heads", 1)
        kv_heads = view.attr("kv_num_heads", h)
        b, length, e = q.shape[0], q.shape[1], q.shape[2] // h
        s, ev = k.shape[1], v.shape[2] // kv_heads
    past = view.inp(4)
    if past is not None:
        s += past.shape[2]
    scores = float(b) * h * length * s
    macs = scores * e + scores * ev
    return OpCost(flops=2 * macs + 6 * scores, macs=macs,
                  hp={"num_heads": h, "mm_m": length, "in_features": e, "out_features": ev, "axis_size": s})
