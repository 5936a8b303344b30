"""The table of model reference schemes: ``timm:NAME``, ``torchvision:NAME``, ``example:NAME``,
``nb201:ARCH``, ``fbnet:BLOCKS``, ``ofa:...``, ``space:CONFIG`` and ``hf:NAME``.

One :class:`Scheme` per scheme says what a reference names, the pip extra it needs, how to build
its ``torch.nn.Module`` (on the meta device for graphs and memory, with random weights for
measurement), how to export its ONNX skeleton, its default input, whether it can be measured or
simulated, and how to list its names.  Extraction (:mod:`perfseer.sources.load`), memory
(:func:`perfseer.memory.api.resolve_model`) and collection (:mod:`perfseer.sources.runnable`) all
read this table; no other module parses ``scheme:name`` strings.

This module is light (no torch, no onnx at import): the builders import their heavy packages on
first use.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from perfseer.errors import MissingDependencyError, ModelLoadError
from perfseer.sources import hf, nas, space, zoo


@dataclass(frozen=True)
class Scheme:
    """One model reference scheme (``NAME:...``) and what perfseer can do with it.

    Attributes:
        name: the word before the colon.
        what: what a reference of this scheme names (one line, for help and errors).
        example: a reference of this scheme.
        skeleton: ``(name, input_shape, seq_len, boxes) -> Skeleton``: the ONNX skeleton.
        module: ``(name, meta) -> (torch.nn.Module, default input shape)``; ``None``: the scheme
            has no PyTorch definition (an ONNX graph, or a model built only for export).
        default_input: one sample without the batch when none is given; ``None``: the model's own
            (zoo models, ``hf:`` token counts).
        extra: the pip extra the scheme needs (``None``: the core install).
        packages: the importable packages the extra provides.
        measurable: the collection backends can build it with random weights and run it.
        simulable: the memory simulator runs its module (else: ONNX liveness, inference only).
        trainable: training memory can be estimated (it needs the PyTorch module).
        names: ``() -> list[str]`` of the names a reference may give (completion); ``None``: the
            names are encodings (architectures, configs), not a list.
    """

    name: str
    what: str
    example: str
    skeleton: Callable
    module: Callable | None = None
    default_input: tuple[int, ...] | None = None
    extra: str | None = None
    packages: tuple[str, ...] = ()
    measurable: bool = False
    simulable: bool = False
    trainable: bool = False
    names: Callable | None = None

    @property
    def install(self) -> str | None:
        """The pip command that installs what the scheme needs (``None``: nothing beyond the core)."""
        return f"pip install 'perfseer[{self.extra}]'" if self.extra else None

    def missing(self) -> list[str]:
        """The scheme's packages that are not installed."""
        return [p for p in self.packages if importlib.util.find_spec(p) is None]

    def available(self) -> bool:
        return not self.missing()

    def require(self) -> None:
        """Raise :class:`~perfseer.errors.MissingDependencyError` (naming the pip install) when a
        package the scheme needs is missing."""
        missing = self.missing()
        if missing:
            raise MissingDependencyError(missing[0], self.extra, f"the {self.name}: model reference")

    def build(self, name: str, meta: bool = True):
        """``(module, default input shape)`` of ``name``: on the meta device when ``meta`` (no
        weight allocated; some models build on CPU instead), else with random weights on CPU.

        Raises:
            ModelLoadError: the scheme has no PyTorch definition, or ``name`` is not valid.
        """
        if self.module is None:
            raise ModelLoadError(f"{self.name}:{name[:80]} has no PyTorch definition",
                                 f"{self.name}: references are read as ONNX graphs")
        return self.module(name, meta)

    def export(self, name: str, input_shape=None, seq_len: int | None = None, boxes: int | None = None):
        """The ONNX :class:`~perfseer.graph.onnx_io.Skeleton` of ``name`` (no weights)."""
        return self.skeleton(name, input_shape, seq_len, boxes)

    def list_names(self) -> list[str]:
        """Full references of every name this scheme offers (``[]``: encodings, or the extra is
        not installed)."""
        if self.names is None or not self.available():
            return []
        return [f"{self.name}:{n}" for n in self.names()]


