"""Freed memory kept for reuse while a batched prediction runs (glibc's malloc ``M_TOP_PAD``).

A batched prediction runs a network over chunks of graphs; each chunk allocates and frees the same
tensors of a few MiB to a few tens of MiB (the node and edge states of 64 graphs).  glibc's malloc
gives the top of its heap back to the system whenever more than a little of it is free, so every
chunk took its memory anew from the kernel and wrote zeros into every page of it: over 2,000
NAS-Bench-201 cells, 200,000-290,000 page faults and 0.5-0.7 s of system time in 1.5 s of CPU time
(``resource.getrusage``; a 2-core VM, load average 5).  :func:`kept` raises ``M_TOP_PAD`` (how much
free memory malloc keeps at the top of the heap when it trims, and adds when it grows) for the
length of a call, so that the chunks reuse the same pages: a few thousand page faults instead
and about a third less CPU time, the same values.  ``M_TOP_PAD`` is restored when the last
concurrent call ends (malloc then gives the memory back at its next trim).  Setting a parameter
stops glibc from adjusting its mmap threshold itself, so :func:`kept` also sets that threshold to
32 MiB, the ceiling glibc's own adjustment reaches (a tensor below it comes from the heap, and is
reused, instead of a fresh ``mmap`` each time); that one stays.

Only glibc (Linux) is touched, found by its ``gnu_get_libc_version``; elsewhere, or with
``PERFSEER_HEAP_PAD=0`` in the environment, :func:`kept` does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading

M_TOP_PAD, M_MMAP_THRESHOLD = -2, -3  # mallopt's parameter numbers (malloc.h)
MMAP_THRESHOLD = 32 * 2**20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
DEFAULT_TOP_PAD = 128 * 1024  # glibc's default (mallopt(3))
PAD_BYTES = 128 * 2**20  # enough for the working set of a chunk of 64 graphs of a few hundred nodes

_LOCK = threading.Lock()
_DEPTH = 0
_MALLOPT = None  # the function, or False where there is none


def _mallopt():
    global _MALLOPT
    if _MALLOPT is None:
        _MALLOPT = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(None)
                if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt"):
                    fn = libc.mallopt
                    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
                    _MALLOPT = fn
            except OSError:
                pass
    return _MALLOPT


@contextlib.contextmanager
def kept(pad_bytes: int = PAD_BYTES):
    """Run a block with malloc keeping up to ``pad_bytes`` of freed memory at the top of its heap
    (instead of returning it to the system at once), then restore glibc's default."""
    global _DEPTH
    fn = _mallopt() if os.environ.get("PERFSEER_HEAP_PAD", "1") != "0" else False
    if not fn:
        yield
        return
    with _LOCK:
        _DEPTH += 1
        if _DEPTH == 1:
            fn(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            fn(M_TOP_PAD, int(pad_bytes))
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                fn(M_TOP_PAD, DEFAULT_TOP_PAD)
