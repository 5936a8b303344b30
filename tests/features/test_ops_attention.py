"""Fused attention (perfseer.features.ops.attention; ONNX ``Attention``, opset 23).

scores = B H L S (S: keys attended to, past + new); MACs = scores * E + scores * E_v;
FLOPs = 2 MACs + 6 scores (scale 1, softmax 5).
"""

from helpers import one_node
from op_testing import F32, check

OPS = ["Attention"]


def test_attention_4d():
    # Q (2, 4, 5, 8), K (2, 4, 6, 8), V (2, 4, 6, 16) -> Y (2, 4, 5, 16)
    pg = one_node("Attention", {"q": (2, 4, 5, 8), "k": (2, 4, 6, 8), "v": (2, 4, 6, 16)}, opset=23)
    scores = 2 * 4 * 5 * 6
    macs = scores * 8 + scores * 16
    check(pg, "Attention", macs=macs, flops=2 * macs + 6 * scores,
          num_heads=4, mm_m=5, in_features=8, out_features=16, axis_size=6,
          memory_access_bytes=(2 * 4 * 5 * 8 + 2 * 4 * 6 * 8 + 2 * 4 * 6 * 16 + 2 * 4 * 5 * 16) * F32)


def test_attention_3d_grouped_query():
    # 3-D inputs: Q (2, 5, 4 heads * 8), K (2, 6, 2 kv heads * 8), V (2, 6, 2 kv heads * 12)
    # -> Y (2, 5, 4 * 12)
    pg = one_node("Attention", {"q": (2, 5, 32), "k": (2, 6, 16), "v": (2, 6, 24)}, opset=23,
                  q_num_heads=4, kv_num_heads=2)
    scores = 2 * 4 * 5 * 6
    macs = scores * 8 + scores * 12
    check(pg, "Attention", macs=macs, flops=2 * macs + 6 * scores,
          num_heads=4, mm_m=5, in_features=8, out_features=12, axis_size=6,
          memory_access_bytes=(2 * 5 * 32 + 2 * 6 * 16 + 2 * 6 * 24 + 2 * 5 * 48) * F32)


def test_attention_with_kv_cache():
    # 3 cached + 6 new keys: every query attends to S = 9 keys.  Outputs: Y (2, 4, 5, 16),
    # present_key (2, 4, 9, 8), present_value (2, 4, 9, 16)
    pg = one_node("Attention", {"q": (2, 4, 5, 8), "k": (2, 4, 6, 8), "v": (2, 4, 6, 16),
                                "past_k": (2, 4, 3, 8), "past_v": (2, 4, 3, 16)},
                  input_order=["q", "k", "v", "", "past_k", "past_v"], n_outputs=3, opset=23)
    scores = 2 * 4 * 5 * (3 + 6)
    macs = scores * 8 + scores * 16
    check(pg, "Attention", macs=macs, flops=2 * macs + 6 * scores, axis_size=3 + 6, num_heads=4,
          input_bytes=(2 * 4 * 5 * 8 + 2 * 4 * 6 * 8 + 2 * 4 * 6 * 16 + 2 * 4 * 3 * 8 + 2 * 4 * 3 * 16) * F32,
          output_bytes=(2 * 4 * 5 * 16 + 2 * 4 * 9 * 8 + 2 * 4 * 9 * 16) * F32)


def test_attention_mask_and_causal_add_one_flop_per_score():
    # A float mask (5, 6) broadcast over batch and heads is added to every score: 7 FLOPs per
    # score besides the matmuls; is_causal (a mask the kernel builds itself) costs the same.
    scores = 2 * 4 * 5 * 6
    macs = scores * 8 + scores * 8
    pg = one_node("Attention", {"q": (2, 4, 5, 8), "k": (2, 4, 6, 8), "v": (2, 4, 6, 8), "mask": (5, 6)},
                  opset=23)
    check(pg, "Attention", macs=macs, flops=2 * macs + 7 * scores,
          input_bytes=(2 * 4 * 5 * 8 + 2 * 2 * 4 * 6 * 8 + 5 * 6) * F32)
    causal = one_node("Attention", {"q": (2, 4, 5, 8), "k": (2, 4, 6, 8), "v": (2, 4, 6, 8)}, opset=23,
                      is_causal=1)
    check(causal, "Attention", macs=macs, flops=2 * macs + 7 * scores)


def test_attention_softcap_and_grouped_query_4d():
    # 4-D grouped-query attention: 8 query heads over 2 key/value heads, each query head scores
    # all 6 keys; a softcap (divide, tanh, multiply) adds 3 FLOPs per score.
    pg = one_node("Attention", {"q": (1, 8, 5, 16), "k": (1, 2, 6, 16), "v": (1, 2, 6, 16)}, opset=23,
                  softcap=30.0)
    scores = 1 * 8 * 5 * 6
    macs = scores * 16 * 2
    check(pg, "Attention", macs=macs, flops=2 * macs + 9 * scores, num_heads=8,
          memory_access_bytes=(8 * 5 * 16 + 2 * 2 * 6 * 16 + 8 * 5 * 16) * F32)
