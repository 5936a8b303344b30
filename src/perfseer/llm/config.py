"""A decoder-only LLM's shape (:class:`ModelConfig`): from the bundled facts or a local ``config.json``.

The bundled file ``perfseer/llm/data/models.json`` holds the shapes of published models, each
with its ``source`` (the model's ``config.json`` on the Hugging Face hub); nothing is downloaded at
run time.  A local Hugging Face ``config.json`` (or a folder holding one) is read as plain JSON:
the classes it names are never imported, and no code from it runs.

Example::

    from perfseer.llm.config import load_config

    cfg = load_config("llama-3-8b")          # or "meta-llama/Meta-Llama-3-8B", or "./config.json"
    cfg.kv_heads, cfg.head_dim               # 8, 128
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path

from perfseer.errors import PerfseerError

DATA = Path(__file__).resolve().parent / "data"
NORMS = ("rmsnorm", "layernorm")
# model_type values of encoder-only / encoder-decoder / vision models: no decoder to cost
_NOT_DECODERS = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "t5", "mt5", "bart",
                 "mbart", "marian", "pegasus", "whisper", "vit", "clip", "swin", "convnext", "resnet", "wav2vec2",
                 "xlm-roberta", "mpnet", "longt5", "umt5", "blip", "sam"}
# HF families whose config.json leaves tie_word_embeddings out and ties them (the class default)
_TIED_BY_DEFAULT = {"gpt2", "gpt_neo", "gptj", "gemma", "gemma2", "starcoder2", "opt", "bloom", "phi3small"}


class LLMConfigError(PerfseerError):
    """An LLM that cannot be costed: unknown name, unreadable or non-decoder config.json."""


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only transformer, as the cost model needs it.

    Attributes:
        name: the model's name (bundled name, or the config file's path).
        hidden, layers, heads, kv_heads, head_dim: width, depth, query and key/value heads (GQA:
            ``kv_heads < heads``; MQA: 1), per-head width.
        ffn: the MLP's intermediate width (per expert for a mixture of experts).
        vocab: vocabulary size; ``max_context`` the longest context the model takes.
        gated_mlp: gate and up projections (SwiGLU/GeGLU) rather than one up projection.
        norm: ``rmsnorm`` or ``layernorm``; ``norms_per_layer`` 2 (Gemma-2: 4; a parallel block: 1).
        act: the MLP activation (``silu``, ``gelu``...).
        rope, rotary_fraction: rotary position embedding on this share of each head.
        tied_embeddings: the LM head shares the embedding matrix (counted once in memory).
        bias, qkv_bias: linear layers with biases (all / only QKV).
        parallel_block: attention and MLP read the same normed input (Phi-2).
        sliding_window, sliding_every: the attention window, on every layer (1) or every other (2).
        experts, experts_per_token, shared_experts, shared_expert_ffn: mixture of experts (0: dense).
        dense_layers, dense_ffn: leading dense layers of a MoE model (DeepSeek) and their width.
        mla: multi-head latent attention (DeepSeek): ``kv_lora_rank``, ``q_lora_rank``,
            ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``; ``None`` otherwise.
        source: where the shape comes from.
    """

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    max_context: int
    head_dim: int = 0
    gated_mlp: bool = True
    norm: str = "rmsnorm"
    norms_per_layer: int = 2
    act: str = "silu"
    rope: bool = True
    rotary_fraction: float = 1.0
    tied_embeddings: bool = False
    bias: bool = False
    qkv_bias: bool = False
    parallel_block: bool = False
    sliding_window: int = 0
    sliding_every: int = 1
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    shared_expert_ffn: int = 0
    dense_layers: int = 0
    dense_ffn: int = 0
    mla: dict | None = None
    family: str = ""
    hf_id: str = ""
    source: str = ""
    notes: str = ""
    aliases: tuple = field(default=(), repr=False)

    def __post_init__(self):
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    def kv_elems_per_token_layer(self) -> int:
        """Elements of the KV cache one token adds in one layer: ``2 x kv_heads x head_dim`` (MLA:
        the compressed latent plus the rotary key, ``kv_lora_rank + qk_rope_head_dim``)."""
        if self.mla:
            return int(self.mla["kv_lora_rank"] + self.mla["qk_rope_head_dim"])
        return 2 * self.kv_heads * self.head_dim

    def params(self) -> dict:
        """Parameter counts: ``total`` (what is stored), ``active`` (what one token reads: MoE counts
        its routed experts only), ``embedding``, ``lm_head`` (0 when tied)."""
        h, L = self.hidden, self.layers
        attn = self._attn_params()
        mlp_dense = (3 if self.gated_mlp else 2) * h * self.ffn
        norms = self.norms_per_layer * h * (2 if self.norm == "layernorm" else 1)
        if self.is_moe:
            one = (3 if self.gated_mlp else 2) * h * self.ffn
            shared = (3 if self.gated_mlp else 2) * h * (self.shared_expert_ffn or self.shared_experts * self.ffn)
            dense = (3 if self.gated_mlp else 2) * h * (self.dense_ffn or self.ffn)
            moe_total = self.moe_layers * (self.experts * one + shared + h * self.experts)
            moe_active = self.moe_layers * (self.experts_per_token * one + shared + h * self.experts)
            mlp_total = moe_total + self.dense_layers * dense
            mlp_active = moe_active + self.dense_layers * dense
        else:
            mlp_total = mlp_active = L * mlp_dense
        emb = self.vocab * h
        head = 0 if self.tied_embeddings else self.vocab * h
        base = L * (attn + norms) + emb + head + h
        return {"total": base + mlp_total, "active": base + mlp_active, "embedding": emb, "lm_head": head}

    def _attn_params(self) -> int:
        h = self.hidden
        if self.mla:
            m = self.mla
            qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
            q = (h * m["q_lora_rank"] + m["q_lora_rank"] * self.heads * qk) if m.get("q_lora_rank") else h * self.heads * qk
            kv = h * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) + m["kv_lora_rank"] * self.heads * (
                m["qk_nope_head_dim"] + m["v_head_dim"])
            return q + kv + self.heads * m["v_head_dim"] * h
        qkv = h * (self.heads + 2 * self.kv_heads) * self.head_dim
        return qkv + self.heads * self.head_dim * h

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["aliases"] = list(self.aliases)
        return out


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9.]", "", str(name).lower().split("/")[-1])


