"""Once-for-All MobileNetV3 sub-networks: ``ofa:ks=K1,...,K20;e=E1,...,E20;d=D1,...,D5;r=R``.

The network is the sub-network of the OFA MobileNetV3 super-network of width 1.2 (ImageNet, 1000
classes; kernel sizes {3, 5, 7}, expansion ratios {3, 4, 6}, stage depths {2, 3, 4}) that HELP
measured (``ofa_latency.csv``, imported by :mod:`perfseer.data.importers.help_nas`), built by the
MIT-Han-Lab ``ofa`` package itself (the optional ``ofa`` extra)::

    net = OFAMobileNetV3(dropout_rate=0, width_mult=1.2, ks_list=[3, 5, 7],
                         expand_ratio_list=[3, 4, 6], depth_list=[2, 3, 4])
    net.set_active_subnet(ks=KS, e=E, d=D)
    sub = net.get_active_subnet(preserve_weight=False)

The reference holds the kernel size and expansion ratio of each of the 20 block slots (5 stages x
4), the depth of each of the 5 stages (a stage of depth D runs its first D slots; the values of the
other slots are kept, as HELP gives them, and change nothing) and the input resolution R: the input
is ``3 x R x R`` unless an explicit input shape is given.

The super-network is built once per process, on the meta device for export (no weights are
allocated) and on the CPU for :func:`build_ofa`; each sub-network is exported through
:func:`perfseer.graph.torch_export.skeleton_from_module`.

Example:
    >>> arch = parse_ofa("ks=" + ",".join(["3"] * 20) + ";e=" + ",".join(["3"] * 20) + ";d=2,2,2,2,2;r=224")
    >>> arch.input_shape
    (3, 224, 224)
"""

from __future__ import annotations

import functools
import importlib.util
import re
import threading
from dataclasses import dataclass

from perfseer.errors import MissingDependencyError, ModelLoadError
from perfseer.sources.zoo import import_zoo

SLOTS = 20  # 5 stages x at most 4 blocks
STAGES = 5
KERNEL_SIZES = (3, 5, 7)
EXPAND_RATIOS = (3, 4, 6)
DEPTHS = (2, 3, 4)
WIDTH_MULT = 1.2
NUM_CLASSES = 1000
FORM = f"ofa:ks=K1,...,K{SLOTS};e=E1,...,E{SLOTS};d=D1,...,D{STAGES};r=R"
_FIX = (f"write {FORM}: {SLOTS} kernel sizes from {{3, 5, 7}}, {SLOTS} expansion ratios from {{3, 4, 6}}, "
        f"{STAGES} stage depths from {{2, 3, 4}}, each comma-separated, and a positive input resolution R")
_PARTS = {"ks": (SLOTS, KERNEL_SIZES, "kernel sizes"), "e": (SLOTS, EXPAND_RATIOS, "expansion ratios"),
          "d": (STAGES, DEPTHS, "stage depths")}
_OFA_REF = re.compile(r"^ofa:ks=(?P<ks>[\d,]+);e=(?P<e>[\d,]+);d=(?P<d>[\d,]+);r=(?P<r>\d+)$")


@dataclass(frozen=True)
class OFAArch:
    """A Once-for-All MobileNetV3 sub-network.

    Attributes:
        ks: kernel size of each of the 20 block slots.
        e: expansion ratio of each of the 20 block slots.
        d: depth (blocks used, from the first slot) of each of the 5 stages.
        r: input resolution (the input is 3 x r x r).

    Example::

        arch = OFAArch.from_ref("ofa:ks=3,5,...;e=4,6,...;d=2,3,4,2,3;r=224")
        arch.ref  # the same string back
    """

    ks: tuple[int, ...]
    e: tuple[int, ...]
    d: tuple[int, ...]
    r: int

    @property
    def ref(self) -> str:
        """The model reference, ``ofa:ks=...;e=...;d=...;r=...``."""
        join = ",".join
        return f"ofa:ks={join(map(str, self.ks))};e={join(map(str, self.e))};d={join(map(str, self.d))};r={self.r}"

    @classmethod
    def from_ref(cls, ref: str) -> OFAArch:
        """Read an ``ofa:`` reference (the inverse of :attr:`ref`)."""
        m = _OFA_REF.match(ref.strip())
        fix = (f"write ofa:ks=K1,...,K{SLOTS};e=E1,...,E{SLOTS};d=D1,...,D{STAGES};r=R "
               "with positive integers")
        if m is None:
            raise ModelLoadError(f"cannot read the Once-for-All reference '{ref}'", fix)
        try:
            parts = {k: tuple(int(v) for v in m[k].split(",")) for k in ("ks", "e", "d")}
        except ValueError:
            raise ModelLoadError(f"cannot read the Once-for-All reference '{ref}'", fix) from None
        arch = cls(parts["ks"], parts["e"], parts["d"], int(m["r"]))
        if (len(arch.ks), len(arch.e), len(arch.d)) != (SLOTS, SLOTS, STAGES) or arch.r < 1:
            raise ModelLoadError(f"the Once-for-All reference '{ref}' needs {SLOTS} ks, {SLOTS} e "
                                 f"and {STAGES} d values and r >= 1", fix)
        return arch


