"""Which predictor answers for a device: a bundled measured-device predictor where one covers the
device (and phase, and precision if asked); else, for AMP inference on a GPU, the spec transfer
from the measured GPUs (:mod:`perfseer.specmodel.transfer_predictor`) when its
leave-one-GPU-out beat the spec model's (the bundled card's ``logo``, written by
``benchmarks/spec_transfer_logo.py``); else the spec model.

Measured predictors win where both exist: on timm inference, leave-one-GPU-out, the spec model and
the transfer are further from the measurements than the measured-device SeerNets' test scores
(``benchmarks/spec_timm_logo.py``, ``benchmarks/spec_transfer_logo.py``, docs/devices.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from perfseer.errors import PerfseerError


def setting_precision(device_string: str) -> str | None:
    """The precision of a measurement-table device string's setting (``rtx3090/amp-nchw-pt240`` ->
    ``fp16``), or ``None`` where it says none."""
    _, _, setting = device_string.partition("/")
    head = setting.split("-", 1)[0]
    return {"amp": "fp16", "amp_bf16": "bf16", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}.get(head)


def measured_predictors(device: str, phase: str = "infer", precision: str | None = None,
                        cards: list[dict] | None = None) -> list[tuple[str, str]]:
    """``(predictor name, table device string)`` of the bundled predictors covering ``device``
    (any alias) in ``phase`` at ``precision`` (``None``: any), latency target (``cards``: the
    bundled cards' :func:`~perfseer.predictor.list_predictors`, when the caller has read them)."""
    from perfseer.devices import UnknownDeviceError, get_device
    from perfseer.predictor import list_predictors

    want = get_device(device)
    if want.parent is not None:
        return []  # a MIG slice is never the measured device
    out = []
    for p in list_predictors() if cards is None else cards:
        for key in p["targets"]:
            metric, _, rest = key.partition("@")
            dev, _, ph = rest.rpartition(":")
            if metric != "latency_ms" or ph != phase:
                continue
            try:
                if get_device(dev).name != want.name:
                    continue
            except (UnknownDeviceError, PerfseerError):
                continue
            if precision is not None and setting_precision(dev) not in (precision, None):
                continue
            out.append((p["name"], dev))
    return out


def routed_extraction(device: str, phase: str = "infer", precision: str | None = None,
                      prefer: str = "auto") -> bool | None:
    """How :func:`predict_on_device` wants the model extracted for ``device``: the routed measured
    predictor's ``weight_work`` (its card's extraction), or ``None`` (the spec model and the transfer
    take the default extraction)."""
    from perfseer.predictor import list_predictors

    if prefer not in ("auto", "measured"):
        return None
    cards = list_predictors()
    found = measured_predictors(device, phase, precision, cards)
    return next(p for p in cards if p["name"] == found[0][0])["extraction"]["weight_work"] if found else None


def predict_on_device(model, device: str, batch: int | Sequence[int] = 1, phase: str = "infer",
                      precision: str | None = None, input_shape=None, dims=None, prefer: str = "auto",
                      seq_len: int | None = None) -> list[dict]:
    """Predict ``model`` on ``device`` with the best available basis.

    Args:
        device: a registry name or alias (``perfseer devices``), a table device string or a MIG slice.
        precision: ``fp32``/``tf32``/``fp16``/``bf16``; ``None``: a measured predictor's own setting,
            else ``fp32``.
        prefer: ``auto`` (measured where available, else the transfer where it applies and won
            its leave-one-GPU-out, else the spec model), ``spec`` (always the spec model),
            ``transfer`` (the spec transfer; an error where it does not apply) or ``measured``
            (an error where none covers the device).

    Returns:
        Rows as :meth:`perfseer.predictor.Predictor.predict` (latency only), each with ``basis``.
    """
    from perfseer.devices import get_device
    from perfseer.predictor import load_predictor
    from perfseer.specmodel.predictor import load_spec_model

    spec = get_device(device)
    if prefer not in ("auto", "spec", "measured", "transfer"):
        raise PerfseerError(f"prefer must be auto, spec, transfer or measured, got {prefer!r}", "pass prefer='auto'")
    found = measured_predictors(device, phase, precision) if prefer in ("auto", "measured") else []
    if found:
        name, dev = found[0]
        rows = load_predictor(name).predict(model, batch=batch, input_shape=input_shape, dims=dims, device=dev,
                                            phase=phase, seq_len=seq_len)
        rows = [r for r in rows if r["metric"] == "latency_ms"]
        for r in rows:
            r["precision"] = setting_precision(dev) or "as measured"
        return rows
    if prefer == "measured":
        raise PerfseerError(f"no bundled measured predictor covers {spec.name} ({phase})",
                            "drop --basis measured to use the spec model, or train one (perfseer train)")
    from perfseer.specmodel import transfer_predictor as xp

    if prefer == "transfer" and not xp.applicable(spec, phase, precision):
        raise PerfseerError(f"the spec transfer does not cover {spec.name} {precision or ''} {phase}: it answers AMP "
                            "(fp16) inference on a full GPU with FP16 peak, bandwidth, SMs, clock and L2 in its spec",
                            "use --basis spec (the spec model) or --basis auto")
    if prefer == "transfer" or (prefer == "auto" and xp.applicable(spec, phase, precision) and xp.preferred()):
        return xp.load_transfer().predict(model, batch=batch, device=spec.name, phase=phase, precision=precision,
                                          input_shape=input_shape, dims=dims, seq_len=seq_len)
    return load_spec_model().predict(model, batch=batch, device=spec.name,
                                     phase=phase, precision=precision or "fp32", input_shape=input_shape, dims=dims,
                                     seq_len=seq_len)
