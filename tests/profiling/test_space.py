"""The PerfSeer model space: seeded sampling, config round trips, parameter counts by hand, every
style's builder, the ``space:`` reference, and one-line errors for bad configs."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import perfseer
from helpers import assert_user_error
from perfseer.errors import ModelLoadError
from perfseer.sources.load import REFERENCE_KINDS, split_reference
from perfseer.sources.space import (STYLES, build_space_model, canonical_json, canonical_ref, describe,
                                      parse_space, sample_configs, space_ref, validate_config)


def params(module) -> int:
    return sum(p.numel() for p in module.parameters())


def vgg(width, kernel=3, depth=1, down="first"):
    return {"style": "vgg", "depth": depth, "width": width, "down": down, "kernel": kernel}


# stem 8 -> vgg 16 -> inception 32 -> resnet(X) 32 -> mobilenet 32, 10 classes
TINY = {"v": 1, "stem": 8, "act": "relu", "classes": 10, "stages": [
    vgg(16),
    {"style": "inception", "depth": 1, "width": 32, "down": "first", "b1": 8, "b3r": 8, "b3": 8, "b5r": 8, "b5": 8,
     "bp": 8, "b5_mode": "5x5"},
    {"style": "resnet", "depth": 1, "width": 32, "down": "first", "block": "bottleneck", "mid": 16, "groups": 4},
    {"style": "mobilenet", "depth": 1, "width": 32, "down": "last", "expand": 2, "kernel": 3, "se": True}]}
# Convs have no bias, each BN has 2 x channels parameters.
TINY_PARAMS = (
    (3 * 8 * 9 + 16)                                           # stem
    + (8 * 16 * 9 + 32)                                        # vgg conv 3x3
    + (16 * 8 + 16)                                            # inception 1x1
    + (16 * 8 + 16) + (8 * 8 * 9 + 16)                         # 1x1 -> 3x3
    + (16 * 8 + 16) + (8 * 8 * 25 + 16)                        # 1x1 -> 5x5
    + (16 * 8 + 16)                                            # pool -> 1x1
    + (32 * 16 + 32) + (16 * 4 * 9 + 32) + (16 * 32 + 64)      # bottleneck, 3x3 in 4 groups
    + (32 * 32 + 64)                                           # projection shortcut (stride 2)
    + (32 * 64 + 128) + (64 * 9 + 128)                         # expand, depthwise
    + (64 * 16 + 16) + (16 * 64 + 64)                          # squeeze-excitation (with biases)
    + (64 * 32 + 64)                                           # project
    + (32 * 10 + 10)                                           # linear
)
DENSE = {"v": 1, "stem": 8, "act": "silu", "classes": 10, "stages": [
    {"style": "densenet", "depth": 2, "width": 24, "down": "first", "growth": 4, "bn_size": 2},
    vgg(8), vgg(8), vgg(8)]}
DENSE_PARAMS = (
    (3 * 8 * 9 + 16)
    + (16 + 8 * 16)                                            # transition: BN(8), conv 1x1 8 -> 24 - 2 * 4
    + (32 + 16 * 8 + 16 + 8 * 4 * 9)                           # layer 1: BN(16), 1x1 -> 8, BN(8), 3x3 -> 4
    + (40 + 20 * 8 + 16 + 8 * 4 * 9)                           # layer 2 on 20 channels
    + (24 * 8 * 9 + 16) + 2 * (8 * 8 * 9 + 16)                 # three vgg stages
    + (8 * 10 + 10)
)


def test_sampling_is_deterministic_and_extendable():
    a = sample_configs(20, seed=3)
    assert a == sample_configs(20, seed=3)
    assert sample_configs(25, seed=3)[:20] == a  # a prefix: a collection can grow
    assert a != sample_configs(20, seed=4)
    assert len({canonical_json(c) for c in a}) == 20
    assert all(json.loads(json.dumps(c)) == c for c in a)  # JSON-serialisable as is


def test_sampled_space_covers_every_style_at_moderate_size():
    configs = sample_configs(60, seed=0)
    styles = {s["style"] for c in configs for s in c["stages"]}
    assert styles == set(STYLES)
    assert any(s["style"] == "resnet" and s["groups"] > 1 for c in configs for s in c["stages"])  # ResNeXt
    assert {s["down"] for c in configs for s in c["stages"]} == {"first", "last"}
    widths = [s["width"] for c in configs for s in c["stages"]]
    assert min(widths) >= 16 and max(widths) <= 512
    for c in configs[:12]:
        with torch.device("meta"):
            n = params(build_space_model(c))
        assert 1e5 < n < 5e7


def test_reference_round_trip_rebuilds_the_same_model():
    config = sample_configs(1, seed=7)[0]
    ref = space_ref(config)
    assert ref == "space:" + json.dumps(config, separators=(",", ":"), sort_keys=True)
    assert parse_space(ref) == config
    # another spelling of the same config is the same network and the same canonical reference
    assert canonical_ref("space:" + json.dumps(config, indent=1)) == ref
    torch.manual_seed(0)
    a = build_space_model(config)
    torch.manual_seed(0)
    b = build_space_model(ref)
    assert params(a) == params(b)
    assert [(k, v.shape) for k, v in a.state_dict().items()] == [(k, v.shape) for k, v in b.state_dict().items()]
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(a.eval()(x), b.eval()(x))
    assert describe(config).count("(") == 4


def test_parameter_counts_by_hand():
    assert params(build_space_model(TINY)) == TINY_PARAMS
    assert params(build_space_model(DENSE)) == DENSE_PARAMS


@pytest.mark.parametrize("style_config", [TINY, DENSE], ids=["vgg-inception-resnext-mobilenet", "densenet"])
@pytest.mark.parametrize("down", ["first", "last"])
def test_every_style_builds_and_runs(style_config, down):
    config = copy.deepcopy(style_config)
    for s in config["stages"]:
        s["down"] = down
    model = build_space_model(config)
    out = model(torch.randn(2, 3, 32, 32))  # 32 -> 16 -> 8 -> 4 -> 2 -> 1
    assert out.shape == (2, 10)
    out.sum().backward()


def test_inception_double_3x3_and_basic_block():
    config = copy.deepcopy(TINY)
    config["stages"][1]["b5_mode"] = "3x3x2"
    config["stages"][2] = {"style": "resnet", "depth": 2, "width": 32, "down": "last", "block": "basic", "mid": 24,
                           "groups": 1}
    model = build_space_model(config)
    assert model.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 10)
    convs5 = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (5, 5)]
    assert not convs5


def test_space_reference_in_the_graph_stage():
    assert "space" in REFERENCE_KINDS
    ref = space_ref(TINY)
    assert split_reference(ref) == ("space", ref[len("space:"):])
    pg = perfseer.extract(ref, batch=2, input_shape=(3, 32, 32))
    assert pg.params == TINY_PARAMS
    assert pg.batch_size == 2


@pytest.mark.parametrize("mutate, names", [
    (lambda c: c.pop("stem"), ["lacks stem"]),
    (lambda c: c.update(extra=1), ["unknown key extra"]),
    (lambda c: c.update(v=2), ["v is 2"]),
    (lambda c: c.update(act="tanh"), ["act", "'tanh'"]),
    (lambda c: c["stages"].pop(), ["stages", "4 stage objects"]),
    (lambda c: c["stages"][0].update(style="transformer"), ["stages[0].style"]),
    (lambda c: c["stages"][0].pop("kernel"), ["stages[0] lacks kernel"]),
    (lambda c: c["stages"][2].update(groups=3), ["stages[2]", "mid 16", "groups 3"]),
    (lambda c: c["stages"][1].update(width=40), ["stages[1].width is 40", "b1 + b3 + b5 + bp"]),
    (lambda c: c["stages"][0].update(depth=0), ["stages[0].depth is 0"]),
    (lambda c: c["stages"][0].update(width=True), ["stages[0].width is true"]),
])
def test_bad_configs_are_one_line_errors(mutate, names):
    config = copy.deepcopy(TINY)
    mutate(config)
    with pytest.raises(ModelLoadError) as e:
        validate_config(config)
    assert_user_error(str(e.value), *names)


def test_bad_reference_text():
    for text, name in (("space:{oops", "not JSON"), ("space:[1, 2]", "JSON object")):
        with pytest.raises(ModelLoadError) as e:
            build_space_model(text)
        assert_user_error(str(e.value), name)
    dense = copy.deepcopy(DENSE)
    dense["stages"][0]["width"] = 8  # 2 layers x growth 4 leave nothing for the transition
    with pytest.raises(ModelLoadError) as e:
        validate_config(dense)
    assert_user_error(str(e.value), "transition")
