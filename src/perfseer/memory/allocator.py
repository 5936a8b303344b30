"""A model of PyTorch's CUDA caching allocator, replayed over a trace of allocations and frees.

Constants and rules are those of ``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 2.x, default
``PYTORCH_CUDA_ALLOC_CONF``: no ``max_split_size_mb``, no ``roundup_power2_divisions``, no
``expandable_segments``, no garbage-collection threshold):

* every request is rounded up to a multiple of ``kMinBlockSize`` = 512 B (``round_size``);
* requests of at most ``kSmallSize`` = 1 MiB come from the *small pool*, whose segments are
  ``kSmallBuffer`` = 2 MiB; larger ones from the *large pool*, whose new segments are
  ``kLargeBuffer`` = 20 MiB for requests below ``kMinLargeAlloc`` = 10 MiB and the request
  rounded up to ``kRoundLarge`` = 2 MiB otherwise (``get_allocation_size``);
* a request takes the smallest cached free block of its pool that is large enough, lowest
  address first among equal sizes (``get_free_block``: ``lower_bound`` on blocks ordered by
  size, then address);
* the block is split when the remainder is at least 512 B (small pool) or more than 1 MiB
  (large pool) (``should_split``); otherwise the whole block is handed out and counted as
  allocated;
* a freed block merges with free neighbours of its segment (``try_merge_blocks``) and stays
  reserved: segments go back to the driver only when an allocation would not fit otherwise,
  then every wholly free segment is released (``release_cached_blocks``) and the allocation is
  retried once; if it still does not fit, the allocation is out of memory.

``memory_allocated`` counts the sizes of blocks handed out (rounded), ``memory_reserved`` the
sizes of segments; :func:`replay` reports the peak of each.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20


def round_size(size: int) -> int:
    """Bytes a request of ``size`` takes (``round_size``)."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size: int) -> int:
    """Size of the segment created for a rounded request nothing cached can serve (``get_allocation_size``)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


@dataclass
class ReplayResult:
    """Peaks of a replay, in bytes, and where it ran out of memory (if it did)."""

    peak_allocated: int
    peak_reserved: int
    peak_allocated_event: int     # index of the event at which allocated bytes peaked
    oom: bool = False
    oom_event: int | None = None  # index of the allocation that did not fit
    oom_request: int | None = None
    num_segments: int = 0


class _Block:
    __slots__ = ("addr", "size", "free", "prev", "next", "segment", "small")

    def __init__(self, addr, size, segment, small):
        self.addr, self.size, self.segment, self.small = addr, size, segment, small
        self.free = True
        self.prev = self.next = None


class CachingAllocator:
    """The allocator's state; :meth:`malloc` / :meth:`free` mirror ``malloc`` / ``free`` of the
    device allocator.

    Args:
        limit: bytes the allocator may reserve from the device (``None``: unlimited).
    """

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self.reserved = 0
        self.allocated = 0
        self._pools = {True: [], False: []}   # small? -> sorted [(size, addr, block)]
        self._segments: dict[int, _Block] = {}  # segment base address -> first block
        self._next_addr = 0

    # -- pools -----------------------------------------------------------------------------
    def _insert(self, b: _Block) -> None:
        bisect.insort(self._pools[b.small], (b.size, b.addr, id(b), b))

    def _remove(self, b: _Block) -> None:
        pool = self._pools[b.small]
        i = bisect.bisect_left(pool, (b.size, b.addr, id(b)))
        del pool[i]

    def _new_segment(self, size: int, small: bool) -> _Block | None:
        if self.limit is not None and self.reserved + size > self.limit:
            return None
        addr = self._next_addr
        self._next_addr += size
        b = _Block(addr, size, addr, small)
        self._segments[addr] = b
        self.reserved += size
        return b

    def _release_cached(self) -> None:
        for base, b in list(self._segments.items()):
            if b.free and b.next is None:  # the whole segment is one free block
                self._remove(b)
                del self._segments[base]
                self.reserved -= b.size

    # -- malloc / free ---------------------------------------------------------------------
    def malloc(self, nbytes: int) -> _Block | None:
        """Hand out a block for ``nbytes`` (``None`` when out of memory)."""
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            block = pool[i][3]
            del pool[i]
        else:
            seg = allocation_size(size)
            block = self._new_segment(seg, small)
            if block is None:
                self._release_cached()
                block = self._new_segment(seg, small)
                if block is None:
                    return None
        remaining = block.size - size
        if (remaining >= K_MIN_BLOCK) if small else (remaining > K_SMALL_SIZE):
            rest = _Block(block.addr + size, remaining, block.segment, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
        block.free = False
        self.allocated += block.size
        return block

    def free(self, block: _Block) -> None:
        """Return a block to its pool, merged with its free neighbours."""
        block.free = True
        self.allocated -= block.size
        nxt = block.next
        if nxt is not None and nxt.free:
            self._remove(nxt)
            block.size += nxt.size
            block.next = nxt.next
            if nxt.next is not None:
                nxt.next.prev = block
        prev = block.prev
        if prev is not None and prev.free:
            # the first block of a segment is never absorbed, so _segments keeps pointing at it
            self._remove(prev)
            prev.size += block.size
            prev.next = block.next
            if block.next is not None:
                block.next.prev = prev
            block = prev
        self._insert(block)


def replay(sizes, events, limit: int | None = None) -> ReplayResult:
    """Replay ``events`` (``(+1, id)`` allocate, ``(-1, id)`` free) of allocations of ``sizes[id]``
    bytes through a :class:`CachingAllocator` and return the peaks.

    Zero-byte allocations take no block (the CUDA allocator returns a null pointer for them).

    Example:
        >>> replay([100, 3 << 20], [(1, 0), (1, 1), (-1, 0), (-1, 1)]).peak_reserved == (2 << 20) + (20 << 20)
        True
    """
    alloc = CachingAllocator(limit)
    blocks = {}
    peak_a = peak_r = 0
    peak_at = -1
    for i, (sign, aid) in enumerate(events):
        n = sizes[aid]
        if n <= 0:
            continue
        if sign > 0:
            b = alloc.malloc(n)
            if b is None:
                return ReplayResult(peak_a, max(peak_r, alloc.reserved), peak_at, True, i, n,
                                    len(alloc._segments))
            blocks[aid] = b
            if alloc.allocated > peak_a:
                peak_a, peak_at = alloc.allocated, i
            peak_r = max(peak_r, alloc.reserved)
        else:
            b = blocks.pop(aid, None)
            if b is not None:
                alloc.free(b)
    return ReplayResult(peak_a, peak_r, peak_at, num_segments=len(alloc._segments))