@dataclass(frozen=True)
class OFASubnet(OFAArch):
    """A Once-for-All MobileNetV3 sub-network (see the module docstring): an :class:`OFAArch`
    checked against the super-network's choices by :func:`parse_ofa`."""

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (3, self.r, self.r)


def parse_ofa(arch: str) -> OFASubnet:
    """Read an architecture ``ks=...;e=...;d=...;r=...`` (with or without the ``ofa:`` prefix).

    Raises:
        ModelLoadError: naming the bad part and the expected form.
    """
    if not isinstance(arch, str):
        raise ModelLoadError(f"a Once-for-All architecture must be a string, got {type(arch).__name__}", _FIX)
    text = arch.strip()
    if text.startswith("ofa:"):
        text = text[4:]
    arch = "ofa:" + text  # the reference, as messages quote it
    values: dict[str, str] = {}
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in (*_PARTS, "r"):
            raise ModelLoadError(f"Once-for-All architecture {arch!r}: cannot read the part {part!r} "
                                 "(expected ks=..., e=..., d=... and r=...)", _FIX)
        if key in values:
            raise ModelLoadError(f"Once-for-All architecture {arch!r} gives {key}= twice", _FIX)
        values[key] = value.strip()
    missing = [k for k in (*_PARTS, "r") if k not in values]
    if missing:
        raise ModelLoadError(f"Once-for-All architecture {arch!r} has no {', '.join(k + '=' for k in missing)}", _FIX)
    lists = {}
    for key, (count, allowed, what) in _PARTS.items():
        items = values[key].split(",")
        try:
            numbers = tuple(int(v) for v in items)
        except ValueError:
            raise ModelLoadError(f"Once-for-All architecture {arch!r}: {key}={values[key]!r} is not a "
                                 f"comma-separated list of integers", _FIX) from None
        if len(numbers) != count:
            raise ModelLoadError(f"Once-for-All architecture {arch!r}: {key} has {len(numbers)} values, "
                                 f"expected {count} {what}", _FIX)
        for index, v in enumerate(numbers):
            if v not in allowed:
                raise ModelLoadError(f"Once-for-All architecture {arch!r}: {key} value {index + 1} of {count} is {v}, "
                                     f"expected one of {', '.join(map(str, allowed))}", _FIX)
        lists[key] = numbers
    try:
        r = int(values["r"])
    except ValueError:
        r = 0
    if r < 1:
        raise ModelLoadError(f"Once-for-All architecture {arch!r}: r={values['r']!r} is not a positive integer "
                             "(the input resolution)", _FIX)
    return OFASubnet(lists["ks"], lists["e"], lists["d"], r)


def _import_ofa():
    """The ``OFAMobileNetV3`` class; ``ofa`` imports torchvision, whose CPU-incompatible compiled ops
    are first made harmless by :mod:`perfseer.sources.zoo`."""
    for package in ("ofa", "torchvision"):
        if importlib.util.find_spec(package) is None:
            raise MissingDependencyError(package, "ofa", "the ofa: model reference (Once-for-All)")

    import_zoo("torchvision")
    from ofa.imagenet_classification.elastic_nn.networks import OFAMobileNetV3  # deferred: an optional extra

    return OFAMobileNetV3


_LOCK = threading.Lock()  # set_active_subnet mutates the shared super-network


@functools.lru_cache(maxsize=None)
def super_net(device: str = "meta"):
    """The OFA MobileNetV3 w1.2 super-network on ``device`` (``"meta"``: no weights allocated), built
    once per process and device."""
    import torch  # deferred: heavy, loaded on first use

    cls = _import_ofa()
    with torch.device(device):
        return cls(n_classes=NUM_CLASSES, dropout_rate=0, width_mult=WIDTH_MULT, ks_list=list(KERNEL_SIZES),
                   expand_ratio_list=list(EXPAND_RATIOS), depth_list=list(DEPTHS))


def build_ofa(arch: str | OFASubnet, device: str = "cpu"):
    """The sub-network ``arch`` (a ``torch.nn.Module`` in eval mode, random weights) on ``device``,
    as the ``ofa`` package builds it.

    Raises:
        ModelLoadError: malformed architecture.
        MissingDependencyError: the ``ofa`` package (or torchvision) is not installed.
    """
    import torch  # deferred: heavy, loaded on first use

    spec = arch if isinstance(arch, OFASubnet) else parse_ofa(arch)
    net = super_net(device)
    with _LOCK, torch.device(device):
        net.set_active_subnet(ks=list(spec.ks), e=list(spec.e), d=list(spec.d))
        sub = net.get_active_subnet(preserve_weight=False)
    return sub.eval()


def ofa_skeleton(arch: str | OFASubnet, input_shape=None):
    """The ONNX :class:`~perfseer.graph.onnx_io.Skeleton` of ``arch``, built on the meta device and
    exported by ``torch.onnx``; ``input_shape`` defaults to ``3 x r x r``."""
    from perfseer.graph.torch_export import skeleton_from_module  # deferred: loads onnx

    spec = arch if isinstance(arch, OFASubnet) else parse_ofa(arch)
    module = build_ofa(spec, device="meta")
    return skeleton_from_module(module, tuple(input_shape or spec.input_shape), source=spec.ref, on_meta=True)


__all__ = ["OFASubnet", "parse_ofa", "build_ofa", "ofa_skeleton", "super_net", "FORM"]
