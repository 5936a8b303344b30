"""The table of model reference schemes (perfseer.sources): every scheme listed once, the
unknown-scheme and missing-extra errors, and one reference per scheme resolved where cheap."""

import importlib.util

import pytest

from perfseer import sources
from perfseer.errors import MissingDependencyError, ModelLoadError
from perfseer.sources import SCHEMES, Scheme, resolve, scheme, scheme_word, split_reference

ALL = ("timm", "torchvision", "example", "nb201", "fbnet", "ofa", "space", "hf")


def test_every_scheme_is_in_the_table_once():
    assert sources.NAMES == ALL
    for name, s in SCHEMES.items():
        assert isinstance(s, Scheme) and s.name == name
        assert s.example.startswith(f"{name}:")
        assert s.what and callable(s.skeleton)
        assert (s.extra is None) == (not s.packages)
        assert s.measurable <= (s.module is not None)  # measuring needs a PyTorch module
        assert s.trainable <= s.simulable
    assert sources.choices() == ", ".join(k + ":" for k in ALL)


def test_the_old_names_read_the_table():
    from perfseer.data.table import MODEL_SCHEMES
    from perfseer.sources.load import REFERENCE_KINDS
    from perfseer.sources.runnable import TORCH_SCHEMES

    assert REFERENCE_KINDS == MODEL_SCHEMES == ALL
    assert TORCH_SCHEMES == ("timm", "torchvision", "nb201", "fbnet", "space")


def test_split_and_scheme_word():
    assert split_reference("timm:resnet50") == ("timm", "resnet50")
    assert split_reference("nets/a.onnx") is None
    assert split_reference("mystery:x") is None and scheme_word("mystery:x") == "mystery"
    assert scheme_word(r"C:\nets\a.onnx") is None and scheme_word("s3:bucket/a.onnx") is None
    assert scheme_word("nets/a.onnx") is None and scheme_word(42) is None


def test_unknown_scheme_names_the_choices():
    with pytest.raises(ModelLoadError) as e:
        scheme("mystery")
    assert "mystery" in e.value.problem
    for name in ALL:
        assert f"{name}:" in e.value.fix
    with pytest.raises(ModelLoadError, match="unknown model reference kind 'mystery:'"):
        resolve("mystery:x")
    with pytest.raises(ModelLoadError, match="not a model reference"):
        resolve("nets/a.onnx")


def test_missing_extra_names_the_pip_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "transformers" else real(n, *a))
    hf = scheme("hf")
    assert hf.missing() == ["transformers"] and not hf.available() and hf.list_names() == []
    with pytest.raises(MissingDependencyError) as e:
        hf.require()
    assert "transformers" in e.value.problem and "hf:" in e.value.problem
    assert e.value.fix == "pip install 'perfseer[hf]'" == hf.install
    assert scheme("example").install is None
    scheme("example").require()  # the core install: nothing to miss


def test_a_scheme_without_pytorch_says_so():
    with pytest.raises(ModelLoadError, match="no PyTorch definition"):
        scheme("example").build("resnet18")


def test_every_example_resolves():
    for name in ALL:
        s, rest = resolve(SCHEMES[name].example)
        assert s is SCHEMES[name] and rest


def test_cheap_references_export():
    for name in ("example", "nb201", "fbnet"):
        s, rest = resolve(SCHEMES[name].example)
        skel = s.export(rest)
        assert len(skel.model.graph.node) > 10


def test_example_names_are_listed():
    names = scheme("example").list_names()
    assert "example:resnet18" in names and all(n.startswith("example:") for n in names)
    assert set(names) <= set(sources.all_names())


def test_ofa_example_parses():
    from perfseer.sources.nas.ofa import parse_ofa

    parse_ofa(SCHEMES["ofa"].example.partition(":")[2])


def test_meta_builds():
    import torch

    for name in ("nb201", "fbnet"):
        module, shape = scheme(name).build(SCHEMES[name].example.partition(":")[2], meta=True)
        assert shape == (3, 32, 32)
        assert all(p.device.type == "meta" for p in module.parameters())
    from perfseer.sources.space import sample_configs, space_ref

    module, shape = scheme("space").build(space_ref(sample_configs(1)[0]).partition(":")[2], meta=True)
    assert shape == (3, 224, 224) and all(p.device.type == "meta" for p in module.parameters())
    assert isinstance(module, torch.nn.Module)