# -- the builders each scheme points at ---------------------------------------------------------

def examples() -> list[str]:
    """Names of the example model graphs bundled with perfseer (``example:NAME``)."""
    folder = resources.files("perfseer") / "examples"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".onnx"))


def example_path(name: str) -> Path:
    """The bundled ``.onnx`` file of ``example:NAME``."""
    if not isinstance(name, str) or name not in examples():  # a name, never a path (no separator, no "..")
        raise ModelLoadError(f"no bundled example named {str(name)[:80]!r}",
                             f"use one of: {', '.join('example:' + e for e in examples())}")
    path = Path(str(resources.files("perfseer") / "examples" / f"{name}.onnx"))
    if not path.exists():
        raise ModelLoadError(f"no bundled example named '{name}'",
                             f"use one of: {', '.join('example:' + e for e in examples())}")
    return path


def _example_skeleton(name, input_shape, seq_len, boxes):
    from perfseer.graph.onnx_io import read_skeleton  # imports onnx: deferred for CLI start-up

    return read_skeleton(example_path(name))


def _zoo_skeleton(kind):
    def skeleton(name, input_shape, seq_len, boxes):
        return zoo.export_zoo_model(kind, name, input_shape, boxes=boxes)[0]

    return skeleton


def _zoo_module(kind):
    def module(name, meta):
        built, default, _ = zoo.build_zoo_model(kind, name, meta=meta)
        return built, default

    return module


def _zoo_names(kind):
    def names():
        return list(zoo.import_zoo(kind).list_models())

    return names


def _nas_skeleton(kind):
    def skeleton(name, input_shape, seq_len, boxes):
        return nas.export_space_model(kind, name, input_shape)

    return skeleton


def _nas_module(kind):
    def module(name, meta):
        import torch  # deferred for CLI start-up

        # for_graph=False: the network as measured for accuracy/latency, logits only
        with torch.device("meta") if meta else _no_context():
            built = nas.build_space_model(kind, name)
        return built, nas.DEFAULT_INPUT

    return module


def _space_skeleton(name, input_shape, seq_len, boxes):
    return space.export_space(name, input_shape)


def _space_module(name, meta):
    import torch  # deferred for CLI start-up

    with torch.device("meta") if meta else _no_context():
        built = space.build_space_model(name)
    return built, space.DEFAULT_INPUT_SHAPE


def _hf_skeleton(name, input_shape, seq_len, boxes):
    return hf.export_hf_model(name, input_shape, seq_len)


def _hf_module(name, meta):
    ref = hf.parse_reference(name)
    module, _ = hf.build_model(ref)  # built on the meta device
    return module, (hf.DEFAULT_SEQ_LEN,)


class _no_context:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


