"""The caching-allocator replay (`report.allocator_replay`) against closed forms of
c10/cuda/CUDACachingAllocator.cpp's rules."""

from __future__ import annotations

from simulator.report.allocator_replay import CachingAllocator

MiB = 1 << 20


def test_mid_request_takes_a_20_mib_segment_that_later_requests_split() -> None:
    a = CachingAllocator()
    x = a.malloc(5 * MiB)
    assert a.reserved == 20 * MiB and x.size == 5 * MiB
    a.malloc(5 * MiB)
    a.malloc(5 * MiB)
    assert a.reserved == 20 * MiB  # split while more than 1 MiB remains
    last = a.malloc(5 * MiB)  # 5 MiB left: split, 0 remains
    assert a.reserved == 20 * MiB and last.size == 5 * MiB
    a.malloc(5 * MiB)
    assert a.reserved == 40 * MiB


def test_large_request_segment_rounded_to_2_mib_and_unsplit_remainder_counts() -> None:
    a = CachingAllocator()
    a.malloc(11 * MiB + 1)
    # 12 MiB segment, under 1 MiB would remain: not split, the block counts whole
    assert a.reserved == 12 * MiB and a.allocated == 12 * MiB
    b = CachingAllocator()
    seg = b.malloc(100 * MiB)
    b.free(seg)
    got = b.malloc(99.5 * MiB)  # 0.5 MiB would remain: not split (> 1 MiB needed)
    assert got.size == 100 * MiB and b.allocated == 100 * MiB


def test_free_block_reused_by_a_smaller_request_splits() -> None:
    a = CachingAllocator()
    big = a.malloc(100 * MiB)
    a.free(big)
    small = a.malloc(40 * MiB)
    other = a.malloc(60 * MiB)
    assert a.reserved == 100 * MiB and small.size == 40 * MiB and other.size == 60 * MiB
    a.free(small)
    a.free(other)  # merges back into one 100 MiB block
    whole = a.malloc(100 * MiB)
    assert a.reserved == 100 * MiB and whole.size == 100 * MiB


def test_two_streams_peaking_at_different_times_reserve_both_peaks() -> None:
    a = CachingAllocator()
    x = a.malloc(64 * MiB, "default")
    a.free(x)
    y = a.malloc(64 * MiB, "reduce_scatter")  # the default stream's cache is not used
    a.free(y)
    assert a.reserved == 128 * MiB and a.peak_allocated == 64 * MiB
    assert a.reserved_by_stream == {"default": 64 * MiB, "reduce_scatter": 64 * MiB}


def test_small_requests_pack_in_2_mib_segments() -> None:
    a = CachingAllocator()
    for _ in range(4):
        a.malloc(512 * 1024)
    assert a.reserved == 2 * MiB
    a.malloc(1)
    assert a.reserved == 4 * MiB and a.allocated == 4 * 512 * 1024 + 512


def test_capacity_releases_unsplit_cached_segments_then_retries() -> None:
    a = CachingAllocator(capacity=200 * MiB)
    x = a.malloc(120 * MiB)
    a.free(x)
    y = a.malloc(130 * MiB)  # 120 cached + 130 > 200: the cache is released
    assert a.retries == 1 and a.reserved == 130 * MiB and a.ooms == 0
    a.malloc(100 * MiB)
    assert a.ooms == 1 and a.reserved == 230 * MiB
    assert y.size == 130 * MiB


def test_expandable_segment_grows_by_20_mib_pages_from_its_free_tail() -> None:
    a = CachingAllocator(expandable=True)
    x = a.malloc(30 * MiB)
    assert a.reserved == 40 * MiB  # two 20 MiB pages
    a.malloc(5 * MiB)  # from the 10 MiB free tail
    assert a.reserved == 40 * MiB
    a.malloc(15 * MiB)  # 5 MiB free tail + one more page
    assert a.reserved == 60 * MiB
    a.free(x)
    a.malloc(25 * MiB)  # the 30 MiB hole is reused, split at 512 B
    assert a.reserved == 60 * MiB


def test_expandable_streams_hold_their_own_segments_and_unmap_on_failure() -> None:
    a = CachingAllocator(expandable=True, capacity=100 * MiB)
    x = a.malloc(60 * MiB, "default")
    a.free(x)
    a.malloc(60 * MiB, "reduce_scatter")  # 60 + 60 > 100: the free pages are unmapped
    assert a.retries == 1 and a.reserved == 60 * MiB
    assert a.reserved_by_stream == {"default": 0, "reduce_scatter": 60 * MiB}
