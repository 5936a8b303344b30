"""The collection store: planned measurements and their results in one SQLite file.

Why SQLite: a collection runs for days, gets interrupted (Ctrl-C, ``kill -9``, a lost node) and
is resumed by running the same command again.  Each result is committed in its own transaction
in WAL mode with ``synchronous=FULL``, so a result is either entirely stored or absent, whatever
moment the driver dies at; resuming measures exactly the jobs without a result.  The store is
read by ``perfseer collect status`` while a collection writes to it (WAL readers do not block the
writer).

Tables:

``jobs``
    One row per planned measurement, unique on ``(model, input_shape, batch_size, phase,
    precision, device)`` (planning the same job twice is a no-op), with its ``optimizer``.
``results``
    At most one row per job (``job_id`` is the primary key: no duplicates): ``status`` (``ok``,
    ``oom``, ``crash``, ``timeout``, ``unsupported``, ``error``), the four metrics, the timing
    summary (median = ``latency_ms``, quartiles, IQR, MAD, CV, the median's relative confidence
    half-width, count, convergence), the backend's details as JSON, the error text, the
    environment it ran in, the attempt count and when it finished.
``environments``
    Each distinct environment (:mod:`perfseer.profiling.environment`), by fingerprint.
``leases``
    The jobs a collector is measuring now: owner, host, process id and expiry.  Several
    ``perfseer collect run`` processes can share one store: each claims a job
    (:meth:`Store.claim`) before measuring it, in one ``BEGIN IMMEDIATE`` transaction, so a job
    with a result or a live lease is never measured twice.  A lease ends with the job's result;
    one left by a collector that died is taken over when it expires, or at once when its
    process is gone from this host.  An ``ok`` result is never replaced by a later failure.

**Export** (:meth:`Store.export`): the ``ok`` results become a measurement table
(:mod:`perfseer.data.table`).  Failed measurements (``oom``, ``crash``, ``timeout``, ``error``)
and ``unsupported`` ones stay in the store and are *excluded* from the table -- a row must carry a
measured metric, and an out-of-memory batch size has none -- and reported by status (and written
to a failures CSV on request).  Results that stopped at the time cap without converging are
exported, flagged ``converged = False``, with their spread, so the user can filter them.
Besides the standard columns the table carries ``optimizer`` (train rows), ``latency_q1_ms``,
``latency_q3_ms``, ``latency_iqr_ms``, ``latency_mad_ms``, ``latency_cv``, ``latency_ci_rel``,
``reps``, ``converged`` and ``env`` (the environment's fingerprint).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from perfseer.atomic import atomic_write_text
from perfseer.data.table import table_format, write_table
from perfseer.profiling.environment import fingerprint
from perfseer.profiling.jobs import FAILED, STATUSES, CollectError, Job, Measurement

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    input_shape TEXT NOT NULL,
    batch_size INTEGER NOT NULL,
    phase TEXT NOT NULL,
    precision TEXT NOT NULL,
    device TEXT NOT NULL,
    optimizer TEXT NOT NULL,
    planned TEXT NOT NULL,
    UNIQUE (model, input_shape, batch_size, phase, precision, device)
);
CREATE TABLE IF NOT EXISTS environments (
    id INTEGER PRIMARY KEY,
    fingerprint TEXT NOT NULL UNIQUE,
    info TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
    status TEXT NOT NULL,
    latency_ms REAL, memory_mb REAL, util_pct REAL, energy_j REAL,
    latency_q1_ms REAL, latency_q3_ms REAL, latency_iqr_ms REAL, latency_mad_ms REAL,
    latency_cv REAL, latency_ci_rel REAL, reps INTEGER, converged INTEGER,
    timing TEXT, extra TEXT, error TEXT, seconds REAL,
    env_id INTEGER REFERENCES environments(id),
    attempts INTEGER NOT NULL DEFAULT 1,
    finished TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_status ON results(status);
CREATE TABLE IF NOT EXISTS leases (
    job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
    owner TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    expires REAL NOT NULL
);
"""

EXPORT_EXTRAS = ("optimizer", "latency_q1_ms", "latency_q3_ms", "latency_iqr_ms", "latency_mad_ms",
                 "latency_cv", "latency_ci_rel", "reps", "converged", "env")