@lru_cache(maxsize=1)
def _bundled() -> tuple[dict, dict]:
    obj = json.loads((DATA / "models.json").read_text())
    by_name, index = {}, {}
    for d in obj["models"]:
        d = dict(d)
        d["aliases"] = tuple(d.get("aliases", ()))
        by_name[d["name"]] = d
        for a in (d["name"], d.get("hf_id", ""), *d["aliases"]):
            if a:
                index.setdefault(_key(a), d["name"])
                index.setdefault(a.lower(), d["name"])
    return by_name, index


def list_models() -> list[ModelConfig]:
    """The bundled model shapes, by name."""
    by_name, _ = _bundled()
    return [ModelConfig(**by_name[n]) for n in sorted(by_name)]


def load_config(model: str | dict | ModelConfig) -> ModelConfig:
    """The :class:`ModelConfig` of ``model``: a bundled name or alias (``llama-3-8b``,
    ``meta-llama/Meta-Llama-3-8B``, ``hf:...`` prefix allowed), the path of a local ``config.json``
    or of a folder holding one, a parsed config dict, or a :class:`ModelConfig`.

    Raises:
        LLMConfigError: an unknown name (close matches listed), an unreadable file, or a config
            that does not describe a decoder-only model.
    """
    if isinstance(model, ModelConfig):
        return model
    if isinstance(model, dict):
        return from_hf_config(model, name="config")
    if not isinstance(model, str) or not model.strip():
        raise LLMConfigError(f"model must be a name or a config.json path, got {model!r}",
                             "pass e.g. 'llama-3-8b' (perfseer llm --list) or ./config.json")
    text = model.strip()
    p = Path(text).expanduser()
    if text.endswith(".json") or p.is_dir() or p.is_file():
        return read_config_file(p)
    return bundled_config(text)


