"""A warm process that ``perfseer predict`` and ``perfseer compare`` hand their question to, so that
a second call does not import torch and PyTorch Geometric or load the cards again (and a comparison
asked again, at another precision or phase, reuses the model's graph and simulated memory).

A ``perfseer predict`` call first asks a warm process of the same installation and environment
(a Unix socket in a private folder).  Without one, it answers in its own process as before and
then starts one in the background for the next call; the warm process exits after
``PERFSEER_WARM_IDLE`` seconds without a question (default 600).  Where the process was started
but is not listening yet, a call waits for it (at most :data:`STARTUP_WAIT_S`) rather than import
everything a second time beside it.

The warm process answers through :func:`perfseer.predict` exactly as the calling process would:
same code (its key covers perfseer's files), same environment (every ``PERFSEER_*`` variable, the
cache folders, the Python path), the caller's working folder for relative paths.  A refusal comes
back as the same error; anything else that goes wrong there makes the call answer in its own
process.  Messages are JSON (never pickle); the socket's folder is the user's alone (mode 0700,
checked before use) and the process answers only its own user (``SO_PEERCRED``).

``PERFSEER_WARM=0`` turns it off (no warm process is used or started); ``python -m
perfseer.cli.warm stop`` stops the one of the current environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from perfseer.errors import PerfseerError

WARM_ENV = "PERFSEER_WARM"  # 0: never use or start a warm process
IDLE_ENV = "PERFSEER_WARM_IDLE"  # seconds a warm process waits for the next question
DEFAULT_IDLE_S = 600.0
STARTUP_WAIT_S = 30.0  # how long a call waits for a warm process that is starting
MAX_MESSAGE = 64 * 2**20  # bytes of one message (answers of many batch sizes and devices fit)
MAX_RSS_BYTES = 3 * 2**30  # a warm process that grew beyond this exits after its answer
PROTOCOL = 1
# what perfseer.predict takes from the command line (the rest of a message is refused)
PREDICT_KEYS = ("model", "device", "predictor", "batch", "phase", "precision", "basis", "input_shape", "dims",
                "seq_len", "force", "energy", "power_limit_w", "cache",
                # several GPUs (perfseer.cli.several.parallel_kwargs)
                "gpus", "parallel", "tp", "pp", "dp", "microbatches", "schedule", "sequence_parallel", "nodes",
                "node", "interconnect")
# what perfseer.compare takes from the command line
COMPARE_KEYS = ("model", "batch", "phase", "devices", "precision", "optimizer", "input_shape", "seq_len", "memory",
                "energy", "power_limit_w", "rank_by")


def enabled() -> bool:
    """Whether calls use (and start) a warm process: on POSIX systems with Unix sockets, unless
    ``PERFSEER_WARM=0``."""
    return (os.name == "posix" and hasattr(socket, "AF_UNIX")
            and os.environ.get(WARM_ENV, "1").strip().lower() not in ("0", "false", "no", "off"))


def folder() -> Path:
    """The private folder of the sockets: ``$XDG_RUNTIME_DIR/perfseer`` when set, else
    ``warm/`` in perfseer's cache folder (``$PERFSEER_CACHE``, else ``~/.cache/perfseer``)."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run and Path(run).is_dir():
        return Path(run) / "perfseer"
    root = os.environ.get("PERFSEER_CACHE")
    if root:
        return Path(root).expanduser() / "warm"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "perfseer" / "warm"


