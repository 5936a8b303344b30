"""Running a collection: plan the grid of jobs, measure what the store lacks, store each result.

The grid is every model x input shape x precision x phase x batch size, in that nesting order,
so that one model's measurements run together (an exported ONNX file is reused across batch
sizes) and batch sizes grow: once a ``(model, shape, precision, phase)`` runs out of memory or
times out at batch ``b``, its larger batches are recorded with the same status without running
(the error says "not run", ``extra.inferred_from`` gives ``b``; ``--retry-failed`` measures them
after all), which spares minutes of swapping or waiting per model.

Measurements run one at a time on a local :class:`~perfseer.profiling.worker.Worker` (two
measurements on one machine would disturb each other), or as Ray tasks across a cluster
(:mod:`perfseer.profiling.ray_runner`), one per CPU slot (``threads`` CPUs each) or GPU.  Results
are stored by the driver as they arrive, each in its own transaction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from perfseer.profiling.jobs import Job, Measurement, device_name, shape_text
from perfseer.profiling.store import Store, new_owner
from perfseer.profiling.store import _now as store_now
from perfseer.sources.space import canonical_ref, sample_configs, space_ref


@dataclass
class Grid:
    """What to measure: the cross product of these lists."""

    models: Sequence[str]
    input_shapes: Sequence[str] = ("3x224x224",)
    batches: Sequence[int] = (1, 2, 4, 8, 16, 32)
    phases: Sequence[str] = ("infer", "train")
    precisions: Sequence[str] = ("fp32",)
    optimizer: str = "sgd"

    def jobs(self, hardware: str, setting: str) -> list[Job]:
        out = []
        for model in self.models:
            for shape in self.input_shapes:
                for precision in self.precisions:
                    for phase in self.phases:
                        for batch in sorted(set(self.batches)):
                            out.append(Job(model, shape_text(shape), int(batch), phase, precision,
                                           device_name(hardware, setting, phase, self.optimizer), self.optimizer))
        return out


@dataclass
class Summary:
    """What a collection run did."""

    planned: int = 0
    new: int = 0
    to_run: int = 0
    done: int = 0
    statuses: Counter = field(default_factory=Counter)
    seconds: list = field(default_factory=list)  # per-measurement wall times of this run (ok only)
    taken: int = 0  # jobs skipped because another collector on the store measured or leased them


def _group(job: Job) -> tuple:
    return (job.model, job.input_shape, job.precision, job.phase, job.device)


# statuses that a larger batch of the same model would repeat
_MONOTONE = {"oom": "ran out of memory", "timeout": "timed out"}


def skipped(job: Job, failed_at: dict) -> Measurement | None:
    """The inferred result of ``job`` when a smaller batch of its group ran out of memory or time."""
    hit = failed_at.get(_group(job))
    if hit is None or job.batch_size <= hit[0]:
        return None
    batch, status = hit
    return Measurement.failed(status, f"not run: batch {batch} already {_MONOTONE[status]}",
                              extra={"inferred_from": batch})


def note_failure(job: Job, m: Measurement, failed_at: dict) -> None:
    if m.status in _MONOTONE and (m.extra or {}).get("inferred_from") is None:
        g = _group(job)
        if g not in failed_at or job.batch_size < failed_at[g][0]:
            failed_at[g] = (job.batch_size, m.status)


# A CPU measurement whose process used less than this share of its threads' time was sharing its
# cores with other work: measured here with 1 thread, such runs read 2-3x slower than on a free core
# (benchmarks/cpu_repeatability.py at tag research-2026-11), so they are recorded as ``contended`` and measured again.
MIN_CPU_UTIL_PCT = 80.0
CPU_BACKENDS = ("torch-cpu", "ort-cpu")


def check_contention(m: Measurement, backend: str) -> Measurement:
    """``m``, or a ``contended`` failure when a CPU measurement did not get its cores."""
    if backend in CPU_BACKENDS and m.status == "ok" and m.util_pct is not None and m.util_pct < MIN_CPU_UTIL_PCT:
        return Measurement.failed("contended", f"the process used {m.util_pct:.0f}% of its threads' CPU time "
                                  f"(< {MIN_CPU_UTIL_PCT:.0f}%): other work shared its cores; measure on an idle "
                                  f"machine (--retry-failed measures it again)",
                                  latency_ms=m.latency_ms, util_pct=m.util_pct, seconds=m.seconds)
    return m


def run_local(store: Store, pending: list[tuple[int, Job]], worker, timeout: float,
              on_result: Callable[[Job, Measurement], None] | None = None, summary: Summary | None = None,
              limit: int | None = None) -> Summary:
    """Measure ``pending`` jobs one by one on ``worker`` and store each result.

    Args:
        on_result: called after each stored result (progress display).
        limit: stop after this many measurements.
    """
    summary = summary or Summary()
    env_ids: dict[str, int] = {}
    failed_at: dict[tuple, tuple] = {}
    owner, since = new_owner(), store_now()
    try:
        for job_id, job in pending:
            if limit is not None and summary.done >= limit:
                break
            # another collector on this store may have measured it since, or be measuring it now
            if not store.claim(job_id, owner, lease_seconds(timeout), since):
                summary.taken += 1
                continue
            _measure_one(store, job_id, job, worker, timeout, summary, on_result, env_ids, failed_at)
    finally:
        store.release(owner)
    return summary


def lease_seconds(timeout: float) -> float:
    """How long a claimed job stays leased: its time limit, plus a margin for the worker's restart."""
    return float(timeout) + 120.0


