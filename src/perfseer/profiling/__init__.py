"""The collection kit: generate models, measure them, keep the measurements.

- :mod:`perfseer.sources.space` -- the PerfSeer model space (VGG / Inception / ResNe(X)t / DenseNet /
  MobileNet stages), sampled from a seed; each network is named by its reference ``space:CONFIG``
  (its names are re-exported here; :mod:`.space` is a deprecated alias).
- :mod:`.backends` -- measurement backends (``torch-cpu``, ``ort-cpu``, ``torch-cuda``), one
  interface: ``Backend.measure(model, input_shape, batch, phase, precision) -> Measurement``.
- :mod:`.protocol` -- warm-up, then timed steps until the median is known to 2 % (95 % CI).
- :mod:`.worker` -- measurements in a persistent worker process, one fork per measurement, so
  crashes and hangs are recorded and the collection goes on.
- :mod:`.store` -- the resumable SQLite store and its export to a measurement table.
- :mod:`.collect`, :mod:`.ray_runner` -- running a grid of jobs locally or on a Ray cluster.

From the command line::

    perfseer collect run --db runs.sqlite --space 1000 --seed 0 --input-shape 3x64x64 \\
        --batches 1,2,4,8,16,32 --phases infer,train --backend torch-cpu --threads 1
    perfseer collect status --db runs.sqlite
    perfseer collect export --db runs.sqlite --out runs.csv --failures failed.csv

From Python::

    from perfseer.profiling import Worker, Store, Grid, plan, run_local, sample_configs, space_ref

    models = [space_ref(c) for c in sample_configs(10, seed=0)]
    with Store("runs.sqlite") as store, Worker("torch-cpu", {"threads": 1}) as worker:
        info = worker.start()
        pending = plan(store, Grid(models, ["3x64x64"], [1, 8]), info["hardware"], info["setting"])
        run_local(store, pending, worker, timeout=600)
        store.export("runs.csv")

Dependencies run one way: profiling uses sources (model references, runnable models), graph and data
(the table format).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "sample_configs": "perfseer.sources.space", "build_space_model": "perfseer.sources.space",
    "space_ref": "perfseer.sources.space", "parse_space": "perfseer.sources.space",
    "Protocol": "protocol", "run_protocol": "protocol",
    "Job": "jobs", "Measurement": "jobs", "CollectError": "jobs",
    "create_backend": "backends", "Worker": "worker", "Store": "store",
    "Grid": "collect", "plan": "collect", "run_local": "collect", "RayRunner": "ray_runner",
}


def __getattr__(name: str):
    # Submodules import torch or sqlite only when used; `import perfseer.profiling` stays cheap.
    if name in _LAZY:
        module = _LAZY[name]
        return getattr(importlib.import_module(module if "." in module else f"perfseer.profiling.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