def _private(path: Path) -> bool:
    """Create ``path`` (mode 0700) if needed; whether it is a folder of this user that nobody else
    can write to or read."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    import stat  # deferred: small, only here

    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def _code_stamp() -> list:
    """What changes when perfseer's code or bundled files change: each file's size and time."""
    import perfseer  # deferred: the package root only

    root = Path(perfseer.__file__).parent
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".json", ".safetensors")):
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except OSError:
                    continue
                out.append((os.path.relpath(os.path.join(dirpath, name), root), st.st_size, st.st_mtime_ns))
    return [str(root), out]


def key() -> str:
    """The key of the warm process that may answer this call: the protocol, the Python (its
    environment's prefix and interpreter, whatever name started it), the import path, perfseer's
    files and every environment variable that changes an answer.  The first entry of the import
    path is left out: it is the command's folder for ``perfseer``, the working folder for
    ``python -m perfseer.cli.warm stop``, and perfseer's own place is in its files' stamp."""
    env = {k: v for k, v in os.environ.items()
           if k.startswith("PERFSEER_") and k not in (WARM_ENV, IDLE_ENV)
           or k in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "PYTHONPATH", "HF_HOME", "TORCH_HOME")}
    python = [sys.prefix, os.path.realpath(sys.executable)]
    blob = json.dumps([PROTOCOL, python, sys.version, sys.path[1:], sorted(env.items()), _code_stamp()])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _paths(k: str) -> dict[str, Path]:
    base = folder()
    return {"socket": base / f"{k}.sock", "starting": base / f"{k}.starting", "lock": base / f"{k}.lock",
            "log": base / f"{k}.log"}


# -- messages: a 4-byte length, then UTF-8 JSON ----------------------------------------------------

def _plain(obj):
    """A numpy scalar or array as the Python value JSON writes (rows hold a few)."""
    tolist = getattr(obj, "tolist", None)
    if tolist is None:
        raise TypeError(f"{type(obj).__name__} is not JSON")
    return tolist()


def _send(sock: socket.socket, obj) -> None:
    data = json.dumps(obj, allow_nan=True, default=_plain).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _recv(sock: socket.socket):
    (n,) = struct.unpack(">I", _recv_exact(sock, 4))
    if n > MAX_MESSAGE:
        raise ConnectionError(f"a message of {n} bytes (at most {MAX_MESSAGE})")
    return json.loads(_recv_exact(sock, n).decode())


# -- the calling side ------------------------------------------------------------------------------

def _ask(path: Path, request: dict) -> dict | None:
    """The warm process's reply, or ``None`` where none answers at ``path``."""
    if len(str(path)) > 100:  # longer than a Unix socket's path may be
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2.0)
        sock.connect(str(path))
        sock.settimeout(None)  # an answer may need an export first (minutes for a large model)
        _send(sock, request)
        reply = _recv(sock)
        return reply if isinstance(reply, dict) else None
    except (OSError, ValueError, ConnectionError, struct.error):
        return None
    finally:
        sock.close()


def _starting(paths: dict[str, Path]) -> bool:
    """Whether a warm process for these paths was started and is still alive, not listening yet."""
    try:
        pid = int(paths["starting"].read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def predict_rows(kwargs: dict) -> tuple[list[dict], list[str]]:
    """``perfseer.predict(**kwargs)``'s rows and the warnings it gave: from the warm process when
    one answers, else computed here (and a warm process started for the next call).

    Raises:
        PerfseerError: the question was refused (by either).
    """
    return _rows("predict", kwargs)


def compare_rows(kwargs: dict) -> tuple[list[dict], list[str]]:
    """``perfseer.compare(**kwargs)``'s rows and the warnings it gave, as :func:`predict_rows`."""
    return _rows("compare", kwargs)


def _rows(op: str, kwargs: dict) -> tuple[list[dict], list[str]]:
    k = paths = None
    if enabled():
        k = key()
        paths = _paths(k)
        if _private(paths["socket"].parent):
            request = {"op": op, "protocol": PROTOCOL, "cwd": os.getcwd(), "kwargs": kwargs}
            reply = _ask(paths["socket"], request)
            deadline = time.monotonic() + STARTUP_WAIT_S
            while reply is None and _starting(paths) and time.monotonic() < deadline:
                time.sleep(0.1)
                reply = _ask(paths["socket"], request)
            if reply is not None and reply.get("ok"):
                return reply["rows"], reply.get("warnings", [])
            if reply is not None and reply.get("refused"):
                raise PerfseerError(reply["refused"]["problem"], reply["refused"].get("fix"))
            if reply is not None:
                paths = None  # it answered but failed: answer here, and leave it be
        else:
            paths = None
    rows, warned = local_rows(kwargs, op)
    if paths is not None:
        start(paths)
    return rows, warned


def local_rows(kwargs: dict, op: str = "predict") -> tuple[list[dict], list[str]]:
    """``perfseer.predict(**kwargs)`` (``op="compare"``: ``perfseer.compare``) in this process:
    its rows and the warnings it gave."""
    import warnings

    from perfseer.runtime.predictor import UnseenOperatorWarning  # deferred: keeps --help fast

    if op == "compare":
        from perfseer.comparison import compare as answer  # deferred: loads the runtime
    else:
        from perfseer.api import predict as answer  # deferred: loads onnx, pandas
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnseenOperatorWarning)
        rows = answer(**_arguments(kwargs, COMPARE_KEYS if op == "compare" else PREDICT_KEYS))
    return rows, [str(w.message) for w in caught]


def _arguments(kwargs: dict, allowed=PREDICT_KEYS) -> dict:
    unknown = set(kwargs) - set(allowed)
    if unknown:
        raise ValueError(f"unknown arguments {sorted(unknown)}")
    out = dict(kwargs)
    if out.get("input_shape") is not None:
        out["input_shape"] = tuple(out["input_shape"])
    return out


def start(paths: dict[str, Path]) -> None:
    """Start a warm process for ``paths`` in the background (its own session, output to its log);
    a failure to start is silent: the next call answers in its own process again."""
    try:
        with open(paths["log"], "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "perfseer.cli.warm", "serve", "--socket", str(paths["socket"])],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
                cwd=str(paths["socket"].parent))
        from perfseer.atomic import atomic_write_text  # deferred: small

        atomic_write_text(paths["starting"], str(proc.pid))
    except OSError:
        pass


