"""The PerfSeer model space: CNNs of four stages, each stage in one of five architecture styles.

PerfSeer's dataset spans VGG, GoogLeNet (Inception), ResNe(X)t, MobileNet and DenseNet networks
with a wide range of FLOPs.  This module samples such networks from a seed and rebuilds any of
them from a small JSON config, so that a measured network is named by its config alone: the
reference ``space:CONFIG`` (CONFIG is :func:`canonical_json` of the config) is what a measurement
table stores and what :func:`perfseer.extract` reads.

The network, for an input ``3 x H x W``::

    stem:  conv 3x3 stride 2 (3 -> stem channels, 32) + BN + act
    4 stages: each in its own style, with ``depth`` blocks and ``width`` output channels;
              the first or the last block of the stage (``down``) halves the resolution
    head:  global average pool, linear (width of stage 4 -> classes, 1000)

so the resolution is halved five times (224 -> 7, 64 -> 2).  Convolutions have no bias (each is
followed by BatchNorm); the linear layer has one.  ``act`` (one per network) is ``relu``, ``relu6``,
``silu`` or ``hardswish``.

Styles and their stage settings (every channel count is the config's own integer, so the builder
does no arithmetic that could change between versions):

``vgg``
    ``depth`` x [conv KxK + BN + act]; ``kernel`` K in {3, 5}; the down block's conv has stride 2.
``inception``
    ``depth`` Inception blocks, four parallel branches concatenated:
    1x1 (``b1``); 1x1 (``b3r``) -> 3x3 (``b3``); 1x1 (``b5r``) -> 5x5 (``b5``), or two 3x3 when
    ``b5_mode`` is ``"3x3x2"``; max-pool 3x3 -> 1x1 (``bp``).  Each conv is conv + BN + act.
    ``width`` = b1 + b3 + b5 + bp.  The down block strides the last conv of each branch and the pool.
``resnet``
    ``depth`` residual blocks of type ``block``: ``bottleneck`` is 1x1 (-> ``mid``) + 3x3
    (``mid -> mid``, ``groups`` groups: ResNeXt when > 1, group width ``mid / groups``) + 1x1
    (-> ``width``); ``basic`` is 3x3 (-> ``mid``) + 3x3 (-> ``width``) with ``groups`` = 1.  Each
    conv is followed by BN, and by act except the last one of the block.  The shortcut is the identity, or conv 1x1
    (with the block's stride) + BN where the shape changes; act after the sum.
``densenet``
    ``depth`` dense layers, each BN + act + conv 1x1 (-> ``bn_size * growth``) + BN + act + conv 3x3
    (-> ``growth``), its output concatenated to its input; and a transition BN + act + conv 1x1 +
    avg-pool 2x2.  ``down = "last"``: the layers, then the transition to ``width``;
    ``down = "first"``: the transition to ``width - depth * growth``, then the layers (so a stage
    always ends with ``width`` channels).
``mobilenet``
    ``depth`` inverted residual blocks: conv 1x1 (-> ``c_in * expand``, omitted when ``expand`` is
    1) + BN + act, depthwise KxK (``kernel`` in {3, 5, 7}) + BN + act, optional squeeze-excitation
    (``se``: avg-pool, 1x1 -> max(8, mid // 4), ReLU, 1x1, sigmoid, multiply), 1x1 (-> ``width``)
    + BN; the block input is added when the stride is 1 and the channels match.

A config::

    {"v": 1, "stem": 32, "act": "relu", "classes": 1000,
     "stages": [{"style": "vgg", "depth": 2, "width": 64, "down": "first", "kernel": 3}, ...]}

Example::

    >>> configs = sample_configs(3, seed=0)          # the same three networks on every machine
    >>> model = build_space_model(configs[0])         # torch.nn.Module, random weights
    >>> ref = space_ref(configs[0])                   # 'space:{"act":...}'
    >>> perfseer.extract(ref, input_shape=(3, 64, 64))  # doctest: +SKIP

Sampling is sequential from ``random.Random(seed)``: ``sample_configs(n, seed)`` is a prefix of
``sample_configs(m, seed)`` for m > n, so a collection can be extended without changing the
networks it already has.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from perfseer.errors import ModelLoadError

VERSION = 1
SCHEME = "space"
STYLES = ("vgg", "inception", "resnet", "densenet", "mobilenet")
ACTIVATIONS = ("relu", "relu6", "silu", "hardswish")
NUM_STAGES = 4
STEM_CHANNELS = 32
NUM_CLASSES = 1000
DEFAULT_INPUT_SHAPE = (3, 224, 224)
MAX_CHANNELS = 4096  # a sanity bound for hand-written configs; sampled widths stay in 16..512

# Sampled output widths per stage, multiples of 8: moderate, so that a CPU can measure them.
STAGE_WIDTHS = ((16, 96), (32, 192), (64, 384), (128, 512))
# Sampled blocks per stage (dense layers for densenet), by style.
DEPTHS = {"vgg": (1, 4), "inception": (1, 3), "resnet": (1, 4), "densenet": (2, 6), "mobilenet": (1, 4)}

_COMMON = ("style", "depth", "width", "down")
# The keys of each style's stage, besides the common ones.
STYLE_KEYS = {
    "vgg": ("kernel",),
    "inception": ("b1", "b3r", "b3", "b5r", "b5", "bp", "b5_mode"),
    "resnet": ("block", "mid", "groups"),
    "densenet": ("growth", "bn_size"),
    "mobilenet": ("expand", "kernel", "se"),
}
_TOP_KEYS = ("v", "stem", "act", "classes", "stages")
_FIX = ("give a config as sample_configs() makes it: "
        '{"v":1,"stem":32,"act":"relu","classes":1000,"stages":[4 stage objects]}; '
        "see perfseer.sources.space for the keys of each style")


# -- references --------------------------------------------------------------------------------------

def canonical_json(config: Mapping) -> str:
    """The config as compact JSON with sorted keys: one spelling per network."""
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def space_ref(config: Mapping) -> str:
    """``space:CONFIG``, the model reference of a (valid) config."""
    return f"{SCHEME}:{canonical_json(validate_config(config))}"


def parse_space(text: str | Mapping) -> dict:
    """A validated config from ``space:CONFIG``, the JSON ``CONFIG`` alone, or a config dict.

    Raises:
        ModelLoadError: not JSON, or not a valid config (the message names the key).
    """
    if isinstance(text, Mapping):
        return validate_config(text)
    body = text[len(SCHEME) + 1:] if text.startswith(f"{SCHEME}:") else text
    try:
        config = json.loads(body)
    except json.JSONDecodeError as e:
        raise ModelLoadError(f"space: config is not JSON ({e.msg} at character {e.pos})", _FIX) from None
    return validate_config(config)


def canonical_ref(ref: str) -> str:
    """A ``space:`` reference in its canonical spelling (other references are returned as they are)."""
    return space_ref(parse_space(ref)) if ref.startswith(f"{SCHEME}:") else ref


# -- validation ----------------------------------------------------------------------------------------

def _bad(where: str, value: Any, expected: str) -> ModelLoadError:
    shown = json.dumps(value) if not isinstance(value, str) else repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ModelLoadError(f"space: config {where} is {shown}, expected {expected}", _FIX)


def _int(cfg: Mapping, key: str, where: str, low: int, high: int, multiple: int = 1) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high or value % multiple:
        extra = f", a multiple of {multiple}" if multiple > 1 else ""
        raise _bad(f"{where}{key}", value, f"an integer from {low} to {high}{extra}")
    return value


def _choice(cfg: Mapping, key: str, where: str, choices) -> Any:
    value = cfg[key]
    if not any(value == c and type(value) is type(c) for c in choices):
        raise _bad(f"{where}{key}", value, f"one of {', '.join(json.dumps(c) for c in choices)}")
    return value


def _keys(cfg: Any, expected: tuple[str, ...], where: str) -> None:
    label = f"{where[:-1]} " if where else ""  # "stages[2]. " -> "stages[2] "
    if not isinstance(cfg, Mapping):
        raise _bad(where[:-1] or "object", cfg, "a JSON object")
    missing = [k for k in expected if k not in cfg]
    unknown = sorted(set(cfg) - set(expected))
    if missing:
        raise ModelLoadError(f"space: config {label}lacks {', '.join(missing)}", _FIX)
    if unknown:
        raise ModelLoadError(f"space: config {label}has unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(unknown)}", _FIX)


def validate_config(config: Any) -> dict:
    """Check a config and return a plain-dict copy of it.

    Every key is required and no other is allowed, so that one network has one config.

    Raises:
        ModelLoadError: naming the first bad key (``stages[2].groups``) and the expected values.
    """
    _keys(config, _TOP_KEYS, "")
    if config["v"] != VERSION or isinstance(config["v"], bool):
        raise _bad("v", config["v"], f"{VERSION} (the version of the space this perfseer builds)")
    _int(config, "stem", "", 8, 512)
    _choice(config, "act", "", ACTIVATIONS)
    _int(config, "classes", "", 1, 100_000)
    stages = config["stages"]
    if not isinstance(stages, list) or len(stages) != NUM_STAGES:
        raise _bad("stages", stages, f"a list of {NUM_STAGES} stage objects")
    c_in = config["stem"]
    for i, stage in enumerate(stages):
        where = f"stages[{i}]."
        if not isinstance(stage, Mapping) or "style" not in stage:
            raise _bad(f"stages[{i}]", stage, f"an object with a style among {', '.join(STYLES)}")
        style = _choice(stage, "style", where, STYLES)
        _keys(stage, _COMMON + STYLE_KEYS[style], where)
        low, high = (2, 32) if style == "densenet" else (1, 16)
        depth = _int(stage, "depth", where, low, high)
        width = _int(stage, "width", where, 8, MAX_CHANNELS)
        _choice(stage, "down", where, ("first", "last"))
        _check_style(style, stage, where, c_in, depth, width)
        c_in = width
    return json.loads(json.dumps(config))  # a plain copy, whatever Mapping types came in


def _check_style(style: str, s: Mapping, where: str, c_in: int, depth: int, width: int) -> None:
    if style == "vgg":
        _choice(s, "kernel", where, (3, 5))
    elif style == "inception":
        branches = [_int(s, k, where, 1, MAX_CHANNELS) for k in ("b1", "b3", "b5", "bp")]
        _int(s, "b3r", where, 1, MAX_CHANNELS)
        _int(s, "b5r", where, 1, MAX_CHANNELS)
        _choice(s, "b5_mode", where, ("5x5", "3x3x2"))
        if sum(branches) != width:
            raise ModelLoadError(f"space: config {where}width is {width} but b1 + b3 + b5 + bp is "
                                 f"{sum(branches)}", "make width the sum of the four branch widths")
    elif style == "resnet":
        block = _choice(s, "block", where, ("basic", "bottleneck"))
        mid = _int(s, "mid", where, 1, MAX_CHANNELS)
        groups = _int(s, "groups", where, 1, MAX_CHANNELS)
        if block == "basic" and groups != 1:
            raise _bad(f"{where}groups", groups, "1 for a basic block (grouped 3x3 convs need block bottleneck)")
        if mid % groups:
            raise ModelLoadError(f"space: config {where}mid {mid} is not a multiple of groups {groups}",
                                 "choose groups that divide mid (group width = mid / groups)")
    elif style == "densenet":
        growth = _int(s, "growth", where, 1, 256)
        _int(s, "bn_size", where, 1, 8)
        if s["down"] == "first" and width - depth * growth < 1:
            raise ModelLoadError(f"space: config {where}width {width} leaves no channels for the "
                                 f"transition of a down-first dense stage ({depth} layers x growth {growth})",
                                 "make width > depth * growth, or set down to last")
    elif style == "mobilenet":
        _int(s, "expand", where, 1, 8)
        _choice(s, "kernel", where, (3, 5, 7))
        _choice(s, "se", where, (False, True))


# -- sampling ------------------------------------------------------------------------------------------

def _round8(x: float, low: int = 8) -> int:
    return max(low, int(round(x / 8)) * 8)


def _sample_stage(rng: random.Random, style: str, c_in: int, index: int) -> dict:
    lo, hi = STAGE_WIDTHS[index]
    width = rng.randrange(lo, hi + 1, 8)
    depth = rng.randint(*DEPTHS[style])
    stage = {"style": style, "depth": depth, "width": width, "down": rng.choice(("first", "last"))}
    if style == "vgg":
        stage["kernel"] = rng.choice((3, 3, 3, 5))
    elif style == "inception":
        width = max(width, 32)
        shares = [rng.uniform(0.15, 0.35), rng.uniform(0.3, 0.5), rng.uniform(0.1, 0.2), rng.uniform(0.1, 0.25)]
        total = sum(shares)
        b1, b5, bp = (_round8(width * shares[k] / total) for k in (0, 2, 3))
        b3 = max(8, width - b1 - b5 - bp)
        stage.update(width=b1 + b3 + b5 + bp, b1=b1, b3=b3, b5=b5, bp=bp,
                     b3r=_round8(b3 * rng.uniform(0.5, 1.0)), b5r=_round8(b5 * rng.uniform(0.25, 0.75)),
                     b5_mode=rng.choice(("5x5", "3x3x2")))
    elif style == "resnet":
        block = rng.choice(("basic", "bottleneck", "bottleneck"))
        if block == "basic":
            mid, groups = width, 1
        else:
            mid = _round8(width * rng.choice((0.25, 0.5, 1.0)))
            group_width = rng.choice((None, None, 4, 8, 16, 32))  # None: a plain ResNet bottleneck
            groups = mid // group_width if group_width and mid % group_width == 0 and mid > group_width else 1
        stage.update(block=block, mid=mid, groups=groups)
    elif style == "densenet":
        growth = rng.choice((8, 12, 16, 24, 32))
        while depth > 2 and depth * growth > width - 8:  # keep the down-first transition >= 8 channels
            depth -= 1
        if depth * growth > width - 8:
            stage["down"] = "last"
        stage.update(depth=depth, growth=growth, bn_size=rng.choice((2, 4)))
    elif style == "mobilenet":
        stage.update(expand=rng.choice((1, 3, 4, 6)), kernel=rng.choice((3, 5, 7)), se=rng.random() < 0.3)
    return stage


def sample_config(rng: random.Random, classes: int = NUM_CLASSES) -> dict:
    """One network of the space, drawn from ``rng``."""
    stages, c_in = [], STEM_CHANNELS
    for i in range(NUM_STAGES):
        stage = _sample_stage(rng, rng.choice(STYLES), c_in, i)
        stages.append(stage)
        c_in = stage["width"]
    config = {"v": VERSION, "stem": STEM_CHANNELS, "act": rng.choice(ACTIVATIONS), "classes": classes,
              "stages": stages}
    return validate_config(config)


def sample_configs(n: int, seed: int = 0, classes: int = NUM_CLASSES) -> list[dict]:
    """``n`` distinct networks of the space, the same for the same ``seed`` on every machine.

    Args:
        n: how many configs.
        seed: the seed of ``random.Random``; ``sample_configs(n, s)`` is a prefix of
            ``sample_configs(n + k, s)``.
        classes: outputs of the final linear layer.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ModelLoadError(f"cannot sample {n!r} networks", "give a whole number >= 0")
    rng = random.Random(f"perfseer-space-v{VERSION}:{seed}")
    out, seen = [], set()
    while len(out) < n:
        config = sample_config(rng, classes)
        key = canonical_json(config)
        if key not in seen:
            seen.add(key)
            out.append(config)
    return out


