"""A measurement table -> a graph dataset: ``perfseer data build TABLE --out DIR``.

Each distinct ``(model, input_shape)`` of the table is turned into a PerfGraph **once**; each of
its distinct batch sizes is then re-bound with :meth:`PerfGraph.with_batch` (milliseconds, exact),
and the table's rows are joined to the graphs as labels.

Models are resolved with :func:`perfseer.sources.load.load_skeleton`: ``timm:``, ``torchvision:``
and ``space:`` references are *exported* (seconds each: they are built and traced), ``nb201:``
and ``fbnet:`` graphs are emitted directly (milliseconds, not cached),
``example:`` references and ``.onnx`` paths are *read* (milliseconds: the file is already a graph;
the table's ``input_shape`` overrides the file's).  A relative ``.onnx`` path is looked up next to
the table first, then in the current directory.

**Skeleton cache** (exported references only; reading a file costs what reading the cache would).
One folder, default ``$PERFSEER_CACHE/skeletons`` when ``PERFSEER_CACHE`` is set, else
``${XDG_CACHE_HOME:-~/.cache}/perfseer/skeletons``.  The key of an entry is
``sha256(json.dumps([reference, input_shape, SKELETON_FORMAT]))`` in hex:

- ``<key>.onnx``: the exported ONNX skeleton (graph, no weights), with the reference, the input
  shape and the format in its ``metadata_props``; written to a temporary file and renamed, so an
  entry is complete or absent;
- ``<key>.error.json``: the model could not be exported, or its worker died; the reason, and the
  versions of perfseer, torch, timm, torchvision, onnx and onnxscript.  The model is not tried again
  while those versions are the same, unless ``retry_failed`` (``--retry-failed``).  A missing
  optional dependency, a full disk or a lack of memory is never recorded;
- ``.<key>.<host>.<pid>.<random>.tmp``: a write in progress.  A build removes those left by a
  killed process (same host, process gone) and any older than an hour.

A build killed at any point (``kill -9``) loses only the exports in flight: the next run finds the
others in the cache.  The cache is not tied to one table or one output folder; delete the folder to
empty it.  Upgrading timm or torch does not invalidate exported skeletons (the key is the
reference): clear the cache if an architecture's definition changed.  Extraction (shape inference
and features, well under a second per model) is not cached: it runs again on every build.

**Workers**: models are built (export, extraction, re-binding) in ``workers`` processes (``spawn``,
each replaced after :data:`TASKS_PER_WORKER` models so that memory the exporter keeps is returned;
they exit when the build process dies); ``workers=0`` runs everything in this process.  A worker that dies (killed for memory, a crash in native code) does not
stop the build: the models it was building are run again one at a time in a fresh pool, and the
one that kills its worker alone is recorded as failed (and cached as failed, if exported).

**Outputs** in ``out`` (each written to a temporary file and renamed; ``manifest.json`` is
removed first and written last, so a folder without it holds an incomplete build):

- ``graphs.safetensors``: one PerfGraph per distinct built ``(model, input_shape, batch_size)``
  (:func:`perfseer.features.pyg.save_graphs`), metadata ``{model, input_shape, batch_size}``, in
  table order of ``(model, input_shape)``, batch sizes ascending;
- ``labels.parquet`` (with pyarrow) or ``labels.csv``: a measurement table of every row whose model
  was built, plus ``graph`` (index into the graph file), ``split``, ``family`` and
  ``family_split`` (:mod:`perfseer.data.splits`);
- ``failures.csv``: ``model, input_shape, stage, error, reason, rows`` for every model that could
  not be built (``stage``: ``export``, ``extract`` or ``worker``; ``rows``: table rows left out);
- ``manifest.json``: versions, the source table and its sha256, counts, the split rules and seed,
  the cache folder and the wall time.

Example::

    from perfseer.data.dataset import build_dataset

    report = build_dataset("runs.csv", "runs-dataset", workers=4, split_seed=0)
    report.failures  # DataFrame: model, input_shape, stage, error, reason, rows
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import multiprocessing
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from perfseer import __version__
from perfseer.data import splits
from perfseer.data.compact import COMPACT_FILE, CompactGraphs, pack
from perfseer.data.table import read_table, write_table
from perfseer.errors import MissingDependencyError, PerfseerError, SchemaError
from perfseer.features import schema
from perfseer.features.perfgraph import build_perfgraph
from perfseer.features.pyg import OP_VOCAB, load_graphs, op_type_ids, save_graphs
from perfseer.graph.extract import extract_graph, weight_work_enabled
from perfseer.graph.onnx_io import read_skeleton
from perfseer.shapes import parse_shape
from perfseer.sources import SCHEMES, choices, scheme_word, split_reference
from perfseer.sources.hf import is_local_config
from perfseer.sources.load import load_skeleton

# Version of what a cached skeleton holds; part of every cache key.  Bump it when the exporter or
# the stored metadata changes in a way that makes old entries wrong.
# Bump when exported skeletons change meaning (exporter settings, NAS-space builders, naming):
# cached entries under the old key are then rebuilt.
SKELETON_FORMAT = "2"
# Models one worker process exports before it is replaced (returning what the exporter keeps).
TASKS_PER_WORKER = 16
# Leftover temporary cache files older than this are removed whoever wrote them.
STALE_TEMP_S = 3600
DATASET_FORMAT = "perfseer.dataset"
DATASET_FORMAT_VERSION = 1
GRAPHS_FILE = "graphs.safetensors"
FAILURES_FILE = "failures.csv"
MANIFEST_FILE = "manifest.json"
FAILURE_COLUMNS = ("model", "input_shape", "stage", "error", "reason", "rows")
_META_PREFIX = "perfseer.cache."
_MAX_REASON = 1000
_ONNX_PATH = re.compile(r"[^\s'\"]*<model>[^\s'\"]*|[^\s'\"]+\.onnx\b")
# Packages whose version decides whether a recorded export failure still holds.
_VERSIONED = ("perfseer", "torch", "timm", "torchvision", "onnx", "onnxscript", "transformers")
_NOT_CACHED = ("example", "nb201", "fbnet")


def default_workers() -> int:
    """Worker processes used when none is asked for: the CPU count, at most 4 (each export holds a
    model's graph and the exporter's state, up to a few GiB for the largest timm models)."""
    return max(1, min(4, os.cpu_count() or 1))


def default_cache_dir() -> Path:
    """``$PERFSEER_CACHE/skeletons``, else ``${XDG_CACHE_HOME:-~/.cache}/perfseer/skeletons``."""
    root = os.environ.get("PERFSEER_CACHE")
    if root:
        return Path(root).expanduser() / "skeletons"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "perfseer" / "skeletons"


def exporter_versions() -> dict[str, str]:
    """The installed versions of perfseer and of the packages that export models (torch, timm,
    torchvision, onnx, onnxscript, transformers): what a cached export was made with."""
    return _versions()


def _versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def extraction_settings() -> dict:
    """How graphs are extracted now (recorded in a dataset's manifest and a predictor's card)."""

    return {"weight_work": weight_work_enabled()}


def dataset_extraction(manifest: dict) -> dict:
    """How a dataset's graphs were extracted: its manifest's ``extraction``, or, for a manifest
    written before that was recorded, folded work on weights unless ``scripts/refresh_graphs.py``
    rebuilt it with that work kept (its ``refreshed`` record)."""
    if isinstance(manifest.get("extraction"), dict):
        return {"weight_work": bool(manifest["extraction"].get("weight_work", False))}
    refreshed = any("weight computation kept" in str(r.get("why", "")) for r in manifest.get("refreshed", []))
    return {"weight_work": refreshed}


# -- the cache ---------------------------------------------------------------------------------------

class SkeletonCache:
    """The content-addressed skeleton cache (layout in the module docstring).

    Args:
        directory: the cache folder; created when first written.
    """

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    @staticmethod
    def key(reference: str, input_shape: str) -> str:
        blob = json.dumps([reference, input_shape, SKELETON_FORMAT], separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def skeleton_path(self, reference: str, input_shape: str) -> Path:
        return self.directory / f"{self.key(reference, input_shape)}.onnx"

    def error_path(self, reference: str, input_shape: str) -> Path:
        return self.directory / f"{self.key(reference, input_shape)}.error.json"

    def prepare(self) -> None:
        """Create the folder (or fail with a clear message) and remove abandoned temporary files."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            probe = self.directory / f".probe.{os.getpid()}.{secrets.token_hex(4)}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise PerfseerError(f"cannot use the skeleton cache folder {self.directory}: {e.strerror or e}",
                                "pass --cache DIR with a writable folder, or set PERFSEER_CACHE") from e
        self.clean_temp()

    def clean_temp(self) -> int:
        """Remove temporary files of writes that cannot finish any more; returns how many."""
        host, now, removed = socket.gethostname(), time.time(), 0
        for tmp in self.directory.glob(".*.tmp"):
            parts = tmp.name[1:-4].split(".")  # key, host, pid, random
            try:
                stale = now - tmp.stat().st_mtime > STALE_TEMP_S
                if not stale and len(parts) == 4 and parts[1] == host and parts[2].isdigit():
                    stale = not _pid_alive(int(parts[2]))
                if stale:
                    tmp.unlink()
                    removed += 1
            except OSError:
                continue  # removed by another build meanwhile
        return removed

    def _write(self, path: Path, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        key = path.name.split(".")[0]
        tmp = self.directory / f".{key}.{socket.gethostname()}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def get(self, reference: str, input_shape: str):
        """The cached :class:`~perfseer.graph.onnx_io.Skeleton`, or ``None``.  An unreadable entry, or
        one recorded for another reference, is removed and counts as absent."""

        path = self.skeleton_path(reference, input_shape)
        if not path.is_file():
            return None
        try:
            skel = read_skeleton(path)
        except PerfseerError:
            path.unlink(missing_ok=True)
            return None
        meta = {p.key[len(_META_PREFIX):]: p.value for p in skel.model.metadata_props if p.key.startswith(_META_PREFIX)}
        recorded = (meta.get("reference"), meta.get("input_shape"), meta.get("format"))
        if recorded != (reference, input_shape, SKELETON_FORMAT):
            path.unlink(missing_ok=True)
            return None
        skel.source = reference
        skel.input_shape_applied = meta.get("input_shape_applied") == "1"
        try:  # recently used, pruned last (prune): its access time, not its modification time (the write's)
            os.utime(path, ns=(time.time_ns(), path.stat().st_mtime_ns))
        except OSError:
            pass
        return skel

    def prune(self, max_bytes: int) -> int:
        """Remove the least recently used skeletons (by access time, which :meth:`get` sets) until
        the folder holds at most ``max_bytes`` of them; returns how many were removed (entries
        removed meanwhile by another process are skipped)."""
        entries = []
        for f in self.directory.glob("*.onnx"):
            try:
                st = f.stat()
            except OSError:
                continue
            entries.append((max(st.st_atime, st.st_mtime), st.st_size, f))
        total, removed = sum(e[1] for e in entries), 0
        for _, size, f in sorted(entries):
            if total <= max_bytes:
                break
            try:
                f.unlink()
            except OSError:
                continue
            total -= size
            removed += 1
        return removed

    def put(self, reference: str, input_shape: str, skel) -> None:
        """Store ``skel`` (before extraction, which modifies it) and drop a recorded failure."""
        props = skel.model.metadata_props
        keep = [(p.key, p.value) for p in props if not p.key.startswith(_META_PREFIX)]
        del props[:]
        for k, v in (*keep, (_META_PREFIX + "reference", reference), (_META_PREFIX + "input_shape", input_shape),
                     (_META_PREFIX + "format", SKELETON_FORMAT),
                     (_META_PREFIX + "input_shape_applied", "1" if skel.input_shape_applied else "0")):
            entry = props.add()
            entry.key, entry.value = k, v
        self._write(self.skeleton_path(reference, input_shape), skel.model.SerializeToString())
        self.error_path(reference, input_shape).unlink(missing_ok=True)

    def get_error(self, reference: str, input_shape: str) -> dict | None:
        """The recorded export failure, if it was recorded with the installed versions."""
        path = self.error_path(reference, input_shape)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("versions") != _versions():
            return None
        return record

    def put_error(self, reference: str, input_shape: str, error: str, reason: str, stage: str = "export") -> None:
        record = {"reference": reference, "input_shape": input_shape, "format": SKELETON_FORMAT,
                  "stage": stage, "error": error, "reason": reason, "versions": _versions(),
                  "time": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        self._write(self.error_path(reference, input_shape), json.dumps(record, indent=1).encode())


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would send CTRL_C_EVENT; rely on the age rule there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: alive, another user's
        return True
    return True


# -- one (model, input_shape): the work of a worker -----------------------------------------------

@dataclass(frozen=True)
class BuildTask:
    """One distinct ``(model, input_shape)`` of the table and the batch sizes it is measured at.

    Attributes:
        model: the reference as written in the table.
        input_shape: the table's ``input_shape`` text (``3x224x224``).
        batches: distinct batch sizes, ascending.
        path: for an ``.onnx`` reference, the resolved file; else ``None``.
        exported: the reference is exported (and cached); ``False`` for files and ``example:``.
        unsupported: why the reference cannot be built by this perfseer, or ``""``.
        cache_dir: the skeleton cache (``None``: no cache).
        retry_failed: try models recorded as failed again.
    """

    model: str
    input_shape: str
    batches: tuple[int, ...]
    path: str | None = None
    exported: bool = False
    unsupported: str = ""
    cache_dir: str | None = None
    retry_failed: bool = False


@dataclass
class Failure:
    stage: str  # export, extract, worker
    error: str  # exception class name
    reason: str  # its one-line message
    cached: bool = False  # recorded by an earlier run (not tried again)

    @classmethod
    def of(cls, stage: str, e: BaseException) -> "Failure":
        text = " ".join(str(e).split()) or type(e).__name__
        if len(text) > _MAX_REASON:  # exporters can put a whole graph dump in a message
            text = text[: _MAX_REASON - 3] + "..."
        return cls(stage, type(e).__name__, text)


@dataclass
class BuildResult:
    """What a worker returns: the graphs as plain arrays (cheap to send between processes)."""

    task: BuildTask
    graphs: list[tuple[int, dict[str, np.ndarray]]] = field(default_factory=list)
    failure: Failure | None = None
    exported: bool = False  # an export ran
    from_cache: bool = False  # the skeleton came from the cache
    cache_warning: str = ""  # the skeleton could not be stored (the build goes on)
    seconds: float = 0.0


def _arrays(pg) -> dict[str, np.ndarray]:
    return {"x": pg.x.astype(np.float32), "edge_index": np.ascontiguousarray(pg.edge_index, dtype=np.int64),
            "edge_attr": pg.edge_attr.astype(np.float32), "u": pg.u.astype(np.float32)[None, :],
            "op_type": op_type_ids(pg.op_types)}


def _load(task: BuildTask):
    if task.unsupported:
        raise PerfseerError(task.unsupported, "remove these rows, or convert the models to ONNX files")
    return load_skeleton(task.path or task.model, input_shape=parse_shape(task.input_shape))


def _recordable(e: BaseException) -> bool:
    """An export failure that will happen again with the same versions (worth recording)."""
    return not isinstance(e, (MissingDependencyError, MemoryError, OSError, KeyboardInterrupt))


def build_pair(task: BuildTask) -> BuildResult:
    """Build the PerfGraphs of one ``(model, input_shape)`` at every batch size of ``task``.

    Never raises for a model that cannot be built: the result carries the failure instead.
    Runs in a worker process (or in the main one with ``workers=0``).
    """

    start = time.perf_counter()
    result = BuildResult(task)
    cache = SkeletonCache(task.cache_dir) if task.exported and task.cache_dir else None
    skel = None
    if cache is not None:
        if not task.retry_failed:
            record = cache.get_error(task.model, task.input_shape)
            if record is not None:
                result.failure = Failure(str(record.get("stage", "export")), str(record.get("error", "")),
                                         str(record.get("reason", "")), cached=True)
                return result
        skel = cache.get(task.model, task.input_shape)
        result.from_cache = skel is not None
    if skel is None:
        try:
            result.exported = task.exported
            skel = _load(task)
        except Exception as e:  # noqa: BLE001 - exporters raise anything; the build goes on
            result.failure = Failure.of("export", e)
            if cache is not None and _recordable(e):
                try:
                    cache.put_error(task.model, task.input_shape, result.failure.error, result.failure.reason)
                except OSError as oe:
                    result.cache_warning = f"cannot record the failure: {oe}"
            result.seconds = time.perf_counter() - start
            return result
        if cache is not None:
            try:
                cache.put(task.model, task.input_shape, skel)
            except OSError as e:
                result.cache_warning = f"cannot store the skeleton: {e}"
    try:
        shape = None if skel.input_shape_applied else parse_shape(task.input_shape)
        first = build_perfgraph(extract_graph(skel, batch=task.batches[0], input_shape=shape))
        result.graphs = [(b, _arrays(first if i == 0 else first.with_batch(b))) for i, b in enumerate(task.batches)]
    except Exception as e:  # noqa: BLE001 - reported in failures.csv with its type and message
        result.graphs = []
        result.failure = Failure.of("extract", e)
    result.seconds = time.perf_counter() - start
    return result


# -- running tasks in worker processes ------------------------------------------------------------

def _init_worker() -> None:
    # Ctrl-C is for the main process, which shuts the pool down; the exporter needs no threads.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    parent = multiprocessing.parent_process()
    if parent is not None:  # a build killed with kill -9 must not leave its workers running
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent) -> None:
    parent.join()  # returns when the parent process is gone
    os._exit(1)


def _crashed(task: BuildTask) -> BuildResult:
    return BuildResult(task, failure=Failure(
        "worker", "WorkerCrash",
        "the worker process died while building this model alone (killed, out of memory, or a crash "
        "in native code)"))


def _terminate_workers(pool) -> None:
    # ProcessPoolExecutor has no public way to stop running tasks before Python 3.14
    # (terminate_workers); without this, Ctrl-C would wait for every export in flight.
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            process.terminate()
        except (OSError, ValueError, AttributeError):
            pass


def run_tasks(tasks: Iterable[BuildTask], workers: int, fn: Callable[[BuildTask], BuildResult] = build_pair,
              tasks_per_worker: int = TASKS_PER_WORKER) -> Iterator[BuildResult]:
    """Run ``fn`` on every task, yielding results as they complete (in any order).

    ``workers=0`` runs in this process.  Otherwise a ``spawn`` process pool runs them; when a worker
    dies, the tasks that were in flight are run again one at a time in a new pool, and a task that
    kills its worker alone yields a ``worker`` failure.  ``fn`` must be importable by name.
    """
    if workers <= 0:
        for task in tasks:
            yield fn(task)
        return

    context = multiprocessing.get_context("spawn")
    extra = {"max_tasks_per_child": tasks_per_worker} if sys.version_info >= (3, 11) else {}
    queue, suspects = deque(tasks), deque()
    while queue or suspects:
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker, **extra)
        in_flight: dict = {}
        broken: list[BuildTask] = []
        finished = False
        try:
            while True:
                if suspects:  # alone, so that a crash names its cause
                    if not in_flight:
                        task = suspects.popleft()
                        in_flight[pool.submit(fn, task)] = task
                else:  # a short queue per worker keeps results flowing and little work at risk
                    while queue and len(in_flight) < 2 * workers:
                        task = queue.popleft()
                        in_flight[pool.submit(fn, task)] = task
                if not in_flight:
                    break
                done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for fut in done:
                    task = in_flight.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        broken.append(task)
                        continue
                    except Exception as e:  # noqa: BLE001 - e.g. a result that cannot be sent back
                        result = BuildResult(task, failure=Failure.of("worker", e))
                    yield result
                if broken:
                    broken.extend(in_flight.values())
                    in_flight.clear()
                    break
            finished = True
        finally:
            if not finished:  # interrupted, or the consumer stopped: do not wait for running exports
                _terminate_workers(pool)
            pool.shutdown(wait=finished and not broken, cancel_futures=True)
        if len(broken) == 1:
            yield _crashed(broken[0])
        else:
            suspects.extend(broken)


