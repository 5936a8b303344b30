"""The PyTorch modules of the PerfSeer model space (:mod:`perfseer.sources.space` documents it).

Kept apart from the config code so that sampling and validating configs do not import torch.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_ACT = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "hardswish": nn.Hardswish}


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int, act: str | None, groups: int = 1) -> nn.Sequential:
    """conv KxK (padding K // 2, no bias) + BN [+ act]."""
    layers = [nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out)]
    if act:
        layers.append(_ACT[act]())
    return nn.Sequential(*layers)


class InceptionBlock(nn.Module):
    def __init__(self, c_in: int, s: dict, stride: int, act: str):
        super().__init__()
        self.b1 = conv_bn(c_in, s["b1"], 1, stride, act)
        self.b3 = nn.Sequential(conv_bn(c_in, s["b3r"], 1, 1, act), conv_bn(s["b3r"], s["b3"], 3, stride, act))
        if s["b5_mode"] == "5x5":
            self.b5 = nn.Sequential(conv_bn(c_in, s["b5r"], 1, 1, act), conv_bn(s["b5r"], s["b5"], 5, stride, act))
        else:
            self.b5 = nn.Sequential(conv_bn(c_in, s["b5r"], 1, 1, act), conv_bn(s["b5r"], s["b5"], 3, 1, act),
                                    conv_bn(s["b5"], s["b5"], 3, stride, act))
        self.pool = nn.Sequential(nn.MaxPool2d(3, stride, 1), conv_bn(c_in, s["bp"], 1, 1, act))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.pool(x)], 1)


class ResidualBlock(nn.Module):
    def __init__(self, c_in: int, s: dict, stride: int, act: str):
        super().__init__()
        width, mid = s["width"], s["mid"]
        if s["block"] == "bottleneck":
            self.body = nn.Sequential(conv_bn(c_in, mid, 1, 1, act), conv_bn(mid, mid, 3, stride, act, s["groups"]),
                                      conv_bn(mid, width, 1, 1, None))
        else:
            self.body = nn.Sequential(conv_bn(c_in, mid, 3, stride, act), conv_bn(mid, width, 3, 1, None))
        self.shortcut = (nn.Identity() if stride == 1 and c_in == width else conv_bn(c_in, width, 1, stride, None))
        self.act = _ACT[act]()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.body(x) + self.shortcut(x))


class DenseLayer(nn.Module):
    def __init__(self, c_in: int, growth: int, bn_size: int, act: str):
        super().__init__()
        mid = bn_size * growth
        self.body = nn.Sequential(nn.BatchNorm2d(c_in), _ACT[act](), nn.Conv2d(c_in, mid, 1, bias=False),
                                  nn.BatchNorm2d(mid), _ACT[act](), nn.Conv2d(mid, growth, 3, 1, 1, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x, self.body(x)], 1)


def transition(c_in: int, c_out: int, act: str) -> nn.Sequential:
    # ceil_mode: an odd (or 1-pixel) map still halves instead of losing its last row
    return nn.Sequential(nn.BatchNorm2d(c_in), _ACT[act](), nn.Conv2d(c_in, c_out, 1, bias=False),
                         nn.AvgPool2d(2, 2, ceil_mode=True))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        hidden = max(8, channels // 4)
        self.body = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, hidden, 1), nn.ReLU(),
                                  nn.Conv2d(hidden, channels, 1), nn.Sigmoid())

    def forward(self, x: Tensor) -> Tensor:
        return x * self.body(x)


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, s: dict, stride: int, act: str):
        super().__init__()
        mid = c_in * s["expand"]
        layers = [conv_bn(c_in, mid, 1, 1, act)] if s["expand"] > 1 else []
        layers.append(conv_bn(mid, mid, s["kernel"], stride, act, groups=mid))
        if s["se"]:
            layers.append(SqueezeExcite(mid))
        layers.append(conv_bn(mid, s["width"], 1, 1, None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == s["width"]

    def forward(self, x: Tensor) -> Tensor:
        y = self.body(x)
        return x + y if self.residual else y


def build_stage(c_in: int, s: dict, act: str) -> nn.Sequential:
    """The blocks of one stage; the down block (first or last) has stride 2."""
    depth, width, style = s["depth"], s["width"], s["style"]
    strides = [1] * depth
    strides[0 if s["down"] == "first" else -1] = 2
    blocks: list[nn.Module] = []
    if style == "densenet":
        growth, bn_size = s["growth"], s["bn_size"]
        if s["down"] == "first":
            c = width - depth * growth
            blocks.append(transition(c_in, c, act))
        else:
            c = c_in
        for _ in range(depth):
            blocks.append(DenseLayer(c, growth, bn_size, act))
            c += growth
        if s["down"] == "last":
            blocks.append(transition(c, width, act))
        return nn.Sequential(*blocks)
    for stride in strides:
        if style == "vgg":
            blocks.append(conv_bn(c_in, width, s["kernel"], stride, act))
        elif style == "inception":
            blocks.append(InceptionBlock(c_in, s, stride, act))
        elif style == "resnet":
            blocks.append(ResidualBlock(c_in, s, stride, act))
        else:
            blocks.append(InvertedResidual(c_in, s, stride, act))
        c_in = width
    return nn.Sequential(*blocks)


class SpaceNet(nn.Module):
    """A network of the PerfSeer model space, built from a validated config.

    Shapes: ``(B, 3, H, W) -> (B, classes)``.
    """

    def __init__(self, config: dict):
        super().__init__()
        act = config["act"]
        self.stem = conv_bn(3, config["stem"], 3, 2, act)
        stages, c_in = [], config["stem"]
        for s in config["stages"]:
            stages.append(build_stage(c_in, s, act))
            c_in = s["width"]
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, config["classes"])

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))