def _measure_one(store, job_id, job, worker, timeout, summary, on_result, env_ids, failed_at) -> None:
    m = skipped(job, failed_at)
    env_id = None
    if m is None:
        m = check_contention(worker.run(job, timeout), getattr(worker, "backend", ""))
        env = worker.info["env"] if worker.info else None
        if env is not None:
            key = repr(sorted(env.items()))
            if key not in env_ids:
                env_ids[key] = store.environment_id(env)
            env_id = env_ids[key]
    note_failure(job, m, failed_at)
    store_result(store, job_id, job, m, env_id, summary, on_result)


def store_result(store: Store, job_id: int, job: Job, m: Measurement, env_id: int | None, summary: Summary,
                 on_result: Callable[[Job, Measurement], None] | None = None) -> None:
    """Commit one result and count it (shared by the local and the Ray runners)."""
    store.record(job_id, m, env_id)
    summary.done += 1
    summary.statuses[m.status] += 1
    if m.status == "ok" and m.seconds is not None:
        summary.seconds.append(m.seconds)
    if on_result is not None:
        on_result(job, m)


def plan(store: Store, grid: Grid | None, hardware: str, setting: str, retry_failed: bool = False,
         summary: Summary | None = None) -> list[tuple[int, Job]]:
    """Plan ``grid``'s jobs in the store and return those still to run (all pending jobs of the
    store for this device setting when ``grid`` is None: resuming without repeating the grid)."""
    summary = summary or Summary()
    if grid is not None:
        jobs = grid.jobs(hardware, setting)
        summary.planned = len(jobs)
        summary.new = store.add_jobs(jobs)
        pending = store.pending(jobs, retry_failed=retry_failed)
    else:
        prefix = f"{hardware}/{setting}"
        pending = [(i, j) for i, j in store.pending(retry_failed=retry_failed)
                   if j.device == prefix or j.device.startswith(prefix + "-")]
        summary.planned = len(pending)
    summary.to_run = len(pending)
    return pending


def models_from(space: int | None = None, seed: int = 0, refs: Iterable[str] = (), classes: int = 1000) -> list[str]:
    """Model references: ``space`` sampled networks of :mod:`perfseer.sources.space` (seed
    ``seed``), then ``refs`` (``space:`` ones in their canonical spelling)."""

    out = [space_ref(c) for c in sample_configs(space, seed, classes)] if space else []
    for ref in refs:
        out.append(canonical_ref(ref))
    seen: set = set()
    return [m for m in out if not (m in seen or seen.add(m))]