def stop() -> bool:
    """Stop the warm process of the current environment; whether one was running."""
    if not enabled():
        return False
    reply = _ask(_paths(key())["socket"], {"op": "stop", "protocol": PROTOCOL})
    return bool(reply and reply.get("ok"))


# -- the warm process ------------------------------------------------------------------------------

def _peer_uid(conn: socket.socket) -> int | None:
    cred = getattr(socket, "SO_PEERCRED", None)
    if cred is None:
        return os.getuid()  # not Linux: the folder's mode is the guard
    try:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, cred, struct.calcsize("3i")))
    except OSError:
        return None
    return uid


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _answer(request: dict) -> dict:
    """The reply to one question (never raises)."""
    if request.get("protocol") != PROTOCOL:
        return {"ok": False, "failed": "another protocol"}
    if request.get("op") not in ("predict", "compare"):
        return {"ok": False, "failed": f"unknown op {request.get('op')!r}"}
    try:
        os.chdir(request["cwd"])
        rows, warned = local_rows(request["kwargs"], request["op"])
    except PerfseerError as e:
        return {"ok": False, "refused": {"problem": e.problem, "fix": e.fix}}
    except Exception as e:  # a bug, or something this process cannot do: the caller answers itself
        return {"ok": False, "failed": f"{type(e).__name__}: {e}"}
    return {"ok": True, "rows": rows, "warnings": warned}


def _warm_up() -> None:
    """Import what answers need and load the bundled cards, so the first question is fast too."""
    import gc
    import warnings

    import perfseer.api  # deferred: the heavy imports are the point here
    import perfseer.models  # noqa: F401
    from perfseer.runtime.predictor import cached_predictor, list_predictors
    from perfseer.runtime.spec import load_spec_model
    from perfseer.runtime.transfer import load_transfer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for card in list_predictors():
            try:
                cached_predictor(card["name"])
            except PerfseerError:
                continue
        for load in (load_spec_model, load_transfer):
            try:
                load()
            except PerfseerError:
                pass
    gc.collect()
    gc.freeze()  # what is loaded now stays: collections then walk only what a question allocates


def serve(sock_path: Path, idle_s: float) -> int:
    """Answer questions on ``sock_path`` until ``idle_s`` seconds pass without one, a stop is asked,
    or another warm process takes the socket over."""
    import fcntl

    paths = _paths(sock_path.name[:-len(".sock")])
    if not _private(sock_path.parent):
        return 1
    lock = open(paths["lock"], "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another warm process of this key is running
    _warm_up()
    tmp = sock_path.with_name(f".{os.getpid()}.sock")
    tmp.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(tmp))
    os.chmod(tmp, 0o600)
    server.listen(16)
    os.replace(tmp, sock_path)
    ino = sock_path.stat().st_ino
    paths["starting"].unlink(missing_ok=True)
    server.settimeout(5.0)
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                try:
                    ours = sock_path.stat().st_ino == ino
                except OSError:
                    ours = False
                if not ours or time.monotonic() - last > idle_s:
                    return 0
                continue
            with conn:
                if _peer_uid(conn) != os.getuid():
                    continue
                try:
                    request = _recv(conn)
                except (OSError, ValueError, ConnectionError, struct.error):
                    continue
                if isinstance(request, dict) and request.get("op") == "stop":
                    try:
                        _send(conn, {"ok": True})
                    except OSError:
                        pass
                    return 0
                reply = _answer(request) if isinstance(request, dict) else {"ok": False, "failed": "not an object"}
                try:
                    _send(conn, reply)
                except (OSError, ValueError, TypeError):
                    pass  # the caller left (Ctrl-C), or the reply is not JSON: the caller answers itself
            last = time.monotonic()
            if _rss_bytes() > MAX_RSS_BYTES:
                return 0
    finally:
        try:
            if sock_path.stat().st_ino == ino:
                sock_path.unlink()
        except OSError:
            pass
        server.close()


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m perfseer.cli.warm",
                                 description="The warm process of perfseer predict and compare (see the module's doc).")
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("serve", help="answer on a socket (started by perfseer predict or compare)")
    s.add_argument("--socket", required=True, type=Path)
    s.add_argument("--idle", type=float, default=None, help=f"seconds (default ${IDLE_ENV} or {DEFAULT_IDLE_S:g})")
    sub.add_parser("stop", help="stop the warm process of this environment")
    sub.add_parser("status", help="say whether a warm process of this environment is listening")
    args = ap.parse_args(argv)
    if args.what == "serve":
        idle = args.idle if args.idle is not None else float(os.environ.get(IDLE_ENV, DEFAULT_IDLE_S))
        return serve(args.socket, idle)
    if args.what == "stop":
        print("stopped" if stop() else "no warm process was running")
        return 0
    sock = _paths(key())["socket"]
    print(f"listening at {sock}" if enabled() and sock.exists() else f"none (it would listen at {sock})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
