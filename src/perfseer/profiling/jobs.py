"""What the collection kit passes around: a planned measurement (:class:`Job`) and its outcome
(:class:`Measurement`), both plain JSON-able records (they cross process and Ray boundaries and
are stored in SQLite; nothing is pickled to disk).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, fields

from perfseer import shapes
from perfseer.errors import PerfseerError

PHASES = ("infer", "train")
PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")
OPTIMIZERS = ("sgd", "adam", "adamw")
# ok: measured.  oom: out of memory (torch.OutOfMemoryError, MemoryError, an allocator failure).
# crash: the measuring process died (a signal, a hard exit).  timeout: it did not finish in time
# and was killed.  unsupported: the backend cannot run this phase/precision.  error: any other
# exception (a model that cannot be built, a shape it cannot take).  contended: a CPU measurement
# whose process got much less CPU than its threads could use (another job was running on its
# cores), so its times are inflated: not a result, measured again by --retry-failed.
STATUSES = ("ok", "oom", "crash", "timeout", "unsupported", "error", "contended")
FAILED = ("oom", "crash", "timeout", "error", "contended")  # what --retry-failed measures again

_SHAPE = re.compile(r"[1-9]\d*(?:x[1-9]\d*)*")


class CollectError(PerfseerError):
    """A bad collection request (arguments, store, backend) -- message names the problem and fix."""


def parse_shape(text: str | tuple | list) -> tuple[int, ...]:
    """``"3x64x64"`` -> ``(3, 64, 64)`` (:func:`perfseer.shapes.parse_shape`, a :class:`CollectError` if bad)."""
    return shapes.parse_shape(text, error=CollectError)


def shape_text(shape) -> str:
    return "x".join(str(int(d)) for d in parse_shape(shape))


def device_name(hardware: str, setting: str, phase: str, optimizer: str) -> str:
    """The ``device`` column: ``<hardware>/<setting>``, plus ``-<optimizer>`` for a train row whose
    optimizer is not SGD (the optimizer changes a training step's time and memory, so rows with
    different optimizers must not share a key; inference rows never depend on it)."""
    suffix = f"-{optimizer}" if phase == "train" and optimizer != "sgd" else ""
    return f"{hardware}/{setting}{suffix}"


@dataclass(frozen=True)
class Job:
    """One planned measurement; ``key()`` is the store's unique key."""

    model: str
    input_shape: str       # "3x64x64"
    batch_size: int
    phase: str
    precision: str
    device: str            # "epyc/torch-t1"
    optimizer: str = "sgd"  # train only

    def key(self) -> tuple:
        return (self.model, self.input_shape, self.batch_size, self.phase, self.precision, self.device)

    @property
    def shape(self) -> tuple[int, ...]:
        return parse_shape(self.input_shape)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Job:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def label(self) -> str:
        model = self.model if len(self.model) <= 40 else self.model[:37] + "..."
        return f"{model} {self.input_shape} b{self.batch_size} {self.phase} {self.precision}"


def _finite(v):
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


@dataclass
class Measurement:
    """The outcome of one measurement.

    ``latency_ms`` is the median step time; ``timing`` the full :class:`~perfseer.profiling.protocol.Timing`
    summary (quartiles, IQR, MAD, CV, confidence interval, count, convergence); ``extra`` the
    backend's details (memory breakdown, utilisation samples, ...).  Metrics a backend does not
    measure are ``None``.
    """

    status: str
    latency_ms: float | None = None
    memory_mb: float | None = None
    util_pct: float | None = None
    energy_j: float | None = None
    timing: dict | None = None
    extra: dict = field(default_factory=dict)
    error: str | None = None
    seconds: float | None = None  # wall time of the whole measurement: build, warm-up, timing

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown measurement status {self.status!r}")

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("latency_ms", "memory_mb", "util_pct", "energy_j", "seconds"):
            d[k] = _finite(d[k])
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)

    @classmethod
    def from_dict(cls, d: dict) -> Measurement:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    @classmethod
    def failed(cls, status: str, error: str, **kw) -> Measurement:
        return cls(status=status, error=error, **kw)
