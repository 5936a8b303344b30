"""The one protocol every basis of an answer implements, and the options a request carries.

A *basis* is what a row's value comes from: a measured-device predictor card
(:class:`~perfseer.runtime.predictor.Predictor`), the spec transfer
(:class:`~perfseer.runtime.transfer.TransferPredictor`) or the spec model
(:class:`~perfseer.runtime.spec.SpecModel`).  Each answers

    ``answer(pg, batches, options, graphs=None, family=None) -> list[dict]``

for an extracted PerfGraph ``pg`` at each of ``batches``: one row per batch size and target, with
``model``, ``batch_size``, ``metric``, ``unit``, ``device``, ``phase``, ``value``, ``interval``,
``in_domain``, ``domain_reasons``, ``flags`` and ``basis``.  :class:`Options` holds everything
else a request asks for, so that a new question (several GPUs, energy) adds a field here and is
refused, with the reason, by the bases that cannot answer it yet, instead of changing every
signature.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from perfseer.errors import PerfseerError

PHASES = ("infer", "train")
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class Options:
    """What a request asks besides the model and the batch sizes.

    Attributes:
        device: a registry name or alias (``perfseer devices``) or a measurement-table device
            string (``rtx3090/amp-nchw-pt240``); ``None``: every device the basis covers.
        phase: ``infer`` or ``train``; ``None``: every phase the basis covers (a device alone: ``infer``).
        precision: ``fp32``, ``tf32``, ``fp16`` or ``bf16``; ``None``: the basis's own (a measured
            card's setting, else fp32).
        gpus: GPUs the step runs on (1: one process on one device, the only case answered today).
        parallel: the several-GPU strategy (``None`` with one GPU).
        energy: also answer power and energy (not answered on GPUs yet).
    """

    device: str | None = None
    phase: str | None = None
    precision: str | None = None
    gpus: int = 1
    parallel: str | None = None
    energy: bool = False

    def __post_init__(self):
        if self.phase not in (None, *PHASES):
            raise PerfseerError(f"phase {self.phase!r} is neither infer nor train", "pass phase='infer' or 'train'")
        if self.precision not in (None, *PRECISIONS):
            raise PerfseerError(f"unknown precision {self.precision!r}", f"choose one of {', '.join(PRECISIONS)}")
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or self.gpus < 1:
            raise PerfseerError(f"gpus must be an integer >= 1, got {self.gpus!r}", "pass gpus=1")

    def with_(self, **changes) -> "Options":
        """A copy with ``changes``."""
        return replace(self, **changes)

    def single_device(self, basis: str) -> None:
        """Refuse what no basis answers yet (several GPUs, GPU energy), naming ``basis``."""
        if self.gpus != 1 or self.parallel is not None:
            raise PerfseerError(f"{basis} answers one process on one GPU; {self.gpus} GPUs"
                                + (f" ({self.parallel})" if self.parallel else "") + " are not predicted yet",
                                "ask for gpus=1")
        if self.energy:
            raise PerfseerError(f"{basis} does not predict energy", "drop energy, or use a predictor card "
                                "trained on energy_j (perfseer predictors)")


@runtime_checkable
class Answerer(Protocol):
    """What the measured predictor, the spec transfer and the spec model all implement."""

    name: str

    def answer(self, pg, batches: Sequence[int], options: Options, graphs: Sequence | None = None,
               family: str | None = None) -> list[dict]:
        """Rows for ``pg`` at each of ``batches`` (``graphs``: ``pg``'s PyG graphs at those batch
        sizes when the caller built them; ``family``: the model's architecture family, for the
        domain check)."""
        ...
