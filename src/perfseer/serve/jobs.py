"""What sandboxed children run for the service (module-level functions: the sandbox imports them
by name).  Each returns plain data or objects of perfseer's own."""

from __future__ import annotations

from dataclasses import asdict


def extract_job(model: str, input_shape, dims, seq_len=None, weight_work=None):
    """The PerfGraph of ``model`` at batch 1 (``weight_work``: as :func:`perfseer.extract`)."""
    from perfseer.features.extract import extract  # deferred: loads onnx

    return extract(model, batch=1, input_shape=input_shape, dims=dims or None, seq_len=seq_len, weight_work=weight_work)


def bind_job(pg, batches) -> dict:
    """``{batch: pg.with_batch(batch)}`` for each batch size: re-binding a large graph costs seconds
    and gigabytes, so the service does it here, under the sandbox's limits."""
    return {int(b): pg.with_batch(int(b)) for b in batches}


def memory_job(model: str, batches, phase: str, optimizer, precision: str, device, input_shape, mig: bool,
               max_batch: bool) -> dict:
    """Simulated peak memory of ``model`` at each batch size (``perfseer.memory``), as JSON-ready
    dicts, and the largest batch that fits ``device`` when asked."""

    from perfseer.memory.api import max_batch_for, memory, resolve_model  # deferred: loads torch

    src = resolve_model(model, input_shape)
    out = {"estimates": [], "max_batch": None}
    for i, b in enumerate(batches):
        est = memory(model, batch=int(b), phase=phase, optimizer=optimizer, precision=precision, device=device,
                     input_shape=input_shape, mig=mig and i == len(batches) - 1, _src=src)
        out["estimates"].append(est.to_dict())
    if max_batch:
        out["max_batch"] = asdict(max_batch_for(model, device=device, phase=phase, optimizer=optimizer,
                                                precision=precision, input_shape=input_shape, _src=src))
    return out
