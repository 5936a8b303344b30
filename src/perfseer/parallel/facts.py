"""The :class:`~perfseer.parallel.plan.ModelFacts` of a model: its parameters from the PerfGraph,
its transformer shape from the ``hf:`` configuration, and the share of its work tensor
parallelism splits."""

from __future__ import annotations

import numpy as np

from perfseer.parallel.plan import ModelFacts

#: Operators Megatron's tensor parallelism does NOT split (each TP rank runs them whole unless
#: sequence parallelism splits them along the sequence): normalisations and their pieces, the
#: embedding lookup, dropout.  Everything else in a transformer block (the projections, attention,
#: the MLP and its activation) runs on 1/tp of the heads or of the MLP width.
UNSPLIT_OPS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization",
                         "SkipLayerNormalization", "ReduceMean", "Pow", "Sqrt", "Reciprocal", "Gather", "Dropout"})
#: FLOPs per byte at which an operator's time turns from memory- to compute-bound (a datacenter
#: GPU's dense 16-bit peak over its memory bandwidth is ~150; the split share is not sensitive to it)
_RIDGE = 150.0

_LAYER_KEYS = ("n_layer", "num_hidden_layers", "num_layers", "n_layers")
_HIDDEN_KEYS = ("n_embd", "hidden_size", "d_model", "dim")
_HEAD_KEYS = ("n_head", "num_attention_heads", "num_heads", "n_heads")


#: architectures whose training step ends in logits over the vocabulary
_LM_HEADS = ("LMHeadModel", "ForCausalLM", "ForMaskedLM")


def _first(cfg: dict, keys) -> int | None:
    for k in keys:
        if cfg.get(k):
            return int(cfg[k])
    return None


def transformer_shape(reference: str | None) -> dict:
    """``{"layers", "hidden", "heads", "vocab", "lm_head"}`` of an ``hf:`` reference (empty for
    anything else); ``lm_head``: the architecture ends in a language-model head."""
    if not isinstance(reference, str) or not reference.startswith("hf:"):
        return {}
    from perfseer.sources import hf  # deferred: reads the catalogue

    cfg = hf.parse_reference(reference[3:]).config
    heads_ = tuple(cfg.get("architectures") or ())
    out = {"layers": _first(cfg, _LAYER_KEYS), "hidden": _first(cfg, _HIDDEN_KEYS),
           "heads": _first(cfg, _HEAD_KEYS), "vocab": cfg.get("vocab_size"),
           "lm_head": any(a.endswith(_LM_HEADS) for a in heads_)}
    if cfg.get("is_encoder_decoder") or cfg.get("model_type") in ("t5", "bart", "whisper", "mt5"):
        out["layers"] = None  # encoder-decoder: stages are not one stack of equal layers
    return out


def split_fraction(pg) -> float:
    """Share of ``pg``'s operator time (roofline proxy: max(FLOPs / ridge, bytes)) in operators
    tensor parallelism splits (all but :data:`UNSPLIT_OPS`)."""
    flops = pg._col("flops")
    traffic = pg._col("memory_access_bytes")
    t = np.maximum(flops / _RIDGE, traffic)
    if t.sum() <= 0:
        return 1.0
    unsplit = np.array([op in UNSPLIT_OPS for op in pg.op_types])
    return float(1.0 - t[unsplit].sum() / t.sum())


def facts_of(pg, reference=None, seq_len: int | None = None, precision: str | None = None) -> ModelFacts:
    """The facts of the PerfGraph ``pg`` (``reference``: the model's name, for its ``hf:`` shape;
    ``seq_len``: tokens per sample; ``precision``: the step's, for the bytes of activations and
    parameters)."""
    from perfseer.graph.ir import DTYPE_BYTES, TensorKind  # the one table of element sizes

    shape = transformer_shape(reference if isinstance(reference, str) else None)
    weights = [t for t in pg.graph.tensors.values() if t.kind in (TensorKind.PARAMETER, TensorKind.BUFFER)]
    pbytes = int(sum(t.numel * DTYPE_BYTES.get(t.dtype, 4) for t in weights if t.kind is TensorKind.PARAMETER))
    pbytes = pbytes or 4 * int(pg.params)
    if precision in ("fp16", "bf16"):
        pbytes = 2 * int(pg.params)
    elif precision in ("fp64",):
        pbytes = 8 * int(pg.params)
    act = 2 if precision in ("fp16", "bf16", "amp-fp16", "amp-bf16", "fp8", "int8") else (8 if precision == "fp64" else 4)
    name = pg.graph.name or (reference if isinstance(reference, str) else "the model")
    return ModelFacts(name=str(reference) if isinstance(reference, str) else name, params=int(pg.params),
                      param_bytes=pbytes, layers=shape.get("layers"), hidden=shape.get("hidden"),
                      heads=shape.get("heads"), seq_len=seq_len or (128 if shape else None), vocab=shape.get("vocab"),
                      split_fraction=split_fraction(pg), act_bytes=act,
                      param_tensors=len(weights) or None, modules=pg.num_nodes)
