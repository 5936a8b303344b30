"""Splits by architecture and by family: deterministic, stable when models are added, 2:1:1."""

from __future__ import annotations

from collections import Counter

import pytest

from perfseer.data.splits import (SPLITS, architecture_key, assign_splits, describe, family_of, model_family,
                                  split_of)
from perfseer.errors import PerfseerError


def test_split_is_a_pure_function_of_seed_and_model():
    # Pinned values: the assignment is documented as stable; changing the rule must change
    # _HASH_PREFIX (and this test) on purpose.
    models = ("timm:resnet50", "timm:vit_base_patch16_224", "example:resnet18", "timm:convnext_tiny")
    assert [split_of(m, 0) for m in models] == ["train", "train", "val", "val"]
    assert [split_of(m, 2) for m in models] == ["val", "train", "test", "val"]
    keys = [f"nb201:arch{i}" for i in range(200)]
    assert [split_of(k, 0) for k in keys] != [split_of(k, 1) for k in keys]  # the seed matters


def test_adding_models_does_not_move_the_others():
    old = [f"timm:model{i}" for i in range(50)]
    new = old + [f"timm:other{i}" for i in range(50)]
    before = assign_splits(old, seed=3)["split"].tolist()
    after = assign_splits(new, seed=3)["split"].tolist()
    assert after[:50] == before


def test_ratios_are_two_one_one_on_many_models():
    counts = Counter(split_of(f"nb201:{i}", 7) for i in range(4000))
    assert set(counts) == set(SPLITS)
    assert abs(counts["train"] / 4000 - 0.5) < 0.03
    assert abs(counts["val"] / 4000 - 0.25) < 0.03 and abs(counts["test"] / 4000 - 0.25) < 0.03
    only_train = Counter(split_of(f"nb201:{i}", 7, ratios=(1, 0, 0)) for i in range(100))
    assert only_train == {"train": 100}


def test_every_row_of_a_model_shares_its_split():
    models = ["timm:resnet50", "timm:resnet50", "timm:resnet18", "nb201:a", "timm:resnet50", "nb201:a",
              "timm:repvgg_a2", "timm:repvgg_a2@reparam"]
    for seed in range(5):
        split = assign_splits(models, seed=seed)["split"].tolist()
        by_model = {}
        for model, s in zip(models, split):
            by_model.setdefault(architecture_key(model), set()).add(s)
        assert all(len(s) == 1 for s in by_model.values())  # @reparam included: the same architecture
    assert architecture_key("timm:repvgg_a2@reparam") == "timm:repvgg_a2"


def test_family_split_keeps_a_family_together_and_skips_other_references():
    models = ["timm:resnet50", "timm:resnet18d", "torchvision:resnet101", "example:resnet18",
              "timm:vit_base_patch16_224", "nb201:|nor_conv_3x3~0|", "net.onnx"]
    cols = assign_splits(models, seed=5)
    assert cols["family"].tolist()[:5] == ["resnet"] * 4 + ["vit"]
    assert cols["family_split"][:4].nunique() == 1
    assert cols["family"][5:].isna().all() and cols["family_split"][5:].isna().all()
    assert cols["split"].notna().all()


@pytest.mark.parametrize("name, family", [
    ("resnet50d", "resnet"),
    ("resnet18", "resnet"),
    ("gluon_resnet50_v1b", "resnet"),  # weight-source prefix of older timm versions
    ("vit_base_patch16_224", "vit"),
    ("vit_small_patch16_384.augreg_in21k_ft_in1k", "vit"),  # pretrained tag
    ("convnext_tiny", "convnext"),
    ("convnextv2_nano", "convnextv2"),
    ("efficientnet_b0", "efficientnet"),
    ("tf_efficientnet_b0", "efficientnet"),
    ("tf_efficientnetv2_s", "efficientnetv2"),
    ("mobilenetv3_large_100", "mobilenetv3"),
    ("mobilenet_v3_small", "mobilenetv3"),  # torchvision's spelling
    ("swinv2_cr_tiny_ns_224", "swinv2"),
    ("regnety_040", "regnety"),
    ("wide_resnet50_2", "wide_resnet"),
    ("res2net50_26w_4s", "res2net"),
    ("eca_nfnet_l0", "nfnet"),
    ("nf_resnet50", "nfnet"),
    ("deit3_base_patch16_224", "deit"),
    ("eva02_base_patch14_224", "eva"),
    ("inception_v3", "inceptionv3"),
    ("adv_inception_v3", "inceptionv3"),
    ("inception_resnet_v2", "inception_resnet"),
    ("repvgg_a2@reparam", "repvgg"),
    ("xcit_tiny_12_p16_224", "xcit"),
    ("vgg16_bn", "vgg"),
    ("cs3darknet_m", "cs3darknet"),
    ("tiny_vit_5m_224", "tiny_vit"),
    ("seresnet50", "seresnet"),  # a variant named in one word stays its own family
])
def test_family_rule_on_real_timm_names(name, family):
    assert family_of(name) == family


def test_model_family_by_scheme():
    assert model_family("timm:resnet50d") == "resnet"
    assert model_family("torchvision:vit_b_16") == "vit"
    assert model_family("example:mobilenet_v3_small") == "mobilenetv3"
    assert model_family("nb201:|nor_conv_3x3~0|") is None
    assert model_family("models/resnet50.onnx") is None


def test_bad_ratios_are_refused():
    with pytest.raises(PerfseerError, match="ratios"):
        split_of("timm:resnet50", 0, ratios=(1, 1))
    with pytest.raises(PerfseerError, match="ratios"):
        describe(0, ratios=(0, 0, 0))
