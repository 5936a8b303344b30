"""The PerfGraphs a service has extracted: an LRU cache keyed by (model, its content hash, input
shape, dims, sequence length), bounded in entries and in graph nodes (a node costs about a kilobyte
held, so the node bound is the memory bound), filled through the sandbox, with concurrent
requests for the same key sharing one extraction."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from perfseer.errors import ModelLoadError, PerfseerError
from perfseer.serve.jobs import extract_job
from perfseer.serve.sandbox import Sandbox
from perfseer.sources import scheme_word, split_reference, unknown_scheme
from perfseer.sources.hf import is_shipped
from perfseer.sources.schemes import examples

UPLOAD_PREFIX = "upload:"


class ModelStore:
    """Resolves the model references a client may use to something :func:`perfseer.extract` reads.

    References (``timm:``, ``torchvision:``, ``example:``, ``nb201:``...) pass through; ``upload:SHA``
    names a file uploaded to this service; a path is accepted only inside ``models_dir`` (None:
    refused), so that a client cannot make the service read arbitrary files.
    """

    def __init__(self, upload_dir: str | os.PathLike, models_dir: str | os.PathLike | None = None,
                 max_uploads: int = 64):
        self.upload_dir = Path(upload_dir)
        self.upload_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.upload_dir, 0o700)  # private to the service's user, whatever umask made it
        self.models_dir = Path(models_dir).resolve() if models_dir else None
        self.max_uploads = max_uploads
        self._lock = threading.Lock()
        self._digests: dict = {}  # served file -> (its stat signature, the SHA-256 of its content)

    def add_upload(self, chunks) -> str:
        """Store an uploaded ONNX file (an iterable of byte chunks); its ``upload:SHA256`` name."""
        h = hashlib.sha256()
        tmp = self.upload_dir / f".incoming-{os.getpid()}-{threading.get_ident()}-{id(chunks)}"
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                for chunk in chunks:
                    h.update(chunk)
                    f.write(chunk)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        digest = h.hexdigest()
        final = self.upload_dir / f"{digest}.onnx"
        os.replace(tmp, final)
        with self._lock:
            files = sorted(self.upload_dir.glob("*.onnx"), key=lambda p: p.stat().st_mtime)
            for old in files[: max(0, len(files) - self.max_uploads)]:
                if old != final:
                    old.unlink(missing_ok=True)
        return UPLOAD_PREFIX + digest

    def discard(self, ref: str) -> None:
        """Delete the uploaded file of ``ref`` (``upload:SHA256``): an upload that was refused."""
        digest = ref[len(UPLOAD_PREFIX):] if ref.startswith(UPLOAD_PREFIX) else ""
        if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
            (self.upload_dir / f"{digest}.onnx").unlink(missing_ok=True)

    def version(self, target: str) -> str:
        """What identifies the content behind a resolved ``target``: the SHA-256 of an upload (its
        name) or of a served file (hashed again only when its size, time or inode change), ``""``
        for a reference (``timm:``...).  Part of every cache key, so that a served file replaced
        in place is extracted again instead of answering from the old graph."""
        path = Path(target)
        if path.parent == self.upload_dir and path.suffix == ".onnx":
            return path.stem
        if self.models_dir is None or self.models_dir not in path.parents:
            return ""
        try:
            st = path.stat()
        except OSError:
            return ""  # gone: the extraction will say so
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            known = self._digests.get(target)
        if known is not None and known[0] == sig:
            return known[1]
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        with self._lock:
            if len(self._digests) > 4096:
                self._digests.clear()
            self._digests[target] = (sig, h.hexdigest())
        return h.hexdigest()

    def resolve(self, model: str) -> str:
        """What :func:`perfseer.extract` reads for ``model``, or the one refusal :func:`not_served`.

        Served: bundled examples by name (no separator, no ``..``), zoo models by plain name, the
        encodings of the NAS spaces, the shipped ``hf:`` configurations (never a local path),
        ``upload:SHA256`` and ``.onnx`` files inside ``models_dir``.  Every other reference gets the
        same message, whatever exists on the host, so that an answer tells nothing of its files.
        """
        if not isinstance(model, str) or not model.strip():
            raise ModelLoadError("no model given", "pass a reference such as timm:resnet50, or upload an ONNX file")
        model = model.strip()
        if len(model) > MAX_REFERENCE or "\0" in model:
            raise not_served()
        if model.startswith(UPLOAD_PREFIX):
            digest = model[len(UPLOAD_PREFIX):]
            if not (len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)):
                raise not_served()
            path = self.upload_dir / f"{digest}.onnx"
            if not path.is_file():
                raise ModelLoadError(f"no uploaded model '{model}' on this server (uploads are kept for the "
                                     f"latest {self.max_uploads})", "upload the file again (POST /v1/models)")
            return str(path)
        split = split_reference(model)
        if split is not None:
            if not _served_reference(*split):
                raise not_served()
            return model
        kind = scheme_word(model)
        if kind is not None:
            raise unknown_scheme(kind, ", or upload the file")
        if self.models_dir is None:
            raise not_served()
        try:
            path = (self.models_dir / model).resolve()
            ok = self.models_dir in path.parents and path.suffix == ".onnx" and path.is_file()
        except (OSError, ValueError, RuntimeError):
            ok = False
        if not ok:
            raise not_served()
        return str(path)


#: The longest model reference a service reads (``space:`` configurations are the long ones).
MAX_REFERENCE = 4096
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,199}")  # a zoo or example name: no separator, no ".."


def not_served() -> ModelLoadError:
    """The one refusal of every reference a service does not serve (the same words whatever the
    reference and whatever exists on the host)."""
    return ModelLoadError("this server does not serve that model reference",
                          "use example:NAME, timm:NAME, torchvision:NAME, a shipped hf:NAME (GET /v1/models "
                          "lists them), a NAS encoding (nb201:, fbnet:, ofa:, space:), an upload (POST /v1/models "
                          "answers upload:SHA256) or a file of the served folder by relative path")


def _served_reference(kind: str, name: str) -> bool:
    """Whether ``kind:name`` is a reference a service may build (no path of the host behind it)."""
    if kind == "example":
        return _PLAIN.fullmatch(name) is not None and ".." not in name and name in examples()
    if kind in ("timm", "torchvision"):  # a plain name: no hf-hub:, no local file
        return _PLAIN.fullmatch(name) is not None and ".." not in name
    if kind == "hf":
        return is_shipped(name)
    return kind in ("nb201", "fbnet", "ofa", "space")  # encodings, parsed by their space


@dataclass
class GraphEntry:
    """One extracted graph: the PerfGraph at batch 1, a token unique to this extraction (what the
    row cache keys on) and its summary (computed on first use)."""

    pg: object
    token: int
    summary: dict | None = None


class GraphCache:
    """``get(model, input_shape, dims, seq_len=)`` -> PerfGraph at batch 1, extracted at most once per key.

    Args:
        sandbox: where extraction runs.
        store: resolves references, uploads and served paths.
        size: entries kept (least recently used dropped first).
        max_nodes: graph nodes kept in all (least recently used dropped first until the rest fit);
            a graph larger than this is answered but not kept (the next request extracts it again).
        on_evict: called with an entry's token when it is dropped (the service drops its rows).
    """

    def __init__(self, sandbox: Sandbox, store: ModelStore, size: int = 64, on_evict=None,
                 max_nodes: int = 2_000_000):
        self.sandbox, self.store, self.size, self.on_evict = sandbox, store, size, on_evict
        self.max_nodes = max_nodes
        self.nodes = 0  # graph nodes held
        self._items: OrderedDict = OrderedDict()
        self._inflight: dict = {}
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self.hits = self.misses = 0

    def get(self, model: str, input_shape=None, dims=None, wait_s: float | None = None, seq_len=None,
            weight_work=None):
        """The PerfGraph and whether it came from the cache."""
        entry, cached = self.entry(model, input_shape, dims, wait_s, seq_len, weight_work)
        return entry.pg, cached

    def entry(self, model: str, input_shape=None, dims=None, wait_s: float | None = None,
              seq_len=None, weight_work=None) -> tuple[GraphEntry, bool]:
        """The :class:`GraphEntry` and whether it came from the cache (``weight_work``: extract with
        the work on weights kept or folded, as a predictor's card says; ``None``: the server's default)."""
        from perfseer.graph.extract import weight_work_enabled  # deferred: loads onnx

        target = self.store.resolve(model)
        if weight_work is None:  # the default, named: one key per graph the extraction gives
            weight_work = weight_work_enabled()
        key = (target, self.store.version(target), tuple(input_shape) if input_shape else None,
               tuple(sorted((dims or {}).items())), seq_len, weight_work)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key], True
            waiter = self._inflight.get(key)
            owner = waiter is None
            if owner:
                waiter = self._inflight[key] = {"done": threading.Event(), "value": None, "error": None}
            self.misses += 1
        if not owner:
            waiter["done"].wait()
            if waiter["error"] is not None:
                raise waiter["error"]
            return waiter["value"], True
        try:
            pg = self.sandbox.run(extract_job, target, tuple(input_shape) if input_shape else None, dims, seq_len,
                                  weight_work, wait_s=wait_s)
            entry = waiter["value"] = GraphEntry(pg, next(self._tokens))
            evicted = []
            nodes = _nodes(pg)
            with self._lock:
                if nodes <= self.max_nodes:  # else answered, not kept: one graph may not fill the cache
                    self._items[key] = entry
                    self.nodes += nodes
                while len(self._items) > self.size or self.nodes > self.max_nodes:
                    old = self._items.popitem(last=False)[1]
                    self.nodes -= _nodes(old.pg)
                    evicted.append(old)
            for old in evicted:
                if self.on_evict is not None:
                    self.on_evict(old.token)
            return entry, False
        except Exception as e:  # shared with the requests waiting on the same key
            if target != model and isinstance(e, PerfseerError):  # never show the server's own paths
                e.problem = e.problem.replace(target, model)
                e.args = (f"{e.problem}; fix: {e.fix}" if e.fix else e.problem,)
            waiter["error"] = e
            raise
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            waiter["done"].set()

    def __len__(self) -> int:
        return len(self._items)


def _nodes(pg) -> int:
    """What a cached graph counts against :attr:`GraphCache.max_nodes` (at least 1)."""
    return max(1, int(getattr(pg, "num_nodes", 0) or 0))
