"""HuggingFace transformers by name: ``hf:NAME[@OPTION...]`` (the optional ``hf`` extra).

A model is built from its configuration alone with the ``transformers`` package, on the meta
device (no weight allocated, nothing downloaded, no hub access), and exported through
:mod:`perfseer.graph.torch_export` like ``timm:``/``torchvision:`` references.

``NAME`` is one of:

* a model whose configuration values ship with perfseer (``sources/hf_configs.json``: about 45
  common encoder, decoder and encoder-decoder models, by hub id or short name:
  ``hf:bert-large-uncased``, ``hf:openai-community/gpt2-large``, ``hf:facebook/opt-1.3b``);
* ``neusight/STEM``: a configuration of the NeuSight study, named after its label files
  (``hf:neusight/gpt3_xl`` is ``gpt3_xl-inf-2048-8.json``'s model);
* a local ``config.json`` (or a folder holding one): ``hf:/path/to/config.json``.

Options, appended with ``@`` (combinable, any order):

* the head: by default the configuration's ``architectures[0]`` (``GPT2LMHeadModel``,
  ``BertForMaskedLM``), else the bare model; ``@base`` the bare model (``AutoModel``: hidden
  states out, no LM head); ``@encoder`` only the encoder of an encoder-decoder model (T5, BART,
  Whisper);
* the attention: ``@sdpa`` (default) ``F.scaled_dot_product_attention``, which the exporter
  writes as its math (MatMul, Softmax, MatMul) as it does for timm's ViTs; ``@eager`` HF's
  explicit attention (the unfused form); ``@fused`` SDPA exported at opset 23 as one ONNX
  ``Attention`` node per attention (no score matrix in memory, as a flash kernel);
* ``@fp16`` / ``@bf16``: the model in that precision (default fp32).

Inputs: token ids ``(batch, seq_len)``; an encoder-decoder model also gets decoder token ids
``(batch, seq_len)``; Whisper gets log-mel features ``(batch, num_mel_bins, 3000)`` (its fixed
30 s window) and decoder ids ``(batch, seq_len)``.  ``seq_len`` is the one dimension besides the
batch: ``input_shape=(seq_len,)`` (a measurement table's ``input_shape`` column: ``512``).
Caches are off (``use_cache=False``): one forward pass over the whole sequence, as in training
and prompt processing.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import json
import os
import types
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from perfseer.errors import MissingDependencyError, ModelLoadError, ShapeError, UnsupportedModelError
from perfseer.sources.zoo import _prepare_torchvision

DEFAULT_SEQ_LEN = 128
HEADS = ("base", "encoder")
ATTENTIONS = ("sdpa", "eager", "fused")
DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# config attributes that bound the number of positions of absolute position embeddings
_POSITION_LIMITS = ("n_positions", "max_position_embeddings")


@dataclass(frozen=True)
class HFReference:
    """A parsed ``hf:`` reference: where the configuration comes from and how to build it."""

    name: str  # the name as given, without options
    config: dict  # the configuration values
    source: str  # where they come from (hub URL, NeuSight file, local path)
    head: str = "default"  # "default", "base" or "encoder"
    attention: str = "sdpa"
    dtype: str = "float32"


@lru_cache(maxsize=1)
def _catalogue() -> dict:
    text = (resources.files("perfseer") / "sources" / "hf_configs.json").read_text()
    return json.loads(text)["models"]


@lru_cache(maxsize=1)
def _names() -> dict[str, str]:
    """Every accepted name (lower case) -> catalogue key."""
    out = {}
    for key, entry in _catalogue().items():
        for n in (key, *entry.get("aliases", ())):
            out[n.lower()] = key
    return out


def known_models() -> list[str]:
    """The names of the shipped configurations (hub ids and ``neusight/...``)."""
    return sorted(_catalogue())


def _split_options(text: str) -> tuple[str, list[str]]:
    """``"gpt2-large@eager@fp16"`` -> ``("gpt2-large", ["eager", "fp16"])``."""
    name, options = text, []
    while "@" in name:  # trailing @word options; an "@" inside a file name stays
        rest, _, opt = name.rpartition("@")
        if not opt.replace("-", "").replace("_", "").isalnum():
            break
        name, options = rest, [opt, *options]
    return name, options


def is_shipped(text: str) -> bool:
    """Whether ``hf:`` reference ``text`` (options allowed) names a shipped configuration (not a
    local file): what a service accepts."""
    name, _ = _split_options(text)
    return isinstance(name, str) and name.strip().lower() in _names()


def parse_reference(text: str) -> HFReference:
    """``"gpt2-large@eager"`` -> :class:`HFReference` (configuration resolved, nothing built)."""
    name, options = _split_options(text)
    head, attention, dtype = "default", "sdpa", "float32"
    for opt in options:
        o = opt.strip().lower()
        if o in HEADS:
            head = o
        elif o in ATTENTIONS:
            attention = o
        elif o in DTYPES:
            dtype = DTYPES[o]
        else:
            raise ModelLoadError(
                f"unknown option '@{opt}' in hf:{text}",
                f"use @{', @'.join((*HEADS, *ATTENTIONS, *DTYPES))} (see docs/concepts/perfgraph.md)")
    config, source = resolve_config(name.strip())
    return HFReference(name.strip(), config, source, head, attention, dtype)


def resolve_config(name: str) -> tuple[dict, str]:
    """The configuration values of ``name`` and their source."""
    if not name:
        raise ModelLoadError("empty hf: reference", "write hf:NAME, e.g. hf:gpt2, or hf:/path/to/config.json")
    key = _names().get(name.lower())
    if key is not None:
        entry = _catalogue()[key]
        return dict(entry["config"]), entry["source"]
    if _looks_local(name):
        return _read_local(Path(os.path.expanduser(name)))
    close = difflib.get_close_matches(name.lower(), list(_names()), n=5, cutoff=0.5)
    close += [n for n in _names() if name.lower() in n and n not in close][: 5 - len(close)]
    raise ModelLoadError(
        f"no shipped configuration for hf:{name} (perfseer never downloads from the hub)",
        f"pass a local config.json: hf:/path/to/config.json"
        + (f"; similar shipped names: {', '.join(close)}" if close else "")
        + "; all names: perfseer.sources.hf.known_models()")


def _looks_local(name: str) -> bool:
    path = Path(os.path.expanduser(name))
    return name.endswith(".json") or os.sep in name and not name.startswith("neusight/") and (
        path.exists() or name.startswith((".", os.sep, "~")))


def is_local_config(reference: str) -> bool:
    """Whether ``hf:`` ``reference`` (options allowed) names a local config.json, whose contents
    can change under the same name (``perfseer data build`` does not cache its export)."""
    name = reference.split("@")[0] if not reference.endswith(".json") else reference
    return name.lower() not in _names() and _looks_local(name)


def _read_local(path: Path) -> tuple[dict, str]:
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise ModelLoadError(f"config file {path} does not exist",
                             "pass the path of a HuggingFace config.json (or of the folder holding it)") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"cannot read {path} as JSON: {e}",
                             "pass a HuggingFace config.json file") from e
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{path} has no 'model_type': not a HuggingFace model configuration",
                             "pass the config.json that sits beside the model's weights")
    return config, str(path)


def _import_transformers():
    if importlib.util.find_spec("transformers") is None:
        raise MissingDependencyError("transformers", "hf", "the hf: model reference")
    # transformers imports torchvision when it is installed; make that import work first

    _prepare_torchvision()
    import transformers  # deferred: an optional extra

    return transformers


def make_config(ref: HFReference):
    """The ``transformers`` configuration object of ``ref``, caches off."""
    transformers = _import_transformers()
    values = {k: v for k, v in ref.config.items() if not k.startswith("_") and k != "transformers_version"}
    model_type = values.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **values)
    except (ValueError, KeyError) as e:
        raise ModelLoadError(f"transformers {transformers.__version__} has no model type '{model_type}' "
                             f"({ref.source}): {_clean(e)}",
                             "upgrade transformers, or check model_type in the config") from e
    config.use_cache = False
    config._attn_implementation = "eager" if ref.attention == "eager" else "sdpa"
    return config


def _model_class(ref: HFReference, config):
    transformers = _import_transformers()
    if ref.head in ("base", "encoder"):
        return transformers.AutoModel
    archs = ref.config.get("architectures") or []
    if archs:
        arch = archs[0]
        if not isinstance(arch, str) or arch not in known_classes():
            raise ModelLoadError(f"the configuration's architectures[0] is not a model class perfseer builds "
                                 f"({ref.source})", "append @base for the bare model (AutoModel), or fix "
                                 "architectures in the config")
        cls = getattr(transformers, arch, None)
        if not (isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel)):
            raise ModelLoadError(f"transformers {transformers.__version__} has no model class {arch} ({ref.source})",
                                 "upgrade transformers, or append @base for the bare model")
        return cls
    return transformers.AutoModel


@lru_cache(maxsize=1)
def known_classes() -> frozenset[str]:
    """The model class names an ``architectures`` entry may name: those of the shipped
    configurations and those of transformers' own auto-model tables (never an arbitrary
    attribute of the package)."""
    names = {a for entry in _catalogue().values() for a in entry["config"].get("architectures") or ()
             if isinstance(a, str)}
    try:
        from transformers.models.auto import modeling_auto  # deferred: an optional extra
    except ImportError:
        return frozenset(names)
    for attr in dir(modeling_auto):
        if attr.startswith("MODEL") and attr.endswith("_MAPPING_NAMES"):
            table = getattr(modeling_auto, attr)
            for value in (table.values() if isinstance(table, dict) else ()):
                for v in (value if isinstance(value, (tuple, list)) else (value,)):
                    if isinstance(v, str):
                        names.add(v)
    return frozenset(names)


def build_model(ref: HFReference):
    """``(module, config)``: the module of ``ref`` on the meta device, in eval mode, and its
    ``transformers`` configuration (caches off)."""
    import torch  # deferred: heavy, loaded on first use

    config = make_config(ref)
    cls = _model_class(ref, config)

    def build():
        with torch.device("meta"):
            return cls.from_config(config) if cls.__name__.startswith("Auto") else cls(config)

    try:
        try:
            model = build()
        except ValueError as e:
            # Models without an SDPA path (BLOOM, DeBERTa-v2, Switch) run their explicit attention.
            if config._attn_implementation != "sdpa" or "attention implementation" not in str(e):
                raise
            config._attn_implementation = "eager"
            model = build()
    except Exception as e:  # transformers raises many types for a bad configuration
        raise ModelLoadError(f"transformers could not build {cls.__name__} from {ref.source}: "
                             f"{type(e).__name__}: {_clean(e)}", "check the configuration values") from e
    _untie_if_configured(model, ref.config)
    if ref.dtype != "float32":
        model = model.to(getattr(torch, ref.dtype))
    if ref.head == "encoder":
        if not getattr(config, "is_encoder_decoder", False) or not hasattr(model, "get_encoder"):
            raise ModelLoadError(f"hf:{ref.name} is not an encoder-decoder model: @encoder does not apply",
                                 "drop @encoder (or use @base for the bare model)")
        model = model.get_encoder()
    return model.eval(), config


def _untie_if_configured(model, values: dict) -> None:
    """Give the LM head its own weight when the configuration says it has one.

    transformers 5 ties T5's LM head to the embedding whatever the configuration says (T5 v1.1
    and FLAN-T5 ship ``tie_word_embeddings: false`` and a separate LM-head matrix: 247.6 M
    parameters for flan-t5-base, not 222.9 M).
    """
    import torch  # deferred: heavy, loaded on first use

    if values.get("tie_word_embeddings", True) is not False:
        return
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is not None and inp is not None and out.weight is inp.weight:
        out.weight = torch.nn.Parameter(torch.empty_like(out.weight, device="meta"))


def input_spec(ref: HFReference, config, seq_len: int) -> list[tuple[str, tuple[int, ...], str]]:
    """``(name, shape without the batch, dtype)`` of each input of ``ref`` at ``seq_len`` tokens."""
    speech = config.model_type in ("whisper",)
    if speech:
        limit = getattr(config, "max_target_positions", None)
        if ref.head != "encoder" and limit and seq_len > limit:
            raise ShapeError(f"hf:{ref.name} decodes at most {limit} tokens (max_target_positions); "
                             f"got seq_len {seq_len}", f"pass --seq-len {limit} or less")
        audio = ("input_features", (config.num_mel_bins, 2 * config.max_source_positions), "float32" if
                 ref.dtype == "float32" else ref.dtype)
        if ref.head == "encoder":
            return [audio]
        return [audio, ("decoder_input_ids", (seq_len,), "int64")]
    for attr in _POSITION_LIMITS:
        limit = getattr(config, attr, None)
        if isinstance(limit, int) and limit > 0 and _absolute_positions(config) and seq_len > limit:
            raise ShapeError(f"hf:{ref.name} takes at most {limit} tokens ({attr}); got seq_len {seq_len}",
                             f"pass --seq-len {limit} or less")
        if isinstance(limit, int):
            break
    ids = [("input_ids", (seq_len,), "int64")]
    if getattr(config, "is_encoder_decoder", False) and ref.head != "encoder":
        ids.append(("decoder_input_ids", (seq_len,), "int64"))
    return ids


def _absolute_positions(config) -> bool:
    """Whether positions come from a learned table (a hard length limit), not rotary/relative."""
    return config.model_type in ("bert", "roberta", "xlm-roberta", "albert", "electra", "distilbert", "gpt2",
                                 "opt", "bart", "deberta-v2") and getattr(config, "position_biased_input", True)


# Model types whose forward fails without an attention mask (transformers 5.23 indexes it).
_NEEDS_MASK = frozenset({"switch_transformers"})


def _forward_with(names: list[str], full_mask: bool = False):
    """A ``forward`` taking ``names`` positionally and returning the first output (logits or
    hidden states): the exporter traces positional tensors, HF models take keywords.

    ``full_mask``: pass an all-ones attention mask, built from the ids' shape (folded away).
    """
    import torch  # deferred: heavy, loaded on first use

    def forward(self, *args):
        kwargs = dict(zip(names, args))
        if full_mask and "input_ids" in kwargs:
            kwargs["attention_mask"] = torch.ones_like(kwargs["input_ids"])
        out = type(self).forward(self, **kwargs, return_dict=True)
        return out[0]

    return forward


def export_hf_model(name: str, input_shape=None, seq_len: int | None = None):
    """Build and export ``hf:NAME``: an ONNX :class:`~perfseer.graph.onnx_io.Skeleton`.

    Args:
        name: the reference without ``hf:`` (see the module docstring).
        input_shape: ``(seq_len,)``, the form a measurement table gives.
        seq_len: tokens per sample (default :data:`DEFAULT_SEQ_LEN`); wins over ``input_shape``.
    """
    from perfseer.graph.torch_export import root_cause, skeleton_from_module  # deferred: loads onnx

    ref = parse_reference(name)
    seq = _seq_len(ref, input_shape, seq_len)
    model, config = build_model(ref)
    spec = input_spec(ref, config, seq)
    names = [n for n, _, _ in spec]
    model.forward = types.MethodType(_forward_with(names, config.model_type in _NEEDS_MASK), model)
    source = f"hf:{name}"
    try:
        skel = skeleton_from_module(model, [s for _, s, _ in spec], [d for _, _, d in spec], source=source,
                                    on_meta=True, input_names=names, opset=23 if ref.attention == "fused" else None)
    except UnsupportedModelError as e:
        cause = e.__cause__ or e
        raise UnsupportedModelError(
            f"torch.onnx.export could not export {source} ({type(model).__name__}, seq_len {seq}): "
            f"{root_cause(cause)}",
            "the model's code does something torch.export cannot trace (the cause above); "
            + ("try @eager (explicit attention), or " if ref.attention == "sdpa" else "")
            + "export the model to ONNX yourself and pass the .onnx file",
        ) from cause
    return skel


def is_hf_module(module) -> bool:
    """Whether ``module`` is a ``transformers`` model (checked without importing transformers)."""
    return type(module).__module__.startswith("transformers.") and hasattr(module, "config")


def export_hf_module(module, input_shape=None, seq_len: int | None = None):
    """Export a ``transformers`` model object with its cache off, the user's module untouched.

    The inputs are read from its ``forward`` signature: ``input_features`` (speech encoders) or
    ``input_ids``, plus ``decoder_input_ids`` for an encoder-decoder model.  ``input_shape`` is
    ``(seq_len,)`` for every token input, or one shape per input (``[(512,), (128,)]`` for an
    encoder and a decoder of different lengths); ``seq_len`` sets every token input.
    """

    from perfseer.graph.torch_export import meta_twin, root_cause, skeleton_from_module  # deferred: loads onnx

    twin = meta_twin(module).eval()  # a deep copy: the user's config keeps its cache setting
    config = twin.config
    config.use_cache = False
    params = inspect.signature(type(module).forward).parameters
    names = ["input_features" if "input_features" in params and "input_ids" not in params else "input_ids"]
    if "decoder_input_ids" in params and getattr(config, "is_encoder_decoder", False):
        names.append("decoder_input_ids")
    dtype = next((str(p.dtype).removeprefix("torch.") for p in twin.parameters()), "float32")
    shapes = [tuple(s) for s in input_shape] if input_shape and not isinstance(input_shape[0], int) else None
    seq = seq_len or (input_shape[0] if input_shape and isinstance(input_shape[0], int) else DEFAULT_SEQ_LEN)
    if shapes is not None and len(shapes) != len(names):
        raise ShapeError(f"{type(module).__name__} takes {len(names)} inputs ({', '.join(names)}), "
                         f"got {len(shapes)} input shapes", "give one shape per input, or --seq-len N")
    spec = []
    for i, n in enumerate(names):
        if n == "input_features":
            spec.append((n, shapes[i] if shapes else (config.num_mel_bins, 2 * config.max_source_positions), dtype))
        else:
            spec.append((n, shapes[i] if shapes and seq_len is None else (seq,), "int64"))
    twin.forward = types.MethodType(_forward_with(names, config.model_type in _NEEDS_MASK), twin)
    source = type(module).__name__
    try:
        return skeleton_from_module(twin, [sh for _, sh, _ in spec], [d for _, _, d in spec], source=source,
                                    on_meta=True, input_names=names)
    except UnsupportedModelError as e:
        cause = e.__cause__ or e
        raise UnsupportedModelError(
            f"torch.onnx.export could not export {source} (inputs {', '.join(names)}): {root_cause(cause)}",
            "export it to ONNX yourself and pass the .onnx file") from cause


def _seq_len(ref: HFReference, input_shape, seq_len) -> int:
    if seq_len is None and input_shape is not None:
        shape = tuple(input_shape)
        if len(shape) != 1:
            raise ShapeError(f"hf:{ref.name} takes one dimension besides the batch (the sequence length), got "
                             f"input shape {'x'.join(map(str, shape))}", "pass --seq-len N (or --input-shape N)")
        seq_len = shape[0]
    if seq_len is None:
        return DEFAULT_SEQ_LEN
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ShapeError(f"sequence length must be a positive integer, got {seq_len!r}", "pass --seq-len N with N >= 1")
    return seq_len


def _clean(e: BaseException) -> str:
    """One line of an exception's message, without terminal colour codes."""
    from perfseer.graph.torch_export import _ANSI  # deferred: loads onnx

    text = _ANSI.sub("", str(e)).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]
