"""Scale-out: measurements as Ray tasks, results streamed to the driver's store.

Each task asks Ray for the resources one measurement needs -- ``threads`` CPUs for a CPU backend,
one GPU for ``torch-cuda`` -- so Ray runs as many at once as the cluster has slots, and never two
on one GPU.  Inside a Ray worker process, a task measures through a local
:class:`~perfseer.profiling.worker.Worker` that the process keeps between tasks (torch is imported
once per Ray worker, and a crashing model kills only the measuring child).  The driver keeps
exactly one task in flight per slot, stores each result as it arrives (its own transaction, as in
a local run), and submits the next: a driver killed mid-way loses only the in-flight measurements.

Every node needs the same perfseer installation (``pip install 'perfseer[ray]'``), and the cluster
should be homogeneous: jobs are planned under the device name of the first node that answers, and
each result records the environment of the node that measured it (``perfseer collect status``
lists the environments, so a stray node shows).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Callable

from perfseer.errors import MissingDependencyError, PerfseerError
from perfseer.profiling.collect import (Summary, check_contention, lease_seconds, note_failure, skipped, store_now,
                                        store_result)
from perfseer.profiling.jobs import CollectError, Job, Measurement
from perfseer.profiling.store import Store, new_owner
from perfseer.profiling.worker import Worker

# In each Ray worker process: the measuring Worker of each backend configuration, kept between tasks.
_WORKERS: dict = {}


def import_ray():
    try:
        import ray  # deferred: an optional extra
    except ImportError as e:
        raise MissingDependencyError("ray", "ray", "measuring on a Ray cluster (--ray)") from e
    return ray


def _local_worker(backend: str, options: dict, recycle_every: int):
    key = (backend, json.dumps(options, sort_keys=True), recycle_every)
    if key not in _WORKERS:
        _WORKERS[key] = Worker(backend, options, recycle_every=recycle_every)
    return _WORKERS[key]


def probe_task(backend: str, options: dict, recycle_every: int) -> dict:
    """Ray task: start a measuring worker on some node and return its ready message."""
    return _local_worker(backend, options, recycle_every).start()


def measure_task(job: dict, backend: str, options: dict, timeout: float, recycle_every: int) -> dict:
    """Ray task: one measurement; returns the result, the environment and the node's name."""

    worker = _local_worker(backend, options, recycle_every)
    m = check_contention(worker.run(Job.from_dict(job), timeout), backend)
    return {"result": m.to_dict(), "env": worker.info["env"] if worker.info else None, "node": platform.node()}


class RayRunner:
    """Measures jobs on a Ray cluster.

    Args:
        address: the cluster (``auto``: the running one; ``local``: start one on this machine;
            ``ray://HOST:10001``: Ray client).  Ignored when Ray is already initialised.
        backend, options, recycle_every: as for :class:`~perfseer.profiling.worker.Worker`.
        gpus: GPUs per task (1 for ``torch-cuda``); CPUs per task are ``options["threads"]`` (or 1).
        init_kwargs: more arguments for ``ray.init`` (e.g. ``num_cpus`` for a local cluster).
    """

    def __init__(self, address: str, backend: str, options: dict, recycle_every: int = 100, gpus: float = 0,
                 init_kwargs: dict | None = None):
        ray = import_ray()
        self.ray = ray
        self.backend, self.options, self.recycle_every = backend, dict(options), recycle_every
        self._owns = not ray.is_initialized()
        if self._owns:
            kwargs = {"log_to_driver": False, "ignore_reinit_error": True, **(init_kwargs or {})}
            if not str(address).startswith("ray://"):
                kwargs.setdefault("include_dashboard", False)
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as e:
                raise CollectError(f"cannot connect to the Ray cluster at {address!r}: {e}",
                                   "start one (ray start --head), or give --ray local to start one here") from e
        self.cpus = float(self.options.get("threads") or 1) if not gpus else 1.0
        self.gpus = gpus
        remote = ray.remote(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)
        self._measure = remote(measure_task)
        self._probe = remote(probe_task)
        self.info: dict | None = None

    def slots(self) -> int:
        res = self.ray.cluster_resources()
        if self.gpus:
            return max(1, int(res.get("GPU", 0) // self.gpus))
        return max(1, int(res.get("CPU", 1) // self.cpus))

    def start(self) -> dict:
        """Start a measuring worker on one node; its ready message names the device."""
        if self.info is None:
            self.info = self._get(self._probe.remote(self.backend, self.options, self.recycle_every))
        return self.info

    def _get(self, ref):
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, PerfseerError):
                raise CollectError(cause.problem, cause.fix) from None
            raise

    def run(self, store: Store, pending: list[tuple[int, Job]], timeout: float,
            on_result: Callable[[Job, Measurement], None] | None = None, summary=None, limit: int | None = None):
        """Measure ``pending`` with one task per slot in flight; store results as they come."""

        ray = self.ray
        summary = summary or Summary()
        queue = list(pending) if limit is None else list(pending)[:limit]
        queue.reverse()  # pop() from the end keeps the planned order
        in_flight: dict = {}
        env_ids: dict[str, int] = {}
        failed_at: dict[tuple, tuple] = {}
        slots = self.slots()
        owner, since = new_owner(), store_now()
        try:
            while queue or in_flight:
                while queue and len(in_flight) < slots:
                    job_id, job = queue.pop()
                    if not store.claim(job_id, owner, lease_seconds(timeout), since):
                        summary.taken += 1  # another collector on the store has it
                        continue
                    inferred = skipped(job, failed_at)
                    if inferred is not None:
                        store_result(store, job_id, job, inferred, None, summary, on_result)
                        continue
                    ref = self._measure.remote(job.to_dict(), self.backend, self.options, timeout, self.recycle_every)
                    in_flight[ref] = (job_id, job)
                if not in_flight:
                    continue
                done, _ = ray.wait(list(in_flight), num_returns=1)
                ref = done[0]
                job_id, job = in_flight.pop(ref)
                env = None
                try:
                    out = self._get(ref)
                    m, env = Measurement.from_dict(out["result"]), out.get("env")
                except CollectError:
                    raise
                except Exception as e:  # noqa: BLE001 - a lost Ray worker or node: this job's crash
                    m = Measurement.failed("crash", f"the Ray task failed: {type(e).__name__}: "
                                                    f"{str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}")
                env_id = None
                if env is not None:
                    key = json.dumps(env, sort_keys=True, default=str)
                    if key not in env_ids:
                        env_ids[key] = store.environment_id(env)
                    env_id = env_ids[key]
                note_failure(job, m, failed_at)
                store_result(store, job_id, job, m, env_id, summary, on_result)
        finally:
            for ref in in_flight:
                ray.cancel(ref, force=True)
            store.release(owner)
        return summary

    def close(self) -> None:
        if self._owns and self.ray.is_initialized():
            self.ray.shutdown()