# -- the build ------------------------------------------------------------------------------------

@dataclass
class BuildReport:
    """What :func:`build_dataset` did.

    Attributes:
        out: the output folder.
        labels_path: ``labels.parquet`` or ``labels.csv`` in it.
        failures: one row per model that could not be built (:data:`FAILURE_COLUMNS`).
        manifest: the contents of ``manifest.json``.
        cache_warnings: skeletons that could not be stored in the cache.
    """

    out: Path
    labels_path: Path
    failures: object  # pandas.DataFrame
    manifest: dict
    cache_warnings: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict:
        return self.manifest["counts"]


def _unsupported(model: str) -> str:
    scheme = scheme_word(model)
    if scheme is not None and scheme not in SCHEMES:
        return f"this perfseer cannot build {scheme}: references (it builds {choices()} and .onnx files)"
    return ""


def _resolve(model: str, table_dir: Path) -> str:
    path = Path(model).expanduser()
    if path.is_absolute():
        return str(path)
    beside = table_dir / path
    return str(beside if beside.exists() or not path.exists() else path.resolve())


def make_tasks(table, table_dir: Path, cache_dir: Path | None, retry_failed: bool = False) -> list[BuildTask]:
    """One :class:`BuildTask` per distinct ``(model, input_shape)`` of a validated table, in table order."""
    tasks = []
    groups = table.groupby(["model", "input_shape"], sort=False)["batch_size"]
    for (model, shape), batches in groups:
        model, shape = str(model), str(shape)
        unsupported = _unsupported(model)
        ref = split_reference(model)
        is_file = ref is None and not unsupported
        # example: files and nb201: graphs (emitted directly as ONNX) cost milliseconds: not cached.
        exported = ref is not None and ref[0] not in _NOT_CACHED
        if exported and ref[0] == "hf":
            # a local config.json can change under the same path: export it every time
            cached = not is_local_config(ref[1])
        else:
            cached = exported
        tasks.append(BuildTask(model, shape, tuple(sorted(int(b) for b in batches.unique())),
                               path=_resolve(model, table_dir) if is_file else None, exported=exported,
                               unsupported=unsupported, cache_dir=str(cache_dir) if cached and cache_dir else None,
                               retry_failed=retry_failed))
    return tasks