def bundled_config(name: str) -> ModelConfig:
    """The bundled model ``name`` (a name, alias or Hugging Face id; ``hf:`` prefix allowed).
    Never reads a file: what the service calls.

    Raises:
        LLMConfigError: an unknown name (close matches listed).
    """
    text = str(name).strip()
    name = text.removeprefix("hf:")
    by_name, index = _bundled()
    canon = index.get(name.lower()) or index.get(_key(name))
    if canon is None:
        hf = _hf_table_config(name)
        if hf is not None:
            return hf
        close = difflib.get_close_matches(_key(name), [k for k in index if "/" not in k], n=5, cutoff=0.5)
        close = sorted({index[c] for c in close})
        raise LLMConfigError(
            f"unknown LLM {text!r}" + (f"; close matches: {', '.join(close)}" if close else ""),
            "use a bundled name (perfseer llm --list) or the path of the model's config.json "
            "(downloaded from its Hugging Face page; perfseer does not go online)")
    return ModelConfig(**by_name[canon])


def _hf_table_config(name: str) -> ModelConfig | None:
    """A model of the project's table of Hugging Face configurations (``hf:`` references,
    ``perfseer/sources/hf_configs.json``), by id or alias; ``None`` if it is not there."""
    path = Path(__file__).resolve().parents[1] / "sources" / "hf_configs.json"
    try:
        models = json.loads(path.read_text())["models"]
    except (OSError, ValueError, KeyError):
        return None
    low = name.lower()
    for hid, entry in models.items():
        keys = {hid.lower(), hid.lower().split("/")[-1], *(a.lower() for a in entry.get("aliases", []))}
        if low in keys:
            cfg = from_hf_config(dict(entry["config"]), name=hid)
            return ModelConfig(**{**cfg.to_dict(), "aliases": (), "hf_id": hid, "source": entry.get("source", "")})
    return None


def read_config_file(path: Path) -> ModelConfig:
    """A :class:`ModelConfig` from a local Hugging Face ``config.json`` (or a folder holding one)."""
    p = path / "config.json" if path.is_dir() else path
    try:
        obj = json.loads(p.read_text())
    except FileNotFoundError:
        raise LLMConfigError(f"config file {p} does not exist", "pass the path of a model's config.json") from None
    except (OSError, ValueError) as e:
        raise LLMConfigError(f"config file {p} is not readable JSON ({e})", "pass a Hugging Face config.json") from e
    if not isinstance(obj, dict):
        raise LLMConfigError(f"config file {p} is not a JSON object", "pass a Hugging Face config.json")
    return from_hf_config(obj, name=str(p))


def _int(obj: dict, keys, where: str, default=None, required=True) -> int | None:
    for k in keys:
        v = obj.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or int(v) != v:
                raise LLMConfigError(f"{where}: '{k}' must be a positive integer, got {v!r}", f"fix '{k}'")
            if v > 1e9:
                raise LLMConfigError(f"{where}: '{k}' = {v} is beyond any published model", f"fix '{k}'")
            return int(v)
    if default is not None or not required:
        return default
    raise LLMConfigError(f"{where}: none of {', '.join(keys)} is given", f"add \"{keys[0]}\" to the config")


