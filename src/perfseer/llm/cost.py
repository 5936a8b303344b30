"""The operators of one forward step of a decoder, with their FLOPs and bytes.

A step (:class:`StepShape`) runs ``tokens`` new tokens of ``seqs`` sequences at once: a prefill of
``P`` tokens is one sequence with ``P`` new tokens and no past; a decode step of a batch of ``B``
is ``B`` sequences of one new token each over their past context; vLLM's mixed steps (a prefill
chunk beside decoding sequences) are both at once.  :func:`step_ops` lists the step's operators,
each once per layer it runs in (``count``), on one GPU of a tensor-parallel group of ``tp``:

- ``embedding``: a gather of ``tokens`` rows of the embedding matrix;
- per layer: ``input_norm``, ``qkv_proj`` (or MLA's ``q_proj``/``kv_a_proj``/``kv_b_proj``),
  ``rope``, ``attn_prefill`` (FlashAttention over the causal pairs: ``4 x head_dim`` FLOPs per
  query-key pair and head) and ``attn_decode`` (paged attention: reads each sequence's whole KV
  cache), ``kv_write``, ``out_proj``, ``post_norm``, ``mlp_up`` (gate and up together when gated),
  ``mlp_act``, ``mlp_down``, ``residual_add``; a mixture of experts replaces the MLP with
  ``router`` and ``experts_*`` (the experts the step's tokens route to: their weights are read
  once each) plus ``shared_expert_*``;
- ``final_norm`` and ``lm_head`` (the logits of the last token of each sequence only, as vLLM
  computes them), ``sampling`` (a softmax over the vocabulary);
- with ``tp > 1``: ``allreduce`` of the hidden state twice per layer (after the output and down
  projections), ``lm_head_gather`` of the logits.

GEMM rows carry ``M, N, K`` (for the time model's tiling) and their weight bytes.  Sliding-window
layers attend over at most the window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from perfseer.llm.config import ModelConfig
from perfseer.llm.precision import Quant

# FLOPs per element of the element-wise kernels (as the PerfGraph costs them)
_NORM_FLOPS = {"rmsnorm": 4.0, "layernorm": 8.0}
_ACT_FLOPS = {"silu": 5.0, "gelu": 8.0, "gegelu": 9.0, "relu": 1.0}


@dataclass(frozen=True)
class StepShape:
    """What one forward step processes (aggregates over its sequences).

    Attributes:
        tokens: new tokens in the step (all sequences).
        seqs: sequences in the step (rows of logits).
        pf_pairs / pf_pairs_w: causal query-key pairs of the prefilling sequences (without / with
            the sliding window); ``pf_ctx`` / ``pf_ctx_w``: their context tokens (KV read once).
        dc_seqs: decoding sequences (one new token each); ``dc_ctx`` / ``dc_ctx_w``: the context
            tokens their attention reads (without / with the window).
    """

    tokens: int
    seqs: int
    pf_pairs: float = 0.0
    pf_pairs_w: float = 0.0
    pf_ctx: float = 0.0
    pf_ctx_w: float = 0.0
    dc_seqs: int = 0
    dc_ctx: float = 0.0
    dc_ctx_w: float = 0.0

    @classmethod
    def of(cls, parts, window: int = 0) -> StepShape:
        """From ``(new_tokens, past_tokens)`` per sequence (``new == 1`` and ``past > 0``: decoding)."""
        tokens = seqs = dc_seqs = 0
        pf_pairs = pf_pairs_w = pf_ctx = pf_ctx_w = dc_ctx = dc_ctx_w = 0.0
        w = window
        for new, past in parts:
            ctx = new + past
            tokens += new
            seqs += 1
            cw = min(ctx, w) if w else ctx
            if new == 1 and past > 0:
                dc_seqs += 1
                dc_ctx += ctx
                dc_ctx_w += cw
                continue
            # causal pairs of the new tokens: each attends to the past and to the new tokens before it
            pairs = new * past + new * (new + 1) / 2
            pf_pairs += pairs
            pf_ctx += ctx
            pf_ctx_w += cw
            # with a window w, query i (1-based over the context) sees min(i, w) keys
            pf_pairs_w += (_seen(ctx, w) - _seen(past, w)) if w else pairs
        return cls(tokens=tokens, seqs=seqs, pf_pairs=pf_pairs, pf_pairs_w=pf_pairs_w, pf_ctx=pf_ctx,
                   pf_ctx_w=pf_ctx_w, dc_seqs=dc_seqs, dc_ctx=dc_ctx, dc_ctx_w=dc_ctx_w)

    @classmethod
    def prefill(cls, batch: int, prompt: int, window: int = 0) -> StepShape:
        return cls.of([(prompt, 0)] * batch, window)

    @classmethod
    def decode(cls, batch: int, context: int, window: int = 0) -> StepShape:
        """``batch`` sequences each generating one token with ``context`` tokens before it."""
        return cls.of([(1, context)] * batch, window)


def _seen(n: float, w: int) -> float:
    """Keys seen by queries 1..n under a window of ``w``: ``sum_{i<=n} min(i, w)``."""
    return n * (n + 1) / 2 if n <= w else w * (w + 1) / 2 + (n - w) * w


@dataclass(frozen=True)
class Op:
    """One operator of a step, on one GPU, run ``count`` times (once per layer it is in).

    ``kind``: ``gemm`` (``M x K @ K x N``, ``weight_bytes`` of it weights), ``moe`` (grouped
    expert GEMMs), ``attn_prefill``, ``attn_decode``, ``norm``, ``rope``, ``act``, ``add``, ``emb``,
    ``copy`` (KV-cache writes), ``softmax``, ``allreduce`` / ``allgather`` (``bytes``: the message).
    """

    name: str
    kind: str
    flops: float
    bytes: float
    count: int = 1
    M: float = 0.0
    N: float = 0.0
    K: float = 0.0
    weight_bytes: float = 0.0


def _gemm(name: str, M: float, K: float, N: float, q: Quant, count: int, bias: bool = False) -> Op:
    w = K * N * q.w_bytes + (N * q.a_bytes if bias else 0.0)
    byts = M * K * q.gemm_in_bytes + w + M * N * q.a_bytes
    return Op(name, "gemm", 2.0 * M * N * K + (M * N if bias else 0.0), byts, count, M=M, N=N, K=K, weight_bytes=w)


def _vec(name: str, kind: str, elems: float, reads: float, flops_per: float, ab: float, count: int,
         extra_bytes: float = 0.0) -> Op:
    return Op(name, kind, elems * flops_per, elems * (reads + 1.0) * ab + extra_bytes, count)


def step_ops(cfg: ModelConfig, q: Quant, s: StepShape, tp: int = 1) -> list[Op]:
    """The operators of one step of ``s`` on one of ``tp`` tensor-parallel GPUs (see the module doc)."""
    if s.tokens <= 0:
        return []
    T, h, L, ab = float(s.tokens), float(cfg.hidden), cfg.layers, q.a_bytes
    heads, kvh, hd = cfg.heads / tp, max(cfg.kv_heads / tp, 1.0), float(cfg.head_dim)
    nf = _NORM_FLOPS.get(cfg.norm, 6.0)
    n_norm = cfg.norms_per_layer
    ops = [Op("embedding", "emb", 0.0, T * h * ab * 2 + T * 8, 1)]
    ops.append(_vec("input_norm", "norm", T * h, 1, nf, ab, L * (2 if n_norm == 4 else 1), extra_bytes=h * ab))

    # attention projections and the KV cache
    kv_el = _attn_dims(cfg, tp)[1]
    if cfg.mla:
        m = cfg.mla
        qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        if m.get("q_lora_rank"):
            ops.append(_gemm("q_a_proj", T, h, m["q_lora_rank"], q, L))
            ops.append(_gemm("q_b_proj", T, m["q_lora_rank"], heads * qk, q, L))
        else:
            ops.append(_gemm("q_proj", T, h, heads * qk, q, L))
        ops.append(_gemm("kv_a_proj", T, h, m["kv_lora_rank"] + m["qk_rope_head_dim"], q, L))
        # prefill expands the latent of every context token; decode absorbs W_UK/W_UV into the query
        # and output (one GEMM each way over the new tokens)
        pf_rows = s.pf_ctx
        if pf_rows:
            ops.append(_gemm("kv_b_proj", pf_rows, m["kv_lora_rank"], heads * (m["qk_nope_head_dim"] + m["v_head_dim"]),
                             q, L))
        if s.dc_seqs:
            ops.append(_gemm("q_absorb", s.dc_seqs * heads, m["qk_nope_head_dim"], m["kv_lora_rank"], q, L))
            ops.append(_gemm("o_absorb", s.dc_seqs * heads, m["kv_lora_rank"], m["v_head_dim"], q, L))
        rot = float(m["qk_rope_head_dim"])
        o_in = heads * float(m["v_head_dim"])
        rope_elems = T * (heads + 1) * rot
    else:
        nqkv = (heads + 2 * kvh) * hd
        ops.append(_gemm("qkv_proj", T, h, nqkv, q, L, bias=cfg.bias or cfg.qkv_bias))
        o_in = heads * hd
        rope_elems = T * (heads + kvh) * hd * cfg.rotary_fraction
    if cfg.rope:
        ops.append(_vec("rope", "rope", rope_elems, 1, 4.0, ab, L, extra_bytes=T * hd * 4))
    ops.append(Op("kv_write", "copy", 0.0, T * kv_el * (ab + q.kv_bytes), L))

    ops.extend(attention_ops(cfg, q, s, tp))

    ops.append(_gemm("out_proj", T, o_in, h, q, L, bias=cfg.bias))
    if tp > 1:
        ops.append(Op("allreduce", "allreduce", 0.0, T * h * ab, L * (1 if cfg.parallel_block else 2)))
    if not cfg.parallel_block:
        ops.append(_vec("post_norm", "norm", T * h, 1, nf, ab, L * (2 if n_norm == 4 else 1), extra_bytes=h * ab))

    # MLP: dense layers, then mixture-of-experts layers
    act_f = _ACT_FLOPS.get(cfg.act, 6.0)
    dense_n = L - cfg.moe_layers
    dense_w = float((cfg.dense_ffn or cfg.ffn) if cfg.is_moe else cfg.ffn) / tp
    up_mult = 2 if cfg.gated_mlp else 1
    if dense_n:
        ops.append(_gemm("mlp_up", T, h, up_mult * dense_w, q, dense_n, bias=cfg.bias))
        ops.append(_vec("mlp_act", "act", T * dense_w, up_mult, act_f, ab, dense_n))
        ops.append(_gemm("mlp_down", T, dense_w, h, q, dense_n, bias=cfg.bias))
    if cfg.is_moe:
        Lm, E, k = cfg.moe_layers, cfg.experts, cfg.experts_per_token
        ops.append(_gemm("router", T, h, E, q, Lm))
        ops.append(Op("router_topk", "act", T * E * 6.0, T * E * 4.0 * 2, Lm))
        ew = float(cfg.ffn) / tp
        # experts the step's tokens route to (uniform routing, expected distinct experts)
        active = E * (1.0 - (1.0 - k / E) ** T)
        per_expert = T * k / active
        for name, K_, N_ in (("experts_up", h, up_mult * ew), ("experts_down", ew, h)):
            w = active * K_ * N_ * q.w_bytes
            ops.append(Op(name, "moe", 2.0 * T * k * K_ * N_,
                          w + T * k * (K_ * q.gemm_in_bytes + N_ * ab), Lm, M=per_expert, N=N_, K=K_, weight_bytes=w))
        ops.append(_vec("experts_act", "act", T * k * ew, up_mult, act_f, ab, Lm))
        ops.append(_vec("experts_combine", "add", T * h, k, 2.0 * k, ab, Lm))
        sh = float(cfg.shared_expert_ffn or cfg.shared_experts * cfg.ffn) / tp
        if sh:
            ops.append(_gemm("shared_expert_up", T, h, up_mult * sh, q, Lm))
            ops.append(_vec("shared_expert_act", "act", T * sh, up_mult, act_f, ab, Lm))
            ops.append(_gemm("shared_expert_down", T, sh, h, q, Lm))
    if tp > 1 and not cfg.parallel_block:
        pass  # the MLP's all-reduce is the second of the two counted above
    ops.append(_vec("residual_add", "add", T * h, 2, 1.0, ab, L * (1 if cfg.parallel_block else 2)))

    # head
    S = float(s.seqs)
    ops.append(_vec("final_norm", "norm", S * h, 1, nf, ab, 1))
    # int4 checkpoints (AWQ, GPTQ) keep the LM head at 16 bits, as weight_bytes counts it
    head_q = replace(q, w_bytes=q.a_bytes, gemm_in_bytes=q.a_bytes) if q.precision == "int4" else q
    ops.append(_gemm("lm_head", S, h, float(cfg.vocab) / tp, head_q, 1))
    if tp > 1:
        ops.append(Op("lm_head_gather", "allgather", 0.0, S * cfg.vocab / tp * 4.0, 1))
    ops.append(Op("sampling", "softmax", S * cfg.vocab * 5.0, S * cfg.vocab * 4.0 * 2, 1))
    return ops


def _attn_dims(cfg: ModelConfig, tp: int) -> tuple:
    """Per-GPU heads, KV elements per token and layer, and the head widths of attention."""
    heads = cfg.heads / tp
    if cfg.mla:
        m = cfg.mla
        qk, v = float(m["qk_nope_head_dim"] + m["qk_rope_head_dim"]), float(m["v_head_dim"])
        return heads, float(cfg.kv_elems_per_token_layer()), qk, v, float(m["kv_lora_rank"] + m["qk_rope_head_dim"]), \
            float(m["kv_lora_rank"])
    hd = float(cfg.head_dim)
    return heads, 2 * max(cfg.kv_heads / tp, 1.0) * hd, hd, hd, hd, hd


def attention_ops(cfg: ModelConfig, q: Quant, s: StepShape, tp: int = 1) -> list[Op]:
    """The attention operators of a step (what changes with the context; the rest does not)."""
    heads, kv_el, qk_dim, v_dim, dc_qk, dc_v = _attn_dims(cfg, tp)
    L, ab, T = cfg.layers, q.a_bytes, float(s.tokens)
    ops = []
    # attention: full and sliding-window layers
    n_win = (L // cfg.sliding_every if cfg.sliding_every > 1 else L) if cfg.sliding_window else 0
    groups = [(L - n_win, s.pf_pairs, s.pf_ctx, s.dc_ctx), (n_win, s.pf_pairs_w, s.pf_ctx_w, s.dc_ctx_w)]
    for n_layers, pairs, pf_ctx, dc_ctx in groups:
        if not n_layers:
            continue
        suffix = "" if n_layers == L else ("_window" if n_layers == n_win else "_global")
        if pairs:
            pf_tokens = T - s.dc_seqs
            ops.append(Op("attn_prefill" + suffix, "attn_prefill", 2.0 * pairs * heads * (qk_dim + v_dim),
                          pf_tokens * heads * (qk_dim + v_dim) * ab + pf_ctx * kv_el * q.kv_bytes, n_layers))
        if s.dc_seqs:
            ops.append(Op("attn_decode" + suffix, "attn_decode", 2.0 * dc_ctx * heads * (dc_qk + dc_v),
                          dc_ctx * kv_el * q.kv_bytes + s.dc_seqs * heads * (dc_qk + dc_v) * ab, n_layers))

    return ops


def step_flops(ops: list[Op]) -> float:
    """FLOPs of a step on one GPU (each operator times its count)."""
    return float(sum(o.flops * o.count for o in ops))


def weight_bytes(cfg: ModelConfig, q: Quant, tp: int = 1) -> float:
    """Bytes of the weights one of ``tp`` GPUs holds (embedding and norms at the activation type,
    the rest at the weights' format; tied embeddings once)."""
    p = cfg.params()
    emb = p["embedding"] * q.a_bytes
    head = p["lm_head"] * (q.w_bytes if q.precision not in ("int4",) else q.a_bytes)
    rest = (p["total"] - p["embedding"] - p["lm_head"]) * q.w_bytes
    return (emb + head + rest) / tp


def kv_bytes_per_token(cfg: ModelConfig, q: Quant, tp: int = 1) -> float:
    """KV-cache bytes one token takes on one of ``tp`` GPUs (all layers): ``2 x layers x kv_heads
    x head_dim x bytes`` (MLA: ``layers x (kv_lora_rank + rope dim) x bytes``, replicated)."""
    per_layer = cfg.kv_elems_per_token_layer()
    if not cfg.mla:
        per_layer = 2 * max(cfg.kv_heads / tp, 1.0) * cfg.head_dim
    return float(cfg.layers * per_layer * q.kv_bytes)
