"""Exceptions raised on bad input.

Every error perfseer raises for a user's mistake is a :class:`PerfseerError`: its message is one
line that names the problem and how to fix it, so the CLI can print it as is and exit non-zero.
"""

from __future__ import annotations


class PerfseerError(Exception):
    """Base class: a problem with the user's input, with a hint on how to fix it."""

    def __init__(self, problem: str, fix: str | None = None):
        self.problem = problem
        self.fix = fix
        super().__init__(f"{problem}; fix: {fix}" if fix else problem)


class ModelLoadError(PerfseerError):
    """The model could not be read: missing file, not ONNX, truncated, unknown reference."""


class UnsupportedModelError(PerfseerError):
    """The model is valid but uses something perfseer cannot represent (control flow, custom ops)."""


class ExportTimeoutError(UnsupportedModelError):
    """Exporting a PyTorch model to ONNX took longer than the time limit (``PERFSEER_EXPORT_TIMEOUT``)."""


class ShapeError(PerfseerError):
    """Tensor shapes could not be determined or are invalid (unbound symbolic or zero-size dims)."""


class AbsurdAnswerError(PerfseerError):
    """A prediction or estimate came out non-finite, zero, or beyond any physical bound: refused
    rather than shown as a number."""


class MissingDependencyError(PerfseerError, ImportError):
    """An optional dependency is needed for this feature."""

    def __init__(self, package: str, extra: str, what: str):
        super().__init__(
            f"{what} needs the optional package '{package}', which is not installed",
            f"pip install 'perfseer[{extra}]'",
        )


class TableError(PerfseerError):
    """A measurement table, or a benchmark file imported into one, is missing, unreadable or holds
    a bad value (the message names the file, the row and the column)."""


class SchemaError(PerfseerError):
    """A saved PerfGraph file is corrupt or was written by an incompatible feature schema."""


class MemoryConfigError(PerfseerError):
    """A memory simulation was asked for with a bad phase, optimizer, precision, batch or device
    (``perfseer memory``)."""


class SimulationError(PerfseerError):
    """A model's step could not be run on fake tensors (data-dependent shapes, an operator without
    a fake kernel, an input the model does not accept); the message carries PyTorch's reason."""
