"""A replay of PyTorch's CUDA caching allocator over a sequence of allocations and frees:
what `torch.cuda.max_memory_reserved` reports for a program, its allocation history
included (the free blocks a later request cannot use, the pools of other streams).

The algorithm is that of pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (@001074d),
with the default settings (max_split_size unlimited, no roundup_power2_divisions, no
garbage-collection threshold):

- `malloc`: a request is rounded (`round_size`, multiples of 512 B) and served from the
  small pool (<= 1 MiB) or the large pool; `get_free_block` takes the smallest cached free
  block of the SAME stream that fits (blocks are keyed by (stream, size, address):
  `BlockComparatorSize`), else `alloc_block` reserves a new segment of
  `get_allocation_size` (2 MiB small, 20 MiB for requests under 10 MiB, else the request
  rounded to 2 MiB); when that exceeds the device, `release_cached_blocks` frees every
  cached segment that is not split and the allocation is retried.
- `alloc_found_block`: the block splits when `should_split` (small pool or expandable
  segments: 512 B or more remain; large pool: more than 1 MiB remains), the remainder
  going back to the pool.
- `free_block`: a freed block merges with its free neighbours of the same segment
  (`try_merge_blocks`) and returns to its stream's pool; nothing is given back to the
  device until an allocation fails.
- Expandable segments (Note [Expandable Segments]): each (stream, pool) has one segment of
  virtual address space mapped by pages of 2 MiB (small pool) or 20 MiB (large pool)
  (`ExpandableSegment`); a request no cached block fits maps pages at the lowest address
  where the free block before the unmapped space and new pages together fit it
  (`find_expandable_block`, `map_block`), so a free tail grows instead of a new segment
  being made; on failure the free pages are unmapped (`release_blocks` -> `unmap_block`).

Recorded streams (`recordStream`) and CUDA-graph pools are not modelled: FSDP2, the
program replayed here, keeps references instead of recording streams. Torch TP's
collectives (DTensor's functional collectives through ProcessGroupNCCL) do record their
tensors on the NCCL stream unless TORCH_NCCL_AVOID_RECORD_STREAMS=1 (pytorch/torchtitan
docs/composability.md @9dec370, "Setting TORCH_NCCL_AVOID_RECORD_STREAMS=1 for TP"): a
freed block is then reusable only once the collective has ended on the GPU, so what they
hold is set by how far the host runs ahead of the GPU, which no code fixes (FSDP2 has no
CPU rate limiter; torchtitan issue 735); it is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["CachingAllocator", "Block", "replay", "MIN_BLOCK", "SMALL_SIZE", "SMALL_BUFFER",
           "LARGE_BUFFER", "MIN_LARGE_ALLOC", "ROUND_LARGE", "allocation_size"]

MIN_BLOCK = 512  # kMinBlockSize: all sizes are rounded to at least 512 bytes
SMALL_SIZE = 1 << 20  # kSmallSize: largest "small" allocation is 1 MiB
SMALL_BUFFER = 2 << 20  # kSmallBuffer: "small" allocations are packed in 2 MiB blocks
LARGE_BUFFER = 20 << 20  # kLargeBuffer: "large" allocations may be packed in 20 MiB blocks
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: allocations of 1-10 MiB may use kLargeBuffer
ROUND_LARGE = 2 << 20  # kRoundLarge: round up large allocations to 2 MiB



def allocation_size(nbytes: float) -> float:
    """The segment a request of `nbytes` (rounded) takes when no cached block fits it
    (`get_allocation_size`)."""
    if nbytes <= SMALL_SIZE:
        return float(SMALL_BUFFER)
    if nbytes < MIN_LARGE_ALLOC:
        return float(LARGE_BUFFER)
    return float(ROUND_LARGE * math.ceil(nbytes / ROUND_LARGE - 1e-9))


_ADDRESS_SPACE = 1 << 50  # an expandable segment's virtual range: larger than any device


def _round(nbytes: float) -> int:
    """`round_size`: a multiple of 512 B, 512 at least."""
    return max(-(-math.ceil(nbytes) // MIN_BLOCK) * MIN_BLOCK, MIN_BLOCK)


@dataclass(eq=False)
class Block:
    """A range of one segment: allocated, cached free, or (expandable) unmapped."""

    stream: str
    small: bool
    addr: int
    size: int
    expandable: bool = False
    allocated: bool = False
    mapped: bool = True
    prev: Block | None = None
    next: Block | None = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None


@dataclass
class CachingAllocator:
    """The caching allocator of one device (module docstring). `capacity`: bytes the
    device can reserve (None: unbounded); `expandable`: expandable_segments:True."""

    capacity: float | None = None
    expandable: bool = False
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    retries: int = 0  # allocations that released the cache and retried
    ooms: int = 0  # allocations that did not fit even then (reserved past capacity)
    _free: dict[tuple[str, bool], list[Block]] = field(default_factory=dict)
    _unmapped: dict[tuple[str, bool], list[Block]] = field(default_factory=dict)
    _next_addr: int = 0
    reserved_by_stream: dict[str, int] = field(default_factory=dict)
    peak_by_stream: dict[str, int] = field(default_factory=dict)

    # -- public -------------------------------------------------------------------
    def malloc(self, nbytes: float, stream: str = "default") -> Block:
        """Allocate `nbytes` on `stream` (`DeviceCachingAllocator::malloc`)."""
        size = _round(nbytes)
        small = size <= SMALL_SIZE
        block = self._get_free_block(stream, small, size)
        if block is None:
            block = self._alloc_block(stream, small, size)
            if block is None:
                self.retries += 1
                self.release_cached_blocks()
                block = self._alloc_block(stream, small, size)
            if block is None:
                self.ooms += 1
                block = self._alloc_block(stream, small, size, force=True)
                assert block is not None
        if self._should_split(block, size):
            self._split(block, size)
        block.allocated = True
        self.allocated += block.size
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return block

    def free(self, block: Block) -> None:
        """Return `block` to its stream's pool, merged with free neighbours
        (`free_block`)."""
        assert block.allocated, "double free"
        block.allocated = False
        self.allocated -= block.size
        for other in (block.prev, block.next):
            self._merge(block, other)
        self._pool(block).append(block)

    def release_cached_blocks(self) -> None:
        """Give back every cached segment that is not split; unmap the free pages of
        expandable segments (`release_cached_blocks`, `release_blocks`)."""
        for pool in list(self._free.values()):
            for block in list(pool):
                if block.expandable:
                    self._unmap(block)
                elif not block.is_split():
                    pool.remove(block)
                    self._reserve(block.stream, -block.size)

    # -- the search -----------------------------------------------------------------
    def _pool(self, block: Block) -> list[Block]:
        return self._free.setdefault((block.stream, block.small), [])

    def _get_free_block(self, stream: str, small: bool, size: int) -> Block | None:
        """The smallest cached block of `stream` that fits (`get_free_block`); among
        expandable blocks of equal fit, one whose growth room is smaller."""
        pool = self._free.get((stream, small), [])
        fits = sorted((b for b in pool if b.size >= size), key=lambda b: (b.size, b.addr))
        if not fits:
            return None
        i = 0
        if fits[0].expandable:
            def room(b: Block) -> int:
                nxt = b.next
                return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)
            while i + 1 < len(fits) and room(fits[i + 1]) < room(fits[i]):
                i += 1
        pool.remove(fits[i])
        return fits[i]

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.small or self.expandable:
            return remaining >= MIN_BLOCK
        return remaining > SMALL_SIZE

    def _split(self, block: Block, size: int) -> None:
        rest = Block(block.stream, block.small, block.addr + size, block.size - size,
                     block.expandable, prev=block, next=block.next)
        if block.next is not None:
            block.next.prev = rest
        block.next = rest
        block.size = size
        self._pool(rest).append(rest)

    def _merge(self, dst: Block, src: Block | None) -> None:
        """`try_merge_blocks`: absorb free neighbour `src` into `dst`."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if dst.prev is src:
            dst.addr, dst.prev = src.addr, src.prev
            if src.prev is not None:
                src.prev.next = dst
        else:
            dst.next = src.next
            if src.next is not None:
                src.next.prev = dst
        dst.size += src.size
        where = self._free if src.mapped else self._unmapped
        where[(src.stream, src.small)].remove(src)

    # -- reserving --------------------------------------------------------------------
    def _reserve(self, stream: str, nbytes: int) -> None:
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        now = self.reserved_by_stream.get(stream, 0) + nbytes
        self.reserved_by_stream[stream] = now
        self.peak_by_stream[stream] = max(self.peak_by_stream.get(stream, 0), now)

    def _fits(self, nbytes: int, force: bool) -> bool:
        return force or self.capacity is None or self.reserved + nbytes <= self.capacity

    def _alloc_block(self, stream: str, small: bool, size: int, force: bool = False
                     ) -> Block | None:
        """A new segment (`alloc_block`) or, expandable, newly mapped pages."""
        if self.expandable:
            return self._expand(stream, small, size, force)
        nbytes = int(allocation_size(size))
        if not self._fits(nbytes, force):
            return None
        block = Block(stream, small, self._next_addr, nbytes)
        self._next_addr += nbytes
        self._reserve(stream, nbytes)
        return block

    def _expand(self, stream: str, small: bool, size: int, force: bool) -> Block | None:
        """`try_allocate_expandable_block`: the lowest unmapped range of the stream's
        segment, with the free block before it, mapped up to `size` by whole pages."""
        page = SMALL_BUFFER if small else LARGE_BUFFER
        key = (stream, small)
        unmapped = self._unmapped.setdefault(key, [])
        if not unmapped:
            unmapped.append(Block(stream, small, self._next_addr, _ADDRESS_SPACE, True,
                                  mapped=False))
            self._next_addr += _ADDRESS_SPACE
        for gap in sorted(unmapped, key=lambda b: b.addr):
            before = gap.prev
            tail = before if before is not None and not before.allocated else None
            need = -(-(size - (tail.size if tail is not None else 0)) // page) * page
            if need > gap.size:
                continue
            if not self._fits(need, force):
                return None
            self._map(gap, need)
            block = gap
            if tail is not None:  # the free tail grows into the new pages
                self._merge(tail, gap)
                block = tail
            self._free[key].remove(block)
            return block
        return None

    def _map(self, gap: Block, nbytes: int) -> None:
        """`map_block`: the first `nbytes` of unmapped `gap` become a mapped free block
        (left in no pool: the caller takes it)."""
        if nbytes < gap.size:
            rest = Block(gap.stream, gap.small, gap.addr + nbytes, gap.size - nbytes, True,
                         mapped=False, prev=gap, next=gap.next)
            if gap.next is not None:
                gap.next.prev = rest
            gap.next = rest
            self._unmapped[(gap.stream, gap.small)].append(rest)
            gap.size = nbytes
        self._unmapped[(gap.stream, gap.small)].remove(gap)
        gap.mapped = True
        self._free.setdefault((gap.stream, gap.small), []).append(gap)
        self._reserve(gap.stream, nbytes)

    def _unmap(self, block: Block) -> None:
        """`unmap_block`: the whole pages inside free `block` go back to the device."""
        page = SMALL_BUFFER if block.small else LARGE_BUFFER
        lo = -(-block.addr // page) * page
        hi = (block.addr + block.size) // page * page
        if hi <= lo:
            return
        key = (block.stream, block.small)
        self._free[key].remove(block)
        if lo > block.addr:
            before = Block(block.stream, block.small, block.addr, lo - block.addr, True,
                           prev=block.prev, next=block)
            if block.prev is not None:
                block.prev.next = before
            block.prev = before
            self._free[key].append(before)
        end = block.addr + block.size
        if end > hi:
            after = Block(block.stream, block.small, hi, end - hi, True, prev=block,
                          next=block.next)
            if block.next is not None:
                block.next.prev = after
            block.next = after
            self._free[key].append(after)
        block.addr, block.size, block.mapped = lo, hi - lo, False
        self._reserve(block.stream, -(hi - lo))
        for other in (block.prev, block.next):
            self._merge(block, other)
        self._unmapped.setdefault(key, []).append(block)


def replay(events: Iterable[tuple[str, str, float, str]], capacity: float | None = None,
           expandable: bool = False) -> CachingAllocator:
    """Run `events` ("alloc", key, bytes, stream) / ("free", key, _, _) through a fresh
    allocator; its peaks and per-stream reserve are the answer."""
    a = CachingAllocator(capacity=capacity, expandable=expandable)
    live: dict[str, Block] = {}
    for kind, key, nbytes, stream in events:
        if kind == "alloc":
            live[key] = a.malloc(nbytes, stream)
        else:
            a.free(live.pop(key))
    return a