# What a backend measured beside the table's metrics (its ``extra`` JSON), exported as columns when
# any row has them: the CUDA backend's caching-allocator reservation, the device's used memory
# (NVML), the allocator's baseline before the step and the weights' size.
EXPORT_MEASURED_EXTRAS = ("memory_reserved_mb", "nvml_used_mb", "memory_base_mb", "weights_mb", "memory_method")


def expand_extras(df):
    """``df`` (:meth:`Store.rows`) with its ``extra`` JSON replaced by one column per
    :data:`EXPORT_MEASURED_EXTRAS` key that any row has (missing cells are None)."""
    extras = [json.loads(e) if isinstance(e, str) and e else {} for e in df["extra"]]
    df = df.drop(columns="extra")
    for c in EXPORT_MEASURED_EXTRAS:
        if any(c in e for e in extras):
            df[c] = [e.get(c) for e in extras]
    return df


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def new_owner() -> str:
    """A collector's lease owner id: host, process and a random part."""

    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Store:
    """A collection store at ``path`` (created if missing).

    Example::

        store = Store("runs.sqlite")
        store.add_jobs(jobs)
        for job_id, job in store.pending(jobs):
            store.record(job_id, worker.run(job, 600), env_id)
        store.export("table.csv")
    """

    def __init__(self, path: str | os.PathLike, create: bool = True):
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise CollectError(f"no collection store at '{self.path}'", "check the --db path")
        if self.path.exists() and self.path.is_dir():
            raise CollectError(f"'{self.path}' is a folder", "give a file path for the --db store")
        try:
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            _set_wal(self.db)
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(_SCHEMA)
            version = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if version is None:
                self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif version[0] != str(SCHEMA_VERSION):
                raise CollectError(f"'{self.path}' is a collection store of schema {version[0]}, this perfseer "
                                   f"reads schema {SCHEMA_VERSION}", "use the perfseer version that wrote it")
        except sqlite3.DatabaseError as e:
            raise CollectError(f"cannot open '{self.path}' as a collection store: {e}",
                               "give a new path or a store written by perfseer collect") from e

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- planning ----------------------------------------------------------------------------------------
    def add_jobs(self, jobs: Iterable[Job]) -> int:
        """Plan ``jobs`` (one transaction); already planned ones are kept.  Returns how many are new."""
        now = _now()
        rows = [(j.model, j.input_shape, j.batch_size, j.phase, j.precision, j.device, j.optimizer, now) for j in jobs]
        before = self.db.total_changes
        with self._transaction():
            self.db.executemany(
                "INSERT OR IGNORE INTO jobs (model, input_shape, batch_size, phase, precision, device, optimizer, "
                "planned) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return self.db.total_changes - before

    def _transaction(self):
        db = self.db

        class _Tx:
            def __enter__(self):
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, exc_type, exc, tb):
                db.execute("COMMIT" if exc_type is None else "ROLLBACK")
                return False

        return _Tx()

    def job_ids(self, jobs: Iterable[Job]) -> list[tuple[int, Job]]:
        """``(id, job)`` of planned jobs, in the order given."""
        out = []
        for j in jobs:
            row = self.db.execute("SELECT id FROM jobs WHERE model=? AND input_shape=? AND batch_size=? AND phase=? "
                                  "AND precision=? AND device=?", j.key()).fetchone()
            if row is None:
                raise CollectError(f"job {j.label()} is not planned in '{self.path}'", "plan it with add_jobs first")
            out.append((row[0], j))
        return out

    def pending(self, jobs: Iterable[Job] | None = None, retry_failed: bool = False) -> list[tuple[int, Job]]:
        """Planned jobs without a result (``retry_failed``: also those whose result is oom, crash,
        timeout or error), among ``jobs`` (in their order) or, if None, all (in planning order)."""
        redo = FAILED if retry_failed else ()
        if jobs is not None:
            ids = self.job_ids(jobs)
            status = self._statuses([i for i, _ in ids])
            return [(i, j) for i, j in ids if i not in status or status[i] in redo]
        rows = self.db.execute(
            "SELECT j.id, j.model, j.input_shape, j.batch_size, j.phase, j.precision, j.device, j.optimizer, r.status "
            "FROM jobs j LEFT JOIN results r ON r.job_id = j.id ORDER BY j.id").fetchall()
        return [(r[0], Job(*r[1:8])) for r in rows if r[8] is None or r[8] in redo]

    def _statuses(self, ids: list[int]) -> dict[int, str]:
        out = {}
        for k in range(0, len(ids), 500):
            chunk = ids[k:k + 500]
            q = f"SELECT job_id, status FROM results WHERE job_id IN ({','.join('?' * len(chunk))})"
            out.update(dict(self.db.execute(q, chunk).fetchall()))
        return out

    # -- leases -----------------------------------------------------------------------------------------
    def claim(self, job_id: int, owner: str, ttl_s: float, since: str | None = None) -> bool:
        """Lease job ``job_id`` to ``owner`` for ``ttl_s`` seconds.

        Refused (``False``) when another collector holds a live lease on it, or when it has a
        result, unless that result is a failure (oom, crash, timeout, error) stored before ``since``
        (the claimer's start, ISO time): a retry may measure it again, but not after another
        collector already did."""

        now, host = time.time(), socket.gethostname()
        with self._transaction():
            row = self.db.execute("SELECT status, finished FROM results WHERE job_id=?", (job_id,)).fetchone()
            if row is not None and (row[0] not in FAILED or since is None or row[1] > since):
                return False
            lease = self.db.execute("SELECT owner, host, pid, expires FROM leases WHERE job_id=?", (job_id,)).fetchone()
            if lease is not None and lease[0] != owner and lease[3] > now and not (
                    lease[1] == host and not _alive(lease[2])):
                return False
            self.db.execute("INSERT OR REPLACE INTO leases (job_id, owner, host, pid, expires) VALUES (?, ?, ?, ?, ?)",
                            (job_id, owner, host, os.getpid(), now + ttl_s))
        return True

    def release(self, owner: str) -> None:
        """End every lease of ``owner`` (a collector that stops early)."""
        with self._transaction():
            self.db.execute("DELETE FROM leases WHERE owner=?", (owner,))

    # -- results ----------------------------------------------------------------------------------------
    def environment_id(self, env: dict) -> int:
        """The id of environment ``env`` (stored on first sight)."""

        fp = fingerprint(env)
        with self._transaction():
            self.db.execute("INSERT OR IGNORE INTO environments (fingerprint, info) VALUES (?, ?)",
                            (fp, json.dumps(env, sort_keys=True, default=str)))
        return self.db.execute("SELECT id FROM environments WHERE fingerprint=?", (fp,)).fetchone()[0]

    def record(self, job_id: int, m: Measurement, env_id: int | None = None) -> None:
        """Store the result of job ``job_id`` in its own transaction (a retry replaces the earlier
        result and counts the attempt)."""
        t = m.timing or {}
        values = (job_id, m.status, m.latency_ms, m.memory_mb, m.util_pct, m.energy_j, t.get("q1_ms"),
                  t.get("q3_ms"), t.get("iqr_ms"), t.get("mad_ms"), t.get("cv"), t.get("ci_rel"), t.get("reps"),
                  None if not t else int(bool(t.get("converged"))),
                  json.dumps(t) if t else None, json.dumps(m.extra, default=str) if m.extra else None,
                  m.error, m.seconds, env_id, _now())
        with self._transaction():
            self.db.execute(
                "INSERT INTO results (job_id, status, latency_ms, memory_mb, util_pct, energy_j, latency_q1_ms, "
                "latency_q3_ms, latency_iqr_ms, latency_mad_ms, latency_cv, latency_ci_rel, reps, converged, timing, "
                "extra, error, seconds, env_id, finished) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(job_id) DO UPDATE SET status=excluded.status, latency_ms=excluded.latency_ms, "
                "memory_mb=excluded.memory_mb, util_pct=excluded.util_pct, energy_j=excluded.energy_j, "
                "latency_q1_ms=excluded.latency_q1_ms, latency_q3_ms=excluded.latency_q3_ms, "
                "latency_iqr_ms=excluded.latency_iqr_ms, latency_mad_ms=excluded.latency_mad_ms, "
                "latency_cv=excluded.latency_cv, latency_ci_rel=excluded.latency_ci_rel, reps=excluded.reps, "
                "converged=excluded.converged, timing=excluded.timing, extra=excluded.extra, error=excluded.error, "
                "seconds=excluded.seconds, env_id=excluded.env_id, finished=excluded.finished, "
                "attempts=results.attempts + 1 "
                "WHERE results.status != 'ok' OR excluded.status = 'ok'", values)  # ok is never lost to a failure
            self.db.execute("DELETE FROM leases WHERE job_id=?", (job_id,))

    # -- reading -------------------------------------------------------------------------------------------
    def counts(self) -> dict[str, Counter]:
        """Per device: how many jobs have each status (``pending``: no result yet)."""
        rows = self.db.execute("SELECT j.device, COALESCE(r.status, 'pending'), COUNT(*) FROM jobs j "
                               "LEFT JOIN results r ON r.job_id = j.id GROUP BY 1, 2").fetchall()
        out: dict[str, Counter] = {}
        for device, status, n in rows:
            out.setdefault(device, Counter())[status] = n
        return out

    def rows(self, statuses: Iterable[str] | None = None):
        """The joined job/result rows as a DataFrame (``statuses``: only these); ``extra`` is the
        backend's JSON text of what else it measured (e.g. ``memory_reserved_mb`` on CUDA)."""
        import pandas as pd  # deferred: heavy, loaded on first use

        q = ("SELECT j.id AS job_id, j.model, j.input_shape, j.batch_size, j.phase, j.precision, j.device, "
             "j.optimizer, r.status, r.latency_ms, r.memory_mb, r.util_pct, r.energy_j, r.latency_q1_ms, "
             "r.latency_q3_ms, r.latency_iqr_ms, r.latency_mad_ms, r.latency_cv, r.latency_ci_rel, r.reps, "
             "r.converged, r.error, r.seconds, r.attempts, r.finished, r.extra, e.fingerprint AS env "
             "FROM jobs j JOIN results r ON r.job_id = j.id LEFT JOIN environments e ON e.id = r.env_id")
        args: list = []
        if statuses is not None:
            statuses = list(statuses)
            q += f" WHERE r.status IN ({','.join('?' * len(statuses))})"
            args = statuses
        return pd.read_sql_query(q + " ORDER BY j.id", self.db, params=args)

    def export(self, out: str | os.PathLike, failures: str | os.PathLike | None = None, source: str | None = None):
        """Write the ``ok`` results as a measurement table (CSV or Parquet, from the suffix).

        Args:
            out: the table file.
            failures: optionally, a CSV of the results that are not ``ok`` (with their error).
            source: the ``source`` column (default ``perfseer-collect:<store file name>``).

        Returns:
            ``(table, excluded)``: the written table and a Counter of the statuses left out.
        """

        table_format(out)
        ok = expand_extras(self.rows(["ok"]))
        table = ok[["model", "input_shape", "batch_size", "phase", "device", "latency_ms", "memory_mb", "util_pct",
                    "energy_j", "precision"]].copy()
        table["source"] = source or f"perfseer-collect:{self.path.name}"
        for c in EXPORT_EXTRAS:
            table[c] = ok[c]
        table.loc[table["phase"] != "train", "optimizer"] = None
        for c in EXPORT_MEASURED_EXTRAS:
            if c in ok:
                table[c] = ok[c]
        table["converged"] = ok["converged"].map({1: True, 0: False})
        others = self.rows([s for s in STATUSES if s != "ok"])
        excluded = Counter(others["status"]) if len(others) else Counter()
        if len(table) == 0:
            raise CollectError(f"'{self.path}' holds no successful measurement to export"
                               + (f" ({', '.join(f'{n} {s}' for s, n in excluded.items())})" if excluded else ""),
                               "run perfseer collect run first, or check perfseer collect status")
        written = write_table(table, out)
        if failures is not None:
            cols = ["model", "input_shape", "batch_size", "phase", "precision", "device", "optimizer", "status",
                    "error", "seconds", "attempts", "finished"]

            atomic_write_text(failures, others[cols].to_csv(index=False))
        return written, excluded


def _set_wal(db: sqlite3.Connection, wait_s: float = 60.0) -> None:
    """Switch to WAL.  The switch needs the database to itself and SQLite may refuse it at once with
    "database is locked" (without calling the busy handler) while another collector is creating the
    schema; once any process has switched, the mode persists and the pragma is a no-op.  Retried."""

    deadline = time.monotonic() + wait_s
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
