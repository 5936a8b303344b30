"""How many CPU threads a prediction may use: the cores this process may run on that the machine
is not already busy with, and one for small work.

A prediction of one model is a few small matrix products per network: spread over several
threads it waits on their synchronisation, and on a machine whose cores are busy with other
processes each thread also waits for a core (on a 2-core VM with two busy-loop processes beside
it, a blend card answered in 18 ms with two torch threads and 8 ms with one).  Batched prediction
of many graphs (a NAS loop) gains from the cores that are idle, and only from those.

:func:`threads_for` sizes a call; :func:`limited` applies it to torch for the length of a call and
restores the caller's setting.  It only ever lowers torch's thread count, never raises it above
what the caller (or ``torch.set_num_threads``) chose.
"""

from __future__ import annotations

import contextlib
import os

# Graphs below which a call runs on one thread: one model at a few batch sizes, a fall-back or two.
SMALL_CALL_GRAPHS = 64


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, e.g. under ``taskset`` or a container's
    cpuset), else the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def idle_cores() -> int:
    """The usable cores the machine is not busy with: usable cores minus the 1-minute load average
    (which counts this process once if it is running), at least 1."""
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return cores
    return max(1, min(cores, int(cores - load + 1.5)))


def threads_for(graphs: int) -> int:
    """Threads for a call that runs a network over ``graphs`` graphs: 1 for a small call, else the
    idle usable cores (:func:`idle_cores`)."""
    return 1 if graphs < SMALL_CALL_GRAPHS else idle_cores()


@contextlib.contextmanager
def limited(graphs: int):
    """Run a block with torch (and numpy's BLAS, :mod:`perfseer.blas`) on at most
    :func:`threads_for` ``(graphs)`` threads (never more than it had), and give the caller's
    setting back afterwards."""
    import torch  # deferred: heavy, loaded on first use

    from perfseer import blas

    before = torch.get_num_threads()
    want = min(before, threads_for(graphs))
    with blas.limited(want):  # numpy's BLAS too (the domain check's distances, a calibrated card's)
        if want == before:
            yield
            return
        torch.set_num_threads(want)
        try:
            yield
        finally:
            torch.set_num_threads(before)