def _parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _to_data(arrays: dict[str, np.ndarray]):
    import torch  # deferred: heavy, loaded on first use
    from torch_geometric.data import Data  # deferred: heavy, loaded on first use

    return Data(x=torch.from_numpy(arrays["x"]), edge_index=torch.from_numpy(arrays["edge_index"]),
                edge_attr=torch.from_numpy(arrays["edge_attr"]), u=torch.from_numpy(arrays["u"]),
                op_type=torch.from_numpy(arrays["op_type"]), num_nodes=int(arrays["x"].shape[0]))


Progress = Callable[[int, int, dict], None]


def build_dataset(table: str | os.PathLike, out: str | os.PathLike, workers: int | None = None,
                  cache: str | os.PathLike | None = None, split_seed: int = 0, retry_failed: bool = False,
                  ratios=None, progress: Progress | None = None, compact: bool = False) -> BuildReport:
    """Build the graph dataset of a measurement table (see the module docstring for the files).

    Args:
        table: a measurement table (CSV or Parquet), read with :func:`perfseer.data.table.read_table`.
        out: the output folder (created; files of an earlier build in it are replaced).
        workers: worker processes for the models; ``0``: in this process; default
            :func:`default_workers`.
        cache: the skeleton cache folder; default :func:`default_cache_dir`.
        split_seed: seed of the architecture and family splits.
        retry_failed: try again models whose export failed in an earlier run.
        ratios: train/val/test ratios, default :data:`perfseer.data.splits.DEFAULT_RATIOS` (2:1:1).
        progress: called as ``progress(done, total, counts)`` after each model, ``counts`` holding
            ``exported``, ``cached``, ``read`` and ``failed``.
        compact: write the graphs as ``graphs.npz`` in the compact format
            (:mod:`perfseer.data.compact`: tens to hundreds of times smaller, same graphs).

    Returns:
        A :class:`BuildReport`.  A model that cannot be built is in ``failures`` and
        ``failures.csv``, never silently dropped.

    Raises:
        TableError: the table is missing or invalid.
        PerfseerError: the output or cache folder cannot be written.
    """
    import pandas as pd  # deferred: heavy, loaded on first use

    start = time.perf_counter()
    table_path = Path(table)
    df = read_table(table_path)
    workers = default_workers() if workers is None else int(workers)
    ratios = tuple(splits.DEFAULT_RATIOS if ratios is None else ratios)
    split_info = splits.describe(split_seed, ratios)  # checks the ratios before any work
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / MANIFEST_FILE).unlink(missing_ok=True)  # from here on, the folder is incomplete
    except OSError as e:
        raise PerfseerError(f"cannot write the dataset folder {out}: {e.strerror or e}",
                            "pass --out with a writable folder") from e
    cache_dir = Path(cache).expanduser() if cache is not None else default_cache_dir()
    tasks = make_tasks(df, table_path.resolve().parent, cache_dir, retry_failed)
    if any(t.exported for t in tasks):
        SkeletonCache(cache_dir).prepare()

    results: dict[tuple[str, str], BuildResult] = {}
    counts = {"exported": 0, "cached": 0, "read": 0, "failed": 0}
    warnings: list[str] = []
    if progress is not None:
        progress(0, len(tasks), dict(counts))
    # Exports can leave a worker holding GBs: recycle workers often.  Reading files and emitting
    # nb201 graphs takes milliseconds and little memory, and a new spawned worker costs seconds.
    per_worker = TASKS_PER_WORKER if any(t.exported for t in tasks) else 100 * TASKS_PER_WORKER
    for res in run_tasks(tasks, workers, tasks_per_worker=per_worker):
        task = res.task
        if res.failure is not None and res.failure.stage == "worker" and task.exported and task.cache_dir \
                and res.failure.error == "WorkerCrash":
            try:
                SkeletonCache(task.cache_dir).put_error(task.model, task.input_shape, res.failure.error,
                                                        res.failure.reason, stage="worker")
            except OSError:
                pass
        results[(task.model, task.input_shape)] = res
        if res.cache_warning:
            warnings.append(f"{task.model} ({task.input_shape}): {res.cache_warning}")
        if res.failure is not None:
            counts["failed"] += 1
        elif res.from_cache:
            counts["cached"] += 1
        elif res.exported:
            counts["exported"] += 1
        else:
            counts["read"] += 1
        if progress is not None:
            progress(len(results), len(tasks), dict(counts))

    # graphs, in table order of (model, input_shape), batches ascending
    datas, meta, index = [], [], {}
    rows_per_pair = df.groupby(["model", "input_shape"], sort=False).size()
    failures = []
    for task in tasks:
        res = results[(task.model, task.input_shape)]
        if res.failure is not None:
            f = res.failure
            reason = f.reason + (" (recorded by an earlier run; --retry-failed tries again)" if f.cached else "")
            failures.append((task.model, task.input_shape, f.stage, f.error, reason,
                             int(rows_per_pair[(task.model, task.input_shape)])))
            continue
        for batch, arrays in res.graphs:
            index[(task.model, task.input_shape, batch)] = len(datas)
            datas.append(_to_data(arrays))
            meta.append({"model": task.model, "input_shape": task.input_shape, "batch_size": batch})
    failures = pd.DataFrame(failures, columns=list(FAILURE_COLUMNS))

    keys = list(zip(df["model"].astype(str), df["input_shape"].astype(str), df["batch_size"].astype(int)))
    graph = np.array([index.get(k, -1) for k in keys], dtype=np.int64)
    labels = df.loc[graph >= 0].reset_index(drop=True)
    labels["graph"] = graph[graph >= 0]
    split_cols = splits.assign_splits(labels["model"], split_seed, ratios)
    for c in split_cols.columns:
        labels[c] = split_cols[c].to_numpy()

    parquet = _parquet_available()
    labels_path = out / ("labels.parquet" if parquet else "labels.csv")

    graphs_name = COMPACT_FILE if compact else GRAPHS_FILE
    compact_counts = None
    try:
        if compact:
            compact_counts = pack(datas, meta, out / COMPACT_FILE, OP_VOCAB)
        else:
            save_graphs(datas, out / GRAPHS_FILE, meta=meta)
        (out / (GRAPHS_FILE if compact else COMPACT_FILE)).unlink(missing_ok=True)  # an earlier build's
        write_table(labels, labels_path)
        (out / ("labels.csv" if parquet else "labels.parquet")).unlink(missing_ok=True)  # an earlier build's
        _atomic_text(out / FAILURES_FILE, failures.to_csv(index=False))
    except OSError as e:
        raise PerfseerError(f"cannot write the dataset folder {out}: {e.strerror or e}",
                            "pass --out with a writable folder") from e

    def per_split(column):
        present = labels.dropna(subset=[column])
        return {"models": {s: int(present.loc[present[column] == s, "model"].nunique()) for s in splits.SPLITS},
                "rows": {s: int((present[column] == s).sum()) for s in splits.SPLITS}}

    split_info["split"].update(per_split("split"))
    split_info["family_split"].update(per_split("family_split"),
                                      families=int(labels["family"].dropna().nunique()))
    manifest = {
        "format": DATASET_FORMAT, "format_version": DATASET_FORMAT_VERSION,
        "perfseer_version": __version__, "schema_version": schema.SCHEMA_VERSION,
        "skeleton_format": SKELETON_FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "table": {"path": str(table_path.resolve()), "sha256": _sha256(table_path), "rows": int(len(df))},
        "files": {"graphs": graphs_name, "labels": labels_path.name, "failures": FAILURES_FILE},
        "counts": {
            "rows": int(len(df)), "rows_labelled": int(len(labels)), "rows_left_out": int(len(df) - len(labels)),
            "models": int(df["model"].nunique()), "model_shapes": len(tasks),
            "model_shapes_built": len(tasks) - len(failures), "model_shapes_failed": int(len(failures)),
            "graphs": len(datas), **{f"model_shapes_{k}": v for k, v in counts.items() if k != "failed"},
        },
        "splits": split_info,
        **({"compact": compact_counts} if compact else {}),
        "cache": str(cache_dir), "workers": workers, "retry_failed": bool(retry_failed),
        "versions": _versions(),
        "extraction": extraction_settings(),
        "wall_time_s": round(time.perf_counter() - start, 3),
    }
    _atomic_text(out / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
    return BuildReport(out, labels_path, failures, manifest, warnings)


def failure_summary(failures) -> list[tuple[str, int, int, str]]:
    """Failures grouped by reason: ``(stage: reason, models, rows, an example model)``, most
    models first.  The model's own name in a reason is replaced by ``<model>`` so that, e.g., every
    unknown timm name falls in one group."""
    groups: dict[str, list] = {}
    for row in failures.itertuples(index=False):
        reason = str(row.reason).split("; fix: ")[0]
        name = str(row.model).partition(":")[2] if ":" in str(row.model) else ""
        for text in (str(row.model), name):
            if text:
                reason = reason.replace(text, "<model>")
        reason = _ONNX_PATH.sub("<model>", reason)
        key = f"{row.stage}: {reason}"
        g = groups.setdefault(key, [0, 0, str(row.model)])
        g[0] += 1
        g[1] += int(row.rows)
    return sorted(((k, n, r, ex) for k, (n, r, ex) in groups.items()), key=lambda g: (-g[1], g[0]))


@dataclass
class GraphDataset:
    """A built graph dataset, as :func:`load_dataset` returns it.

    Attributes:
        graphs: a sequence of ``torch_geometric.data.Data`` (``graphs[i]``; a compact dataset builds
            each graph when it is asked for).
        labels: the measurement rows, with ``graph`` (index into ``graphs``), ``split``, ``family``
            and ``family_split``.
        manifest: the build's ``manifest.json``.
        path: the folder.
    """

    graphs: object
    labels: object
    manifest: dict
    path: Path


def load_dataset(path: str | os.PathLike) -> GraphDataset:
    """Load a dataset folder written by :func:`build_dataset` or :func:`compact_dataset`.

    Raises:
        SchemaError: the folder is missing, incomplete (no manifest: a build did not finish) or its
            files are unreadable or of another feature schema.
    """

    path = Path(path)
    if not path.is_dir():
        raise SchemaError(f"dataset folder {path} does not exist",
                          "pass a folder written by perfseer data build (or a bundled dataset name)")
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text())
    except FileNotFoundError:
        raise SchemaError(f"{path} has no {MANIFEST_FILE}: its build did not finish",
                          "run perfseer data build again (it resumes from its cache)") from None
    except (OSError, ValueError) as e:
        raise SchemaError(f"{path / MANIFEST_FILE} is unreadable ({e})", "rebuild the dataset") from e
    if manifest.get("format") != DATASET_FORMAT:
        raise SchemaError(f"{path} is not a perfseer dataset", "pass a folder written by perfseer data build")
    graphs_file = path / manifest["files"]["graphs"]
    graphs = CompactGraphs(graphs_file) if graphs_file.suffix == ".npz" else load_graphs(graphs_file)[0]
    labels = read_table(path / manifest["files"]["labels"])
    return GraphDataset(graphs, labels, manifest, path)