# -- building ------------------------------------------------------------------------------------------

def build_space_model(config):
    """The ``torch.nn.Module`` of a config (dict, JSON text or ``space:`` reference), random weights.

    Built on the current default device: inside ``with torch.device("meta")`` no weight is allocated.

    Raises:
        ModelLoadError: the config is not valid.
    """
    from perfseer.sources._space_nn import SpaceNet  # deferred: loads torch

    return SpaceNet(parse_space(config))


def export_space(config, input_shape=None):
    """Build a config on the meta device and export it: an ONNX :class:`~perfseer.graph.onnx_io.Skeleton`.

    This is what the ``space:`` reference resolves to (:func:`perfseer.sources.load.load_skeleton`).

    Args:
        input_shape: one sample without the batch (default ``(3, 224, 224)``).
    """
    import torch  # deferred: heavy, loaded on first use

    from perfseer.graph.torch_export import skeleton_from_module  # deferred: loads onnx

    config = parse_space(config)
    with torch.device("meta"):
        module = build_space_model(config)
    return skeleton_from_module(module.eval(), input_shape or DEFAULT_INPUT_SHAPE,
                                source=f"{SCHEME}:{canonical_json(config)}", on_meta=True)


def describe(config: Mapping) -> str:
    """A short human summary: ``relu | vgg(2x64) inception(1x128) resnet-bottleneck-g8(3x256) ...``."""
    parts = []
    for s in config["stages"]:
        name = s["style"]
        if s["style"] == "resnet":
            name += f"-{s['block']}" + (f"-g{s['groups']}" if s["groups"] > 1 else "")
        parts.append(f"{name}({s['depth']}x{s['width']})")
    return f"{config['act']} | " + " ".join(parts)
