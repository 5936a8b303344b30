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
#: The one precision vocabulary (commands, the API, rows): the whole model in one type (fp64 ...
#: bf16), PyTorch autocast (amp-fp16, amp-bf16: matmuls and convolutions in 16 bits, the rest
#: fp32), and the low-bit formats (fp8, int8, int4: weights, or weights and activations).
PRECISIONS = ("fp64", "fp32", "tf32", "fp16", "bf16", "amp-fp16", "amp-bf16", "fp8", "int8", "int4")
#: Old and other spellings, accepted and read as the name they map to.
PRECISION_ALIASES = {"amp": "amp-fp16", "amp_fp16": "amp-fp16", "amp16": "amp-fp16", "amp_bf16": "amp-bf16",
                     "float64": "fp64", "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
                     "bfloat16": "bf16", "float8": "fp8"}
#: A request for ``fp16``/``bf16`` is answered by a card measured with autocast at that type (the
#: old spelling of a measured AMP setting); the row still names the setting it answers at.
_ANSWERED_BY = {"fp16": "amp-fp16", "bf16": "amp-bf16"}


def canonical_precision(name: str | None) -> str | None:
    """``name`` in the vocabulary (:data:`PRECISIONS`; aliases mapped; ``None`` stays ``None``).

    Raises:
        PerfseerError: a name neither in the vocabulary nor an alias.
    """
    if name is None:
        return None
    key = str(name).strip().lower()
    key = PRECISION_ALIASES.get(key, key)
    if key not in PRECISIONS:
        raise PerfseerError(f"unknown precision {name!r}", f"choose one of {', '.join(PRECISIONS)} "
                            f"(aliases: {', '.join(sorted(PRECISION_ALIASES))})")
    return key


def answers_at(asked: str | None, own: str | None) -> bool:
    """Whether a basis measured at ``own`` (``None``: not recorded) answers a request for ``asked``
    (``None``: any)."""
    return asked is None or own is None or own == asked or _ANSWERED_BY.get(asked) == own


@dataclass(frozen=True)
class Options:
    """What a request asks besides the model and the batch sizes.

    Attributes:
        device: a registry name or alias (``perfseer devices``) or a measurement-table device
            string (``rtx3090/amp-nchw-pt240``); ``None``: every device the basis covers.
        phase: ``infer`` or ``train``; ``None``: every phase the basis covers (a device alone: ``infer``).
        precision: a name of :data:`PRECISIONS` or an alias (stored as the name); ``None``: the
            basis's own (a measured card's setting, else fp32).
        gpus: GPUs the step runs on (1: one process on one device, the only case answered today).
        parallel: the several-GPU strategy (``None`` with one GPU).
        energy: also answer power and energy (GPU rows, through the power model:
            :mod:`perfseer.runtime.power`; the routing adds them to every basis's rows).
        force: let a measured card answer for a model outside its model space
            (:func:`perfseer.trust.domain.space_reasons`); without it, it refuses.
    """

    device: str | None = None
    phase: str | None = None
    precision: str | None = None
    gpus: int = 1
    parallel: str | None = None
    energy: bool = False
    force: bool = False  # answer with a measured card even for a model outside its model space

    def __post_init__(self):
        if self.phase not in (None, *PHASES):
            raise PerfseerError(f"phase {self.phase!r} is neither infer nor train", "pass phase='infer' or 'train'")
        object.__setattr__(self, "precision", canonical_precision(self.precision))  # raises for an unknown one
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or self.gpus < 1:
            raise PerfseerError(f"gpus must be an integer >= 1, got {self.gpus!r}", "pass gpus=1")

    def with_(self, **changes) -> "Options":
        """A copy with ``changes``."""
        return replace(self, **changes)

    def single_device(self, basis: str) -> None:
        """Refuse what a basis does not answer itself (several GPUs; energy, which the routing adds
        to every GPU basis's rows through the power model), naming ``basis``."""
        if self.gpus != 1 or self.parallel is not None:
            raise PerfseerError(f"{basis} answers one process on one GPU; {self.gpus} GPUs"
                                + (f" ({self.parallel})" if self.parallel else "") + " are not predicted yet",
                                "ask for gpus=1")
        if self.energy:
            raise PerfseerError(f"{basis} answers latency; energy is added to its rows by the power model",
                                "ask perfseer.predict(..., energy=True), or call "
                                "perfseer.runtime.power.energy_rows(rows, pg) on its rows")


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