def from_hf_config(obj: dict, name: str = "config") -> ModelConfig:
    """A :class:`ModelConfig` from a parsed Hugging Face ``config.json`` (plain keys only).

    Reads the Llama-style keys (``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads``, ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``,
    ``head_dim``, ``sliding_window``, ``tie_word_embeddings``), GPT-2 style ones (``n_embd``,
    ``n_layer``, ``n_head``), Mixtral / Qwen-MoE / DeepSeek expert keys and DeepSeek's MLA ranks.

    Raises:
        LLMConfigError: an encoder or encoder-decoder model, or a missing / bad size.
    """
    where = f"config {name}"
    mtype = str(obj.get("model_type", "")).lower()
    archs = [str(a) for a in obj.get("architectures") or []]
    if obj.get("is_encoder_decoder") or mtype in _NOT_DECODERS or (
            archs and not any(("CausalLM" in a or "LMHeadModel" in a) for a in archs)):
        raise LLMConfigError(
            f"{where} describes a model without a decoder-only language model (model_type {mtype or '?'}, "
            f"architectures {', '.join(archs) or '?'})",
            "perfseer llm costs decoder-only LLMs (…ForCausalLM); use 'perfseer predict' for other models")
    text = obj.get("text_config")
    if isinstance(text, dict) and "hidden_size" not in obj:
        obj = {**obj, **text}
    hidden = _int(obj, ("hidden_size", "n_embd", "d_model"), where)
    heads = _int(obj, ("num_attention_heads", "n_head"), where)
    kv = _int(obj, ("num_key_value_heads", "num_kv_heads", "n_head_kv"), where, required=False)
    if kv is None:
        kv = 1 if obj.get("multi_query") else heads
    if heads % kv:
        raise LLMConfigError(f"{where}: {heads} attention heads are not a multiple of {kv} key/value heads",
                             "fix num_key_value_heads")
    act = str(obj.get("hidden_act") or obj.get("hidden_activation") or obj.get("activation_function") or "silu")
    gated = mtype not in {"gpt2", "gpt_bigcode", "starcoder2", "phi", "gpt_neox", "opt", "falcon", "bloom", "gptj"}
    ffn = _int(obj, ("intermediate_size", "n_inner", "ffn_hidden_size"), where, default=4 * hidden)
    experts = _int(obj, ("num_local_experts", "num_experts", "n_routed_experts"), where, default=0, required=False) or 0
    mla = None
    if obj.get("kv_lora_rank"):
        mla = {"kv_lora_rank": _int(obj, ("kv_lora_rank",), where), "q_lora_rank": obj.get("q_lora_rank") or None,
               "qk_rope_head_dim": _int(obj, ("qk_rope_head_dim",), where),
               "qk_nope_head_dim": _int(obj, ("qk_nope_head_dim",), where),
               "v_head_dim": _int(obj, ("v_head_dim",), where)}
    window = obj.get("sliding_window")
    if obj.get("use_sliding_window") is False or not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        window = 0
    tied = obj.get("tie_word_embeddings")
    if tied is None:
        tied = mtype in _TIED_BY_DEFAULT
    return ModelConfig(
        name=name, hidden=hidden, heads=heads, kv_heads=kv,
        layers=_int(obj, ("num_hidden_layers", "n_layer", "num_layers"), where),
        ffn=(_int(obj, ("moe_intermediate_size",), where, default=ffn) if experts else ffn),
        vocab=_int(obj, ("vocab_size", "padded_vocab_size"), where),
        max_context=_int(obj, ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length"), where,
                         default=2048),
        head_dim=_int(obj, ("head_dim",), where, default=0, required=False) or 0,
        gated_mlp=gated, act="gelu" if "gelu" in act else act, tied_embeddings=bool(tied),
        norm="layernorm" if mtype in {"gpt2", "gpt_bigcode", "starcoder2", "phi", "gpt_neox", "opt", "falcon",
                                      "phi3small", "bloom", "gptj"} else "rmsnorm",
        norms_per_layer=4 if mtype == "gemma2" else (1 if mtype in {"phi", "gptj"} else 2),
        parallel_block=mtype in {"phi", "gptj"}, rotary_fraction=float(obj.get("partial_rotary_factor", 1.0) or 1.0),
        rope=mtype not in {"gpt2", "gpt_bigcode", "opt", "bloom"},
        bias=bool(obj.get("use_bias") or mtype in {"gpt2", "gpt_bigcode", "phi", "starcoder2", "opt"}),
        qkv_bias=bool(obj.get("attention_bias") or mtype in {"qwen2", "qwen2_moe", "qwen"}),
        sliding_window=int(window), sliding_every=2 if mtype == "gemma2" else 1,
        experts=experts, experts_per_token=_int(obj, ("num_experts_per_tok", "num_selected_experts", "moe_topk"), where,
                                                default=2 if experts else 0, required=False) or 0,
        shared_experts=_int(obj, ("n_shared_experts",), where, default=0, required=False) or 0,
        shared_expert_ffn=_int(obj, ("shared_expert_intermediate_size",), where, default=0, required=False) or 0,
        dense_layers=(_int(obj, ("first_k_dense_replace",), where, default=0, required=False) or 0) if experts else 0,
        dense_ffn=ffn if experts and obj.get("first_k_dense_replace") else 0,
        mla=mla, family=mtype, source=f"read from {name}")
