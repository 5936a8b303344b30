"""``perfseer.predict(..., gpus=N, parallel=...)``: a step on several GPUs, answered by the
single-GPU basis on each GPU's share (:func:`perfseer.runtime.route.predict` with one GPU) composed
with the communication and bubble of :mod:`perfseer.parallel.step`."""

from __future__ import annotations

from collections.abc import Sequence

from perfseer.devices import get_device
from perfseer.errors import PerfseerError
from perfseer.parallel.collectives import fabric
from perfseer.parallel.facts import facts_of
from perfseer.parallel.plan import make_plan
from perfseer.parallel.step import step_time

BASIS_NOTE = ("per-GPU compute from the single-GPU basis; communication from perfseer.parallel "
              "(NCCL collectives fitted on Vidur's A100/A40 measurements)")


def input_bytes_per_sample(pg) -> float:
    """Bytes of one sample of the model's inputs (DataParallel scatters them)."""
    from perfseer.graph.ir import DTYPE_BYTES

    total = 0.0
    for name in pg.graph.inputs:
        t = pg.graph.tensor(name)
        if t is not None:
            total += t.numel * DTYPE_BYTES.get(t.dtype, 4)
    return total / max(1, pg.batch_size)


def predict_several(predict, extract, model, *, device, predictor, batches: Sequence[int], phase, precision, basis, input_shape,
                    dims, seq_len, force, gpus, parallel, tp=None, pp=None, dp=None, microbatches=None, nodes=1,
                    node=None, interconnect=None, schedule="1f1b", sequence_parallel=False) -> list[dict]:
    """Rows of a several-GPU request (``predict``: the single-GPU :func:`perfseer.runtime.route.predict`;
    ``extract``: its cached extraction, :func:`perfseer.runtime.route.cached_extract`).

    Each row is the single-GPU row's fields with ``batch_size`` the global batch, ``value`` the
    step (ms), ``compute_ms``, ``comm_ms`` (exposed), ``bubble_ms``, ``gpus``, ``parallel`` (the
    layout in words), ``per_gpu_batch`` and ``comm`` (each kind's total and exposed time).
    """
    if predictor:
        raise PerfseerError("several GPUs are answered from a device, not a predictor card",
                            "pass --device GPU (its measured card answers the per-GPU compute if there is one)")
    devices = [device] if isinstance(device, str) else list(device or [])
    if len(devices) != 1:
        raise PerfseerError(f"several GPUs are predicted for one GPU model at a time, got {len(devices)} devices",
                            "pass one --device")
    spec = get_device(devices[0])
    if spec.kind != "gpu":
        raise PerfseerError(f"{spec.name} is a {spec.kind}, not a GPU", "pass a GPU of perfseer devices")
    plan = make_plan(gpus if gpus != 1 or not (tp or pp or dp) else None, parallel, tp=tp, pp=pp, dp=dp,
                     microbatches=microbatches, schedule=schedule, sequence_parallel=sequence_parallel, nodes=nodes,
                     node=node, interconnect=interconnect)
    fabric(plan.gpus, gpu=spec.name, node=node, nodes=plan.nodes, interconnect=interconnect)  # refuse a bad layout early
    phase = phase or "train"
    pg = model if not isinstance(model, (str, bytes)) and hasattr(model, "graph") else extract(
        model, batch=1, input_shape=input_shape, dims=dims, seq_len=seq_len)
    facts = facts_of(pg, model if isinstance(model, str) else None,
                     seq_len=seq_len if seq_len else None, precision=precision)
    per_sample = input_bytes_per_sample(pg)
    # the AdamW pass the one-GPU training step includes (perfseer.specmodel.compose: 16 bytes read,
    # 12 written per parameter), run once per step on each GPU's share
    opt_ms = 1e3 * 28 * facts.params / (spec.mem_bandwidth_gbs * 1e9) if phase == "train" and spec.mem_bandwidth_gbs else 0.0
    cache: dict[int, dict] = {}

    def single(b: int) -> dict:
        if b not in cache:
            rows = predict(pg, device=spec.name, batch=int(b), phase=phase, precision=precision, basis=basis,
                           force=force)
            lat = [r for r in rows if r.get("metric") == "latency_ms"]
            cache[b] = lat[0] if lat else rows[0]
        return cache[b]

    def single_ms(b: int) -> float:
        r = single(b)
        if r.get("value") is None:
            raise _Refused(r)
        return float(r["value"])

    out = []
    for B in batches:
        try:
            st = step_time(plan, facts, int(B), single_ms, phase=phase, gpu=spec.name,
                           input_bytes_per_sample=per_sample, optimizer_ms=opt_ms)
        except _Refused as e:
            row = dict(e.row, batch_size=int(B), gpus=plan.gpus, parallel=plan.describe(),
                       reason=f"the single-GPU basis refused the per-GPU share: {e.row.get('reason')}")
            out.append(row)
            continue
        base = single(st.microbatch)
        row = dict(base)
        row.update(st.fields())
        row.update({"batch_size": int(B), "gpus": plan.gpus, "parallel": plan.describe(), "phase": phase,
                    "throughput_per_s": 1e3 * int(B) / st.value if st.value > 0 else None,
                    "basis": f"{base.get('basis')} per GPU; {BASIS_NOTE}",
                    "model": facts.name})
        iv = base.get("interval")
        if iv and base.get("value"):  # the single-GPU basis's uncertainty on the compute part only
            k = st.compute_ms / float(base["value"])
            extra = st.comm_ms + st.bubble_ms
            row["interval"] = [iv[0] * k + extra, iv[1] * k + extra]
        row["notes"] = st.notes
        out.append(row)
    return out


class _Refused(Exception):
    def __init__(self, row: dict):
        super().__init__(row.get("reason"))
        self.row = row
