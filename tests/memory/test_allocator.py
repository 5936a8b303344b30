"""The caching-allocator model against sizes worked out by hand from CUDACachingAllocator.cpp's rules."""

from perfseer.memory.allocator import CachingAllocator, allocation_size, replay, round_size

MIB = 1 << 20


def test_round_size_is_512_multiples():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024


def test_segment_sizes_by_request():
    assert allocation_size(MIB) == 2 * MIB            # small pool: 2 MiB segments
    assert allocation_size(MIB + 512) == 20 * MIB     # 1-10 MiB: 20 MiB segments
    assert allocation_size(10 * MIB) == 10 * MIB      # >= 10 MiB: rounded to 2 MiB
    assert allocation_size(11 * MIB) == 12 * MIB


def test_small_requests_share_one_segment():
    r = replay([100, 100], [(1, 0), (1, 1)])
    assert (r.peak_allocated, r.peak_reserved) == (1024, 2 * MIB)


def test_freed_large_block_is_reused_not_reserved_again():
    r = replay([3 * MIB, 5 * MIB], [(1, 0), (-1, 0), (1, 1)])
    assert r.peak_reserved == 20 * MIB
    assert r.peak_allocated == 5 * MIB


def test_large_block_not_split_when_remainder_at_most_1mib():
    # 12 MiB segment, freed; 11.5 MiB takes the whole block (0.5 MiB left is not split off)
    r = replay([12 * MIB, 11 * MIB + MIB // 2], [(1, 0), (-1, 0), (1, 1)])
    assert r.peak_reserved == 12 * MIB
    assert r.peak_allocated == 12 * MIB


def test_best_fit_after_merging_neighbours():
    a = CachingAllocator()
    b1, b2, b3 = (a.malloc(4 * MIB) for _ in range(3))  # one 20 MiB segment: 4 + 4 + 4 + 8 free
    assert a.reserved == 20 * MIB
    a.free(b2)
    a.free(b1)  # merges with b2: an 8 MiB free block at the segment start
    blk = a.malloc(7 * MIB + MIB // 2)
    assert a.reserved == 20 * MIB and blk.addr == b1.addr


def test_out_of_memory_is_a_result_and_cache_is_released_first():
    boom = replay([15 * MIB, 15 * MIB], [(1, 0), (1, 1)], limit=20 * MIB)
    assert boom.oom and boom.oom_event == 1 and boom.oom_request == 15 * MIB
    # a cached 16 MiB segment is released so that an 18 MiB one fits under 20 MiB
    ok = replay([16 * MIB, 18 * MIB], [(1, 0), (-1, 0), (1, 1)], limit=20 * MIB)
    assert not ok.oom and ok.peak_reserved == 18 * MIB


def test_zero_byte_allocations_take_no_block():
    assert replay([0], [(1, 0), (-1, 0)]).peak_reserved == 0