def compact_dataset(source: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Copy a built dataset into ``out`` with its graphs in the compact format
    (:mod:`perfseer.data.compact`); labels, failures and manifest are copied alongside.

    Returns the counts of :func:`perfseer.data.compact.pack`, also stored in the manifest.
    """

    source, out = Path(source), Path(out)
    ds = load_dataset(source)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)
    graphs, meta = load_graphs(source / ds.manifest["files"]["graphs"])  # op ids re-mapped to OP_VOCAB
    counts = pack(graphs, meta, out / COMPACT_FILE, OP_VOCAB)
    for name in (ds.manifest["files"]["labels"], FAILURES_FILE):
        if (source / name).resolve() != (out / name).resolve():
            shutil.copyfile(source / name, out / name)
    manifest = dict(ds.manifest)
    manifest["files"] = dict(manifest["files"], graphs=COMPACT_FILE)
    manifest["compact"] = counts
    _atomic_text(out / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
    return counts


# Datasets committed with the repository (compact format), found by name by the training commands.
BUNDLED_DATASETS = Path(__file__).resolve().parents[3] / "datasets"


def resolve_dataset(name_or_path: str | os.PathLike) -> Path:
    """A dataset folder: ``name_or_path`` itself, or a dataset committed under ``datasets/``.

    Raises:
        SchemaError: neither exists (the message lists the committed datasets).
    """

    p = Path(name_or_path)
    if p.is_dir():
        return p
    if (BUNDLED_DATASETS / str(name_or_path) / MANIFEST_FILE).is_file():
        return BUNDLED_DATASETS / str(name_or_path)
    names = sorted(d.name for d in BUNDLED_DATASETS.glob("*") if (d / MANIFEST_FILE).is_file()) \
        if BUNDLED_DATASETS.is_dir() else []
    raise SchemaError(f"no dataset folder or committed dataset named {name_or_path}",
                      f"pass a folder written by perfseer data build, or one of: {', '.join(names) or 'none'}")
