"""Pieces the step tests share: the step as a real CPU run executes it, and one-off modules."""

from torch import nn

from perfseer.memory.step import StepConfig


def cpu_step(phase: str = "train", optimizer: str = "adamw") -> StepConfig:
    """The step on CPU kernels without foreach: what a real CPU step runs, so the one a simulated
    (or meta-backend) trace is compared with byte for byte."""
    return StepConfig(phase=phase, optimizer=optimizer, target="cpu", foreach=False)


def module(forward, **parts) -> nn.Module:
    """A module holding ``parts`` (layers, or plain tensors that are neither parameter nor buffer)
    whose ``forward(self, x)`` is ``forward``: the one-layer models of one behaviour these tests need."""
    m = type(forward.__name__, (nn.Module,), {"forward": forward})()
    for name, part in parts.items():
        setattr(m, name, part)
    return m
