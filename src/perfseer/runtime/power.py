"""Power, energy and utilisation on the rows of an answer (``energy=True``, ``--energy``).

Every GPU basis answers energy the same way: its latency row's value (the spec model's, the
spec transfer's or a measured card's) is the step's time; the step's activity comes from the
spec model's kernels of the same graph on the row's GPU (:func:`perfseer.energy.activity_from_kernels`);
the power model (:func:`perfseer.energy.step_energy`) turns both into ``power_w``, ``energy_j``
(per step), ``energy_j_per_sample`` and ``util_pct``, added to the row with ``energy_notes``.
Under a lowered power limit the row's value (and interval) is the slowed step's.

``perfseer.predict(..., energy=True)`` calls :func:`energy_rows` on every unit's rows; another
caller (the service, a comparison) can call it on rows it already has.
"""

from __future__ import annotations

from perfseer.devices import get_device
from perfseer.energy import activity_from_kernels, step_energy
from perfseer.energy.power import EnergyError, power_spec
from perfseer.errors import PerfseerError
from perfseer.runtime.answer import PRECISIONS

ENERGY_FIELDS = ("power_w", "energy_j", "energy_j_per_sample", "util_pct")
#: The spec model's kernel precision for a row's precision (autocast: its 16-bit kernels).
KERNEL_PRECISION = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "amp-fp16": "fp16",
                    "amp-bf16": "bf16", None: "fp32"}


def _kernels_activity(pg, spec, batch: int, phase: str, precision: str, cache: dict):
    from perfseer.runtime.spec import load_spec_model  # deferred: loads the kernel network

    key = (spec.name, batch, phase, precision)
    if key not in cache:
        g = pg.at_batch(int(batch))
        r = load_spec_model().graph_latency(g.x, g.op_types, spec, phase=phase, precision=precision,
                                            params=float(g.params), edge_index=g.edge_index,
                                            dropout=g.dropout_elements, calibrate=False)
        cache[key] = activity_from_kernels(r["kernel_table"], r["kernel_us"], spec, precision)
    return cache[key]


def check_energy_request(devices, power_limit_w: float | None = None) -> None:
    """Refuse, before any model is exported, an energy request the power model cannot answer:
    a device that is not a whole GPU of the registry, or a power limit out of its range.

    Raises:
        PerfseerError: naming the device or the limit, and the fix.
    """
    for d in devices:
        try:
            spec = get_device(d)
        except PerfseerError as e:
            raise EnergyError(f"energy needs the device's spec sheet; {d!r}: {e.problem}",
                              e.fix or "pass a GPU of perfseer devices") from e
        power_spec(spec, power_limit_w)


def energy_rows(rows: list[dict], pg, power_limit_w: float | None = None) -> list[dict]:
    """``rows`` with the power model's fields on each GPU latency row (other metrics as they are).

    Args:
        rows: an answer's rows (:func:`perfseer.predict`'s format) for the model ``pg``.
        pg: the model's PerfGraph (at any batch size).
        power_limit_w: a lower power limit, W (the step slows: :mod:`perfseer.energy.power`).

    Raises:
        PerfseerError: a row on a CPU or a device with no spec sheet (no GPU power model), a power
            limit out of range.
    """
    cache: dict = {}
    out = []
    for r in rows:
        if r.get("metric") != "latency_ms":
            out.append(r)
            continue
        r = dict(r)
        try:
            spec = get_device(str(r["device"]))
        except PerfseerError as e:
            raise EnergyError(f"energy needs the device's spec sheet; {r['device']!r}: {e.problem}",
                              "add its spec file (perfseer devices --add FILE), or drop --energy") from e
        ps = power_spec(spec, power_limit_w)  # refuses a CPU, a MIG slice, a bad limit
        asked = r.get("precision")
        precision = KERNEL_PRECISION.get(asked)
        assumed = []
        if precision is None and asked not in PRECISIONS:  # a card that does not record its precision
            precision, assumed = "fp32", [f"precision {asked!r} not recorded by the card: PyTorch's default, "
                                          "fp32, assumed for the step's activity"]
        if r.get("value") is None or precision is None:
            r.update({k: None for k in ENERGY_FIELDS})
            r["energy_notes"] = [] if r.get("value") is None else [
                f"no energy at {r.get('precision')}: the power model's activity comes from the spec model's "
                "fp32/tf32/fp16/bf16 kernels"]
            out.append(r)
            continue
        act = _kernels_activity(pg, spec, int(r["batch_size"]), r.get("phase") or "infer", precision, cache)
        e = step_energy(spec, float(r["value"]), act, batch=int(r["batch_size"]), power_limit_w=power_limit_w)
        notes = assumed + list(e.notes)
        if e.latency_ms != r["value"]:
            k = e.latency_ms / r["value"]
            r["value"] = e.latency_ms
            if r.get("interval"):
                r["interval"] = [v * k for v in r["interval"]]
            if r.get("throughput_per_s"):
                r["throughput_per_s"] /= k
        r.update(power_w=e.power_w, energy_j=e.energy_j, energy_j_per_sample=e.energy_j_per_sample,
                 util_pct=e.util_pct, power_limit_w=ps.limit_w, energy_notes=notes)
        out.append(r)
    return out
