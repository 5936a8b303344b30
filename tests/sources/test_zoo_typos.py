"""A mistyped timm: or torchvision: name is refused with the closest names as the fix."""

import pytest

from perfseer.errors import ModelLoadError
from perfseer.sources import zoo


def test_close_names_first():
    names = ["resnet50", "resnet50d", "resnet101", "vit_base_patch16_224", "convnext_tiny"]
    assert zoo.did_you_mean("resnt50", names).startswith("did you mean resnet50, resnet50d")
    assert zoo.did_you_mean("convnxt_tiny", names).startswith("did you mean convnext_tiny")
    assert zoo.did_you_mean("zzzqqq", names, "timm.list_models()") == \
        "check the name (timm.list_models() lists them)"


@pytest.mark.parametrize("kind, typo, right", [("timm", "resnt50", "resnet50"),
                                               ("torchvision", "resnet5O", "resnet50")])
def test_a_typo_suggests_the_model(kind, typo, right):
    pytest.importorskip(kind)
    with pytest.raises(ModelLoadError) as e:
        zoo.build_zoo_model(kind, typo)
    assert f"model named '{typo}'" in str(e.value)
    assert f"fix: did you mean {right}" in str(e.value)
