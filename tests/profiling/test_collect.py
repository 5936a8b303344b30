"""Collection: the store (planning, results, export), isolation (a crashing, hanging or failing
model is recorded and the collection goes on), and resuming after a real ``kill -9``."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfseer.data.table import read_table
from perfseer.profiling.collect import Grid, plan, run_local
from perfseer.profiling.jobs import Job, Measurement
from perfseer.profiling.store import Store
from perfseer.profiling.worker import Worker

HERE = Path(__file__).parent
FAKE = "fake_backends:FakeBackend"
INLINE = "fake_backends:InlineFakeBackend"


def job(model="example:ok", batch=1, phase="infer", device="fakecpu/fake"):
    return Job(model, "3x8x8", batch, phase, "fp32", device)


def test_store_plans_once_and_keeps_one_result_per_job(tmp_path):
    with Store(tmp_path / "runs.sqlite") as store:
        jobs = [job(batch=b) for b in (1, 2, 4)]
        assert store.add_jobs(jobs) == 3
        assert store.add_jobs(jobs + [job(batch=8)]) == 1  # the three are kept, one is new
        pending = store.pending(jobs)
        assert [j.batch_size for _, j in pending] == [1, 2, 4]
        store.record(pending[0][0], Measurement("ok", latency_ms=1.0, memory_mb=2.0,
                                                timing={"reps": 7, "converged": False, "iqr_ms": 0.1}))
        store.record(pending[1][0], Measurement.failed("crash", "killed by SIGSEGV"))
        assert [j.batch_size for _, j in store.pending()] == [4, 8]
        assert [j.batch_size for _, j in store.pending(retry_failed=True)] == [2, 4, 8]
        store.record(pending[1][0], Measurement("ok", latency_ms=3.0))  # a retry replaces the result
        rows = store.db.execute("SELECT job_id, status, attempts FROM results ORDER BY job_id").fetchall()
        assert rows == [(pending[0][0], "ok", 1), (pending[1][0], "ok", 2)]
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.counts() == {"fakecpu/fake": {"ok": 2, "pending": 2}}


def test_export_keeps_ok_rows_and_reports_the_rest(tmp_path):
    with Store(tmp_path / "runs.sqlite") as store:
        jobs = [job(batch=1), job(batch=2, phase="train"), job(batch=4), job(model="example:x", batch=1)]
        store.add_jobs(jobs)
        ids = store.job_ids(jobs)
        env = store.environment_id({"cpu": "fake", "hostname": "a"})
        assert env == store.environment_id({"cpu": "fake", "hostname": "b"})  # host names do not split envs
        store.record(ids[0][0], Measurement("ok", latency_ms=1.5, memory_mb=3.0, util_pct=90.0,
                                            timing={"reps": 12, "converged": True, "q1_ms": 1.4, "q3_ms": 1.6,
                                                    "iqr_ms": 0.2, "mad_ms": 0.1, "cv": 0.05, "ci_rel": 0.01}), env)
        store.record(ids[1][0], Measurement("ok", latency_ms=4.0, timing={"reps": 3, "converged": False}), env)
        store.record(ids[2][0], Measurement.failed("oom", "MemoryError"), env)
        store.record(ids[3][0], Measurement.failed("timeout", "no result within 5 s"), env)
        out, failures = tmp_path / "table.csv", tmp_path / "failed.csv"
        table, excluded = store.export(out, failures)
    assert excluded == {"oom": 1, "timeout": 1}
    back = read_table(out)
    assert len(back) == 2 and list(back["batch_size"]) == [1, 2]
    assert list(back["converged"]) == [True, False]  # unconverged rows are flagged, not dropped
    assert back.loc[0, "latency_iqr_ms"] == pytest.approx(0.2) and back.loc[0, "reps"] == 12
    assert back.loc[0, "source"] == "perfseer-collect:runs.sqlite"
    assert failures.read_text().count("\n") == 3 and "no result within 5 s" in failures.read_text()
    assert "memory_reserved_mb" not in back.columns  # no backend extra measured: no empty columns


def test_export_writes_the_cuda_memory_extras_as_columns(tmp_path):
    with Store(tmp_path / "runs.sqlite") as store:
        jobs = [job(batch=1), job(batch=2)]
        store.add_jobs(jobs)
        ids = store.job_ids(jobs)
        store.record(ids[0][0], Measurement("ok", latency_ms=1.0, memory_mb=100.0,
                                            extra={"memory_reserved_mb": 128.0, "nvml_used_mb": 700.5,
                                                   "memory_base_mb": 2.0, "weights_mb": 10.0}))
        store.record(ids[1][0], Measurement("ok", latency_ms=2.0, memory_mb=50.0))  # no extra: empty cells
        store.export(tmp_path / "t.csv")
    back = read_table(tmp_path / "t.csv")
    assert back.loc[0, "memory_reserved_mb"] == 128.0 and back.loc[0, "nvml_used_mb"] == 700.5
    assert back.loc[0, "weights_mb"] == 10.0 and back["memory_reserved_mb"].isna().tolist() == [False, True]


def test_a_crashing_hanging_or_failing_model_is_recorded_and_collection_goes_on(tmp_path):
    models = ["example:ok", "example:crash", "example:exit", "example:hang", "example:error", "example:oom",
              "example:ok2"]
    with Store(tmp_path / "runs.sqlite") as store, Worker(FAKE, {"threads": 1}) as worker:
        info = worker.start()
        pending = plan(store, Grid(models, ["3x8x8"], [1, 4, 8], ["infer"]), info["hardware"], info["setting"])
        assert len(pending) == 21
        summary = run_local(store, pending, worker, timeout=1.0)
        rows = store.db.execute("SELECT j.model, j.batch_size, r.status, r.error, r.extra FROM results r "
                                "JOIN jobs j ON j.id = r.job_id").fetchall()
    by = {(m, b): (s, e) for m, b, s, e, _ in rows}
    assert len(rows) == 21 and summary.done == 21
    assert by[("example:crash", 1)][0] == "crash" and "SIGSEGV" in by[("example:crash", 1)][1]
    assert by[("example:exit", 4)][0] == "crash" and "code 3" in by[("example:exit", 4)][1]
    assert by[("example:hang", 1)][0] == "timeout"
    assert by[("example:hang", 8)][0] == "timeout" and "not run" in by[("example:hang", 8)][1]
    assert by[("example:error", 1)][0] == "error" and "fake model failure" in by[("example:error", 1)][1]
    assert by[("example:oom", 1)][0] == "ok" and by[("example:oom", 4)][0] == "oom"
    assert "not run" in by[("example:oom", 8)][1]  # a larger batch after an OOM is not tried
    assert by[("example:ok2", 8)][0] == "ok"
    # the forked children are fresh processes; the worker itself survived all of it
    pids = {eval(x)["pid"] for m, b, s, e, x in rows if s == "ok" and x and "pid" in x}  # noqa: S307 - our JSON
    assert len(pids) == sum(1 for r in rows if r[2] == "ok")
    assert worker.starts == 1


def test_an_inline_worker_is_replaced_after_a_crash_or_timeout(tmp_path):
    with Worker(INLINE, {}, recycle_every=3) as worker:
        info = worker.start()
        device = f"{info['hardware']}/{info['setting']}"
        results = [worker.run(Job(m, "3x8x8", 1, "infer", "fp32", device), timeout=1.5)
                   for m in ("example:ok", "example:crash", "example:ok", "example:hang", "example:ok",
                             "example:ok", "example:ok", "example:ok")]
    assert [r.status for r in results] == ["ok", "crash", "ok", "timeout", "ok", "ok", "ok", "ok"]
    assert "SIGSEGV" in results[1].error
    # started first, after the crash, after the timeout, and after 3 measurements served by one process
    assert worker.starts == 4


def test_a_backend_that_cannot_start_is_an_error(tmp_path):
    from perfseer.profiling.jobs import CollectError

    with pytest.raises(CollectError) as e:
        Worker("fake_backends:NoSuchBackend").start()
    assert "NoSuchBackend" in str(e.value)


def _collect_cmd(db: Path, extra=()) -> list[str]:
    models = [f"--model=example:ok{i}" for i in range(12)]
    return [sys.executable, "-m", "perfseer.cli.main", "collect", "run", "--db", str(db), *models,
            "--input-shape", "3x8x8", "--batches", "1,2", "--phases", "infer", "--backend", FAKE, "--quiet", *extra]


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    with open(f"/proc/{pid}/stat") as st:
                        if st.read().rsplit(")", 1)[1].split()[0] != "Z":  # not a zombie
                            found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kill -9 and /proc")
def test_resume_after_kill_9_loses_nothing_and_duplicates_nothing(tmp_path):
    db = tmp_path / "runs.sqlite"
    marker = f"PERFSEER_TEST_MARKER={tmp_path}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "FAKE_SLEEP": "0.2", "PERFSEER_TEST_MARKER": str(tmp_path)}
    proc = subprocess.Popen(_collect_cmd(db), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    done = 0
    while done < 4:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the collection made no progress"
        time.sleep(0.1)
        if db.exists():
            try:
                with sqlite3.connect(db) as c:
                    done = c.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            except sqlite3.OperationalError:  # tables not created yet
                pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the worker and its measuring child die with the driver (PR_SET_PDEATHSIG)
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _processes_with(marker)
    with sqlite3.connect(db) as c:
        before = c.execute("SELECT job_id, status, latency_ms, finished FROM results ORDER BY job_id").fetchall()
        planned = c.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    assert planned == 24 and 4 <= len(before) < 24
    env["FAKE_SLEEP"] = "0"
    resumed = subprocess.run(_collect_cmd(db), env=env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"measured {24 - len(before)} jobs" in resumed.stdout
    with sqlite3.connect(db) as c:
        after = c.execute("SELECT job_id, status, latency_ms, finished FROM results ORDER BY job_id").fetchall()
        attempts = c.execute("SELECT MAX(attempts) FROM results").fetchone()[0]
        jobs = c.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    assert jobs == 24 and len(after) == 24 and len({r[0] for r in after}) == 24
    assert all(r[1] == "ok" for r in after) and attempts == 1
    assert set(before) <= set(after)  # what was stored before the kill is untouched
    again = subprocess.run(_collect_cmd(db), env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "up to date" in again.stdout


class _StubWorker:
    """Returns a fixed measurement: enough to test what run_local does with results."""

    def __init__(self, backend, util):
        self.backend, self.util, self.info = backend, util, None

    def run(self, job, timeout):
        return Measurement("ok", latency_ms=3.0, memory_mb=1.0, util_pct=self.util)


def test_cpu_measurement_without_its_cores_is_contended_and_retried(tmp_path):
    with Store(tmp_path / "runs.sqlite") as store:
        jobs = [job(batch=1), job(batch=2)]
        store.add_jobs(jobs)
        summary = run_local(store, store.pending(jobs), _StubWorker("torch-cpu", 35.0), 10.0)
        assert summary.statuses["contended"] == 2
        assert store.pending(jobs) == [] and len(store.pending(jobs, retry_failed=True)) == 2
        run_local(store, store.pending(jobs, retry_failed=True), _StubWorker("torch-cpu", 99.0), 10.0)
        assert set(store.rows()["status"]) == {"ok"}
    with Store(tmp_path / "gpu.sqlite") as store:  # GPU utilisation is the device's, not the process's
        store.add_jobs([job(device="fakegpu/fake")])
        summary = run_local(store, store.pending(), _StubWorker("torch-cuda", 20.0), 10.0)
        assert summary.statuses["ok"] == 1


def test_two_collectors_on_one_store_split_the_work(tmp_path):
    """Two ``perfseer collect run`` processes on one store: every job measured exactly once, the
    work split between them (each claims a job with a lease before measuring it)."""
    db = tmp_path / "runs.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "FAKE_SLEEP": "0.15"}
    procs = [subprocess.Popen(_collect_cmd(db), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    measured = []
    for out, _ in outs:
        line = next(x for x in out.splitlines() if x.startswith(("measured", "nothing measured")))
        measured.append(int(line.split()[1]) if line.startswith("measured") else 0)
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT job_id, status, attempts FROM results").fetchall()
        leases = c.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
    assert len(rows) == 24 and len({r[0] for r in rows}) == 24
    assert all(status == "ok" and attempts == 1 for _, status, attempts in rows)  # nothing measured twice
    assert sum(measured) == 24 and min(measured) > 0, outs  # both did part of the work
    assert leases == 0


def test_an_ok_result_is_never_replaced_by_a_later_failure(tmp_path):
    with Store(tmp_path / "runs.sqlite") as store:
        store.add_jobs([job()])
        (job_id, _), = store.pending()
        store.record(job_id, Measurement("ok", latency_ms=2.0))
        store.record(job_id, Measurement.failed("crash", "a second collector's late failure"))
        assert store.db.execute("SELECT status, latency_ms FROM results").fetchall() == [("ok", 2.0)]
        assert not store.claim(job_id, "someone", 60.0, since="1970-01-01T00:00:00+00:00")


def test_a_live_lease_blocks_others_and_a_dead_owners_lease_does_not(tmp_path):
    with Store(tmp_path / "runs.sqlite") as store:
        store.add_jobs([job(batch=1), job(batch=2)])
        (a, _), (b, _) = store.pending()
        assert store.claim(a, "first", 600.0)
        assert not store.claim(a, "second", 600.0)  # the first collector (this live process) holds it
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        store.db.execute("INSERT INTO leases VALUES (?, 'gone', (SELECT host FROM leases LIMIT 1), ?, 1e12)",
                         (b, int(dead.stdout)))
        assert store.claim(b, "second", 600.0)  # its owner's process is gone from this host
