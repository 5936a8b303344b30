"""numpy's BLAS thread count, lowered for small products.

numpy's OpenBLAS starts as many threads as the machine has cores for every matrix product above
a small size.  On a machine whose cores are busy, a small product then waits for them: the
nearest-training-graph distances of one model at 11 batch sizes (an ``11 x 128`` by ``128 x 800``
product) took 2 ms with two threads on a loaded 2-core machine against 0.3 ms with one, and up
to 30 ms inside a batch sweep.  :func:`limited` runs a block with at most ``n`` BLAS threads and
restores the count after.  Only OpenBLAS (the library numpy wheels bundle) is handled, found by
its exported ``*openblas_set_num_threads*`` function among the loaded libraries (Linux); with any
other BLAS it does nothing.  A product's values do not depend on the thread count (OpenBLAS splits
the output, not the sums).
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

_LOCK = threading.Lock()
_API: tuple | None = None  # (get, set) or () when not found


def _api() -> tuple:
    global _API
    if _API is None:
        import numpy  # noqa: F401  loads the BLAS numpy bundles

        found: tuple = ()
        try:
            with open("/proc/self/maps") as f:
                paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
        except OSError:
            paths = []
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix, suffix in (("scipy_", "64_"), ("", "64_"), ("", "")):
                get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                    found = (get, put)
                    break
            if found:
                break
        _API = found
    return _API


@contextlib.contextmanager
def limited(n: int):
    """Run a block with numpy's BLAS on at most ``n`` threads (never raised), then restore it."""
    api = _api()
    if not api:
        yield
        return
    get, put = api
    with _LOCK:
        before = int(get())
        want = max(1, min(int(n), before))
        if want != before:
            put(want)
    try:
        yield
    finally:
        if want != before:
            with _LOCK:
                put(before)
