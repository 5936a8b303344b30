"""Fused attention (ONNX ``Attention``, opset 23): ``softmax(Q K^T * scale + mask) V`` in one kernel.

Q: (B, H, L, E) or (B, L, H*E); K: (B, H_kv, S, E); V: (B, H_kv, S, E_v) (grouped-query attention
when H_kv < H: each query head still attends to S keys).  With a KV cache (``past_key``:
(B, H_kv, P, E)) each query attends to the P cached keys and the S new ones: S below stands for
P + S.  Scores Q K^T cost B H L S E MACs, the weighted sum of values B H L S E_v MACs;
FLOPs = 2 * MACs + (6 + m + 3 c) B H L S: scale 1 and softmax 5 per score, m = 1 when a mask is
added (an ``attn_mask`` input or ``is_causal``), c = 1 with a ``softcap`` (divide, tanh, multiply).
A causal kernel that skips the masked half is not assumed: the count is that of the dense scores,
as for the unfused form (MatMul, Softmax, MatMul).

Memory access is that of the inputs and outputs (Q, K, V, mask, cache in; Y and the present cache
out): a fused kernel keeps the L x S scores on chip, which is what sets it apart from the unfused
form, whose score tensors are read and written by each of its operators.
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
    masked = view.inp(3) is not None or bool(view.attr("is_causal", 0))
    per_score = 6 + (1 if masked else 0) + (3 if view.attr("softcap", 0.0) else 0)
    return OpCost(flops=2 * macs + per_score * scores, macs=macs,
                  hp={"num_heads": h, "mm_m": length, "in_features": e, "out_features": ev, "axis_size": s})
