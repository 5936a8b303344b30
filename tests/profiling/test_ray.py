"""Scale-out on a local Ray cluster that the test starts (skipped without ray): results of
parallel tasks, a crashing model among them, stream into the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from perfseer.profiling.collect import Grid, plan  # noqa: E402
from perfseer.profiling.ray_runner import RayRunner  # noqa: E402
from perfseer.profiling.store import Store  # noqa: E402

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def local_cluster():
    # Ray workers find the test's fake backend through PYTHONPATH
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


def test_measurements_run_as_ray_tasks_and_stream_into_the_store(local_cluster, tmp_path):
    runner = RayRunner("local", "fake_backends:FakeBackend", {"threads": 1})
    assert runner.slots() == 2 and not runner._owns  # uses the cluster the test started
    info = runner.start()
    models = ["example:ok1", "example:crash", "example:oom", "example:ok2"]
    with Store(tmp_path / "runs.sqlite") as store:
        pending = plan(store, Grid(models, ["3x8x8"], [1, 4, 8], ["infer"]), info["hardware"], info["setting"])
        seen = []
        summary = runner.run(store, pending, timeout=30, on_result=lambda job, m: seen.append(m.status))
        rows = dict(store.db.execute("SELECT j.model || ' ' || j.batch_size, r.status FROM results r "
                                     "JOIN jobs j ON j.id = r.job_id").fetchall())
        envs = store.db.execute("SELECT COUNT(*) FROM environments").fetchone()[0]
    assert summary.done == 12 and len(seen) == 12 and len(rows) == 12
    assert rows["example:ok1 8"] == rows["example:ok2 1"] == "ok"
    assert rows["example:crash 1"] == "crash"
    assert rows["example:oom 1"] == "ok" and rows["example:oom 4"] == "oom"
    assert envs == 1
    runner.close()
    assert ray.is_initialized()  # not ours to shut down


def test_a_missing_ray_names_the_install(monkeypatch):
    import sys

    from perfseer.errors import MissingDependencyError
    from perfseer.profiling.ray_runner import import_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingDependencyError, match=r"perfseer\[ray\]"):
        import_ray()
