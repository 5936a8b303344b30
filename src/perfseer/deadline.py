"""A time limit on pure-Python work in the main thread, interrupted without corrupting torch.

Exporting or simulating a model runs torch's tracers: Python code that pushes modes on torch's
global stacks, turns grad mode off, sets dispatcher flags, and restores them in ``finally`` blocks
and ``__exit__`` methods.  A ``SIGALRM`` handler that raises wherever the signal lands can hit
those restoring steps, and the process is then broken for good: a ``TorchFunctionMode`` left on
the stack, grad mode off, "PythonDispatcherTLS was not set" on every later call (measured: 4 of 24
interrupted exports when the alarm repeated every 0.5 ms during the unwinding).  An exception
raised in a ``__del__`` or a weakref callback is not even delivered: Python prints "Exception
ignored" and the work goes on.

:func:`deadline` therefore raises once, and only outside cleanup code (:func:`in_cleanup`): an
alarm that lands in cleanup is retried every :data:`RETRY_S` (for at most :data:`DEFER_MAX_S`);
one that Python swallowed (reported to ``sys.unraisablehook``) is retried at once; one that a bare
``except`` swallowed, after :data:`AGAIN_S`.  While the first interrupt propagates, nothing fires.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable

RETRY_S = 0.05
DEFER_MAX_S = 10.0
AGAIN_S = 5.0


class Expired(BaseException):
    """Raised by the alarm; a BaseException so that tracing code's ``except Exception`` passes it on."""


def in_cleanup(frame) -> bool:
    """Whether ``frame`` or one of its callers is cleanup code an exception must not interrupt: an
    ``__exit__``, a ``__del__``, a weakref callback run by ``weakref``, or a module import."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name in ("__exit__", "__aexit__", "__del__")
                or code.co_filename.endswith(("weakref.py", "_weakrefset.py"))
                or code.co_filename.startswith("<frozen importlib")):
            return True
        frame = frame.f_back
    return False


def available() -> bool:
    """Whether :func:`deadline` can interrupt here (the main thread of a POSIX process)."""
    return threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")


@contextlib.contextmanager
def deadline(seconds: float, error: Callable[[], BaseException]):
    """Run the block for at most ``seconds``, then raise ``error()`` from where it was interrupted.

    Outside the main thread (or without ``setitimer``) the block runs without a limit: check
    :func:`available` to say so.
    """
    if not available():
        yield
        return
    start = time.monotonic()
    state = {"closing": False, "raised_at": None}

    def expire(signum, frame):
        if state["closing"]:
            return
        now = time.monotonic()
        if state["raised_at"] is not None and now - state["raised_at"] < AGAIN_S:
            signal.setitimer(signal.ITIMER_REAL, AGAIN_S - (now - state["raised_at"]))  # still propagating
            return
        if in_cleanup(frame) and now - start < seconds + DEFER_MAX_S:
            signal.setitimer(signal.ITIMER_REAL, RETRY_S)
            return
        state["raised_at"] = now
        signal.setitimer(signal.ITIMER_REAL, AGAIN_S)
        raise Expired()

    def unraisable(info):
        if isinstance(info.exc_value, Expired):  # swallowed in a callback: interrupt again soon
            state["raised_at"] = None
            if not state["closing"]:
                signal.setitimer(signal.ITIMER_REAL, RETRY_S)
            return
        previous_hook(info)

    previous = signal.signal(signal.SIGALRM, expire)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except Expired:
        state["closing"] = True
        raise error() from None
    finally:
        state["closing"] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        sys.unraisablehook = previous_hook
