"""Hand counts of parameters, MACs and FLOPs of GPT-2, BERT (masked LM) and OPT, as perfseer
exports them (the conventions are in the docstring of ``tests/graph/test_hf.py``).

Notation: B batch, S tokens, d hidden size, h heads, f feed-forward width, L layers, V vocabulary,
P positions.  Returns ``(params, macs, flops)``.
"""

from __future__ import annotations


def gpt2_counts(d, L, h, V, P, S, B=1):
    """GPT2LMHeadModel (f = 4d; LM head tied to the token embedding)."""
    f = 4 * d
    # per layer: ln_1 2d, c_attn 3d^2+3d, c_proj d^2+d, ln_2 2d, c_fc df+f, c_proj fd+d
    params = V * d + P * d + L * (4 * d * d + 2 * d * f + 9 * d + f) + 2 * d
    # per layer: qkv 3Sd^2, QK^T S^2 d, PV S^2 d, proj Sd^2, MLP 2Sdf; LM head SdV
    macs = B * (L * (4 * S * d * d + 2 * S * d * f + 2 * S * S * d) + S * d * V)
    # per layer: LN 2*7Sd, biases S(3d+d+f+d), SDPA scales 2Sd, residuals 2Sd, gelu_new 8Sf,
    # 8 per score; embeddings add Sd, final LN 7Sd
    flops = 2 * macs + B * (L * (23 * S * d + 9 * S * f + 8 * h * S * S) + 8 * S * d)
    return params, macs, flops


def bert_mlm_counts(d, L, h, f, V, P, S, B=1, T=2):
    """BertForMaskedLM (decoder tied to the word embedding; its bias is its own)."""
    # embeddings (word, position, token type, LN); per layer qkv 3(d^2+d), out d^2+d, LN 2d,
    # intermediate df+f, output fd+d, LN 2d; head: transform d^2+d, LN 2d, decoder bias V
    params = V * d + P * d + T * d + 2 * d + L * (4 * d * d + 2 * d * f + 9 * d + f) + d * d + 3 * d + V
    macs = B * (L * (4 * S * d * d + 2 * S * d * f + 2 * S * S * d) + S * d * d + S * d * V)
    # per layer: biases S(5d+f), SDPA scales 2Sd, residuals 2Sd, LN 14Sd, Gelu 5Sf, 8 per score;
    # embeddings 2 adds + LN = 9Sd; head bias Sd, Gelu 5Sd, LN 7Sd, decoder bias SV
    flops = 2 * macs + B * (L * (23 * S * d + 6 * S * f + 8 * h * S * S) + 22 * S * d + S * V)
    return params, macs, flops


def opt_counts(d, L, h, f, V, P, S, B=1):
    """OPTForCausalLM with word_embed_proj_dim = d (LM head tied; positions offset by 2)."""
    # per layer: q,k,v,o 4(d^2+d), 2 LN 4d, fc1 df+f, fc2 fd+d; final LN 2d
    params = V * d + (P + 2) * d + L * (4 * d * d + 2 * d * f + 9 * d + f) + 2 * d
    macs = B * (L * (4 * S * d * d + 2 * S * d * f + 2 * S * S * d) + S * d * V)
    # per layer: biases S(5d+f), q scaling Sd + SDPA scales 2Sd, residuals 2Sd, LN 14Sd, ReLU Sf,
    # 8 per score; position add Sd, final LN 7Sd
    flops = 2 * macs + B * (L * (24 * S * d + 2 * S * f + 8 * h * S * S) + 8 * S * d)
    return params, macs, flops