#: Every scheme, in the order help and errors list them.
SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("timm", "a timm model, random weights", "timm:resnet50", _zoo_skeleton("timm"), _zoo_module("timm"),
           extra="zoo", packages=("timm",), measurable=True, simulable=True, trainable=True,
           names=_zoo_names("timm")),
    Scheme("torchvision", "a torchvision classification, detection or segmentation model, random weights",
           "torchvision:resnet50", _zoo_skeleton("torchvision"), _zoo_module("torchvision"), extra="zoo",
           packages=("torchvision",), measurable=True, simulable=True, trainable=True,
           names=_zoo_names("torchvision")),
    Scheme("example", "a model graph that ships with perfseer (ONNX, no weights)", "example:resnet18",
           _example_skeleton, names=examples),
    Scheme("nb201", "a NAS-Bench-201 CIFAR-10 network from its architecture string",
           "nb201:|nor_conv_3x3~0|+|nor_conv_3x3~0|avg_pool_3x3~1|+|skip_connect~0|nor_conv_3x3~1|skip_connect~2|",
           _nas_skeleton("nb201"), _nas_module("nb201"), default_input=nas.DEFAULT_INPUT, measurable=True,
           simulable=True, trainable=True),
    Scheme("fbnet", "an FBNet CIFAR-100 network from its 22 block choices", "fbnet:" + " ".join(["k3_e1"] * 22),
           _nas_skeleton("fbnet"), _nas_module("fbnet"), default_input=nas.DEFAULT_INPUT, measurable=True,
           simulable=True, trainable=True),
    Scheme("ofa", "a Once-for-All MobileNetV3 sub-network (input 3xRxR)",
           "ofa:ks=" + ",".join(["3"] * 20) + ";e=" + ",".join(["3"] * 20) + ";d=2,2,2,2,2;r=224",
           _nas_skeleton("ofa"), extra="ofa", packages=("ofa", "torchvision")),
    Scheme("space", "a network of the PerfSeer model space from its JSON config", "space:{...}",
           _space_skeleton, _space_module, default_input=space.DEFAULT_INPUT_SHAPE, measurable=True,
           simulable=True, trainable=True),
    Scheme("hf", "a HuggingFace transformer from its configuration (no hub access)", "hf:bert-base-uncased",
           _hf_skeleton, _hf_module, extra="hf", packages=("transformers",), simulable=True, trainable=True,
           names=hf.known_models),
)}

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]+")  # what may stand before the colon of a reference

#: The scheme names, in table order.
NAMES: tuple[str, ...] = tuple(SCHEMES)


def choices() -> str:
    """``timm:, torchvision:, ...``: the schemes as an error message lists them."""
    return ", ".join(k + ":" for k in NAMES)


def scheme_word(ref) -> str | None:
    """The scheme word of anything shaped like ``WORD:NAME`` (known or not; the name may be
    empty), else ``None``.

    A one-letter word is a Windows drive (``C:\\nets\\a.onnx``), and an ``.onnx`` path is a file,
    however it is spelled."""
    if not isinstance(ref, str):
        return None
    kind, sep, _ = ref.partition(":")
    if sep and _WORD.fullmatch(kind) and not ref.lower().endswith(".onnx"):
        return kind
    return None


def split_reference(model) -> tuple[str, str] | None:
    """``"timm:resnet50"`` -> ``("timm", "resnet50")``; ``None`` for a file path (or anything whose
    scheme is not in the table)."""
    if not isinstance(model, str):
        return None
    kind, sep, name = model.partition(":")
    if sep and kind in SCHEMES and name:
        return kind, name
    return None


def unknown_scheme(kind: str, alternative: str = "") -> ModelLoadError:
    """The error for a reference whose scheme is not in the table, naming the choices."""
    return ModelLoadError(f"unknown model reference kind '{kind}:'",
                          f"use one of: {choices()}{alternative}")


def scheme(name: str) -> Scheme:
    """The :class:`Scheme` called ``name``.

    Raises:
        ModelLoadError: no such scheme (the message lists the choices).
    """
    try:
        return SCHEMES[name]
    except KeyError:
        raise unknown_scheme(name) from None


def resolve(ref: str) -> tuple[Scheme, str]:
    """``"timm:resnet50"`` -> ``(the timm Scheme, "resnet50")``.

    Raises:
        ModelLoadError: an unknown scheme (listing the choices), or not a reference at all.
    """
    split = split_reference(ref)
    if split is not None:
        return SCHEMES[split[0]], split[1]
    word = scheme_word(ref)
    if word is not None:
        raise unknown_scheme(word)
    raise ModelLoadError(f"{str(ref)[:80]!r} is not a model reference",
                         f"write SCHEME:NAME with SCHEME one of {', '.join(NAMES)}, e.g. timm:resnet50")


def all_names() -> list[str]:
    """Every listable reference (examples, zoo models, shipped ``hf:`` configs) of the installed
    schemes, for completion."""
    return [n for s in SCHEMES.values() for n in s.list_names()]
