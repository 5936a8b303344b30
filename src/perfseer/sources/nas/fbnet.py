"""The FBNet network on CIFAR-100, built from its 22 block choices.

The network (input 3x32x32)::

    stem: conv 3x3 (3 -> 16, stride 1, padding 1) + BN + ReLU
    22 blocks in 7 stages of [1, 4, 4, 4, 4, 4, 1] blocks, with [16, 24, 32, 64, 112, 184, 352]
        output channels and first-block strides [1, 1, 2, 2, 1, 2, 1] (later blocks: stride 1)
    head: conv 1x1 (352 -> 1504) + BN + ReLU, global average pool, linear 1504 -> 100

Block ``kK_eE`` or ``kK_eE_gG`` (kernel K, expansion E, G groups; no suffix: G = 1)::

    conv 1x1 C_in -> C_in*E in G groups + BN + ReLU
    channel shuffle (when G > 1)
    depthwise conv KxK (padding K // 2, the block's stride) + BN + ReLU
    conv 1x1 C_in*E -> C_out in G groups + BN
    + the block input, when C_in == C_out and the stride is 1

Block ``skip``: identity, or conv 1x1 (with the stride) + BN + ReLU where the shape changes.

Convolutions have no bias (each is followed by BatchNorm); the final linear layer has one.

Example:
    >>> net = build_fbnet("k3_e1 k3_e6 k5_e1_g2 skip " + " ".join(["k3_e3"] * 18))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from torch import Tensor, nn

from perfseer.errors import ModelLoadError

STAGE_BLOCKS = (1, 4, 4, 4, 4, 4, 1)
STAGE_CHANNELS = (16, 24, 32, 64, 112, 184, 352)
STAGE_STRIDES = (1, 1, 2, 2, 1, 2, 1)
NUM_BLOCKS = sum(STAGE_BLOCKS)  # 22
STEM_CHANNELS = 16
HEAD_CHANNELS = 1504
NUM_CLASSES = 100
INPUT_SHAPE = (3, 32, 32)
# The choices of the FBNet search space; other kK_eE[_gG] blocks are accepted too.
SEARCH_SPACE = ("k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6", "skip")

_BLOCK = re.compile(r"k([1-9][0-9]*)_e([1-9][0-9]*)(?:_g([1-9][0-9]*))?")
_FIX = (f"give {NUM_BLOCKS} blocks separated by single spaces, each 'skip' or kK_eE[_gG] "
        f"(odd kernel K, expansion E, groups G >= 2), e.g. {', '.join(SEARCH_SPACE)}")


@dataclass(frozen=True)
class BlockSpec:
    """One block of the network, at its position: ``kernel == 0`` is a ``skip`` block."""

    c_in: int
    c_out: int
    stride: int
    kernel: int = 0
    expansion: int = 1
    groups: int = 1

    @property
    def is_skip(self) -> bool:
        return self.kernel == 0

    @property
    def residual(self) -> bool:
        """Whether a non-skip block adds its input: same channels and stride 1."""
        return not self.is_skip and self.c_in == self.c_out and self.stride == 1


def block_positions() -> list[tuple[int, int, int]]:
    """``(c_in, c_out, stride)`` of each of the 22 block positions."""
    out, c_in = [], STEM_CHANNELS
    for depth, c_out, stride in zip(STAGE_BLOCKS, STAGE_CHANNELS, STAGE_STRIDES):
        for i in range(depth):
            out.append((c_in, c_out, stride if i == 0 else 1))
            c_in = c_out
    return out


def parse_fbnet(blocks: str) -> tuple[BlockSpec, ...]:
    """Read the 22 space-separated block choices of an FBNet architecture.

    Raises:
        ModelLoadError: naming the bad block (and its position) and the expected form.
    """
    if not isinstance(blocks, str):
        raise ModelLoadError(f"FBNet blocks must be a string, got {type(blocks).__name__}", _FIX)
    names = blocks.split(" ")
    if "" in names:
        raise ModelLoadError(f"FBNet architecture {blocks!r} has an empty block at position {names.index('') + 1} "
                             "(two spaces in a row, or a space at either end)", _FIX)
    if len(names) != NUM_BLOCKS:
        raise ModelLoadError(f"FBNet architecture {blocks!r} has {len(names)} space-separated parts, "
                             f"expected {NUM_BLOCKS} blocks", _FIX)
    specs = []
    for index, (name, (c_in, c_out, stride)) in enumerate(zip(names, block_positions())):
        where = f"block {index + 1} of {NUM_BLOCKS}"
        if name == "skip":
            specs.append(BlockSpec(c_in, c_out, stride))
            continue
        m = _BLOCK.fullmatch(name)
        if m is None:
            raise ModelLoadError(f"unknown FBNet block {name!r} at {where} in {blocks!r}", _FIX)
        kernel, expansion, groups = int(m[1]), int(m[2]), int(m[3] or 1)
        if kernel % 2 == 0:
            raise ModelLoadError(f"FBNet block {name!r} at {where} has an even kernel {kernel}", _FIX)
        if m[3] is not None and groups < 2:
            raise ModelLoadError(f"FBNet block {name!r} at {where} has groups 1", "write it without the _g1 suffix")
        if c_in % groups or c_out % groups:
            raise ModelLoadError(
                f"FBNet block {name!r} at {where} has {groups} groups, which do not divide its "
                f"{c_in} input and {c_out} output channels", "choose a group count that divides both")
        specs.append(BlockSpec(c_in, c_out, stride, kernel, expansion, groups))
    return tuple(specs)


class ConvBN(nn.Sequential):
    """Conv (no bias) + BN, and ReLU if ``relu``."""

    def __init__(self, c_in: int, c_out: int, kernel: int = 1, stride: int = 1, groups: int = 1,
                 relu: bool = True):
        layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(c_out)]
        if relu:
            layers.append(nn.ReLU())
        super().__init__(*layers)


class ChannelShuffle(nn.Module):
    """ShuffleNet's channel shuffle: ``[B, G*K, H, W]`` viewed as ``[B, G, K, H, W]``, the two
    channel axes swapped, flattened back, so that the next grouped conv mixes every group."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, x: Tensor) -> Tensor:
        b, c, h, w = x.shape
        return x.reshape(b, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class FBNetBlock(nn.Module):
    """An inverted-residual block ``kK_eE[_gG]``: ``[B, C_in, H, W]`` -> ``[B, C_out, H/s, W/s]``."""

    def __init__(self, spec: BlockSpec):
        super().__init__()
        mid = spec.c_in * spec.expansion
        self.residual = spec.residual
        self.expand = ConvBN(spec.c_in, mid, 1, groups=spec.groups)
        self.shuffle = ChannelShuffle(spec.groups) if spec.groups > 1 else nn.Identity()
        self.depthwise = ConvBN(mid, mid, spec.kernel, spec.stride, groups=mid)
        self.project = ConvBN(mid, spec.c_out, 1, groups=spec.groups, relu=False)

    def forward(self, x: Tensor) -> Tensor:
        y = self.project(self.depthwise(self.shuffle(self.expand(x))))
        return x + y if self.residual else y


def make_block(spec: BlockSpec) -> nn.Module:
    if not spec.is_skip:
        return FBNetBlock(spec)
    if spec.c_in == spec.c_out and spec.stride == 1:
        return nn.Identity()
    return ConvBN(spec.c_in, spec.c_out, 1, spec.stride)


class FBNetNetwork(nn.Module):
    """The FBNet CIFAR-100 network of one architecture.

    Shapes: ``x`` ``[B, 3, 32, 32]`` -> logits ``[B, 100]``.
    """

    def __init__(self, specs: tuple[BlockSpec, ...], num_classes: int = NUM_CLASSES):
        super().__init__()
        self.specs = specs
        self.stem = ConvBN(3, STEM_CHANNELS, 3)
        self.blocks = nn.Sequential(*(make_block(s) for s in specs))
        self.head = ConvBN(STAGE_CHANNELS[-1], HEAD_CHANNELS, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(HEAD_CHANNELS, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(self.pool(x).flatten(1))


def build_fbnet(blocks: str) -> FBNetNetwork:
    """The FBNet CIFAR-100 network of ``blocks`` (22 space-separated choices; random weights, on
    the current device: build it under ``with torch.device("meta")`` to allocate nothing).

    Raises:
        ModelLoadError: if ``blocks`` is malformed.
    """
    return FBNetNetwork(parse_fbnet(blocks))
