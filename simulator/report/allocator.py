"""What PyTorch's caching allocator reserves for the tensors alive at the memory peak
(`run --json` memory `reserved_peak_bytes`, torch's `max_memory_reserved`): the rounding of
each request and the segments it is carved from, as a closed form.

The rules and constants are those of pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp
(@001074d): every request is rounded up to a multiple of kMinBlockSize = 512 B
(`round_size`); requests of at most kSmallSize = 1 MiB come from the small pool, packed in
kSmallBuffer = 2 MiB segments (a small block splits whenever 512 B or more remain,
`should_split`); larger ones from the large pool, where a request below kMinLargeAlloc =
10 MiB takes a kLargeBuffer = 20 MiB segment that later requests may split while more than
1 MiB remains, and one of 10 MiB or more a segment of its own rounded up to kRoundLarge =
2 MiB (`get_allocation_size`). With `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`
("Note [Expandable Segments]" of the same file) each pool is one segment per stream that
grows by pages of 2 MiB (small pool) and 20 MiB (large pool), and blocks split whenever 512 B
remain: what it reserves is the rounded requests of a pool, rounded up to its page.

The closed form packs the tensors alive at the peak as tightly as those rules allow: it is
the least the allocator reserves for them. What a run's history adds beyond that (free
blocks between live ones that a later, larger request cannot use, other streams' pools)
depends on the order of every allocation and free: where the stack's order is modelled
(`memory_overheads.allocation_sequence`: FSDP2), `result_reserved` replays it through the
allocator instead (`report.alloc_sequence`, `report.allocator_replay`) and
`reserved_model` says which of the two gave the figure.

The tensors alive at the peak are taken from the program at the peak's composition
(`peak_requests`): the activations in the proportions of the saved tensors of the program's
ops (each op's saved set one request), each other category one request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from simulator.report.alloc_sequence import replay_result
from simulator.report.allocator_replay import (
    LARGE_BUFFER,
    MIN_BLOCK,
    MIN_LARGE_ALLOC,
    ROUND_LARGE,
    SMALL_BUFFER,
    SMALL_SIZE,
    allocation_size,
)

__all__ = ["MIN_BLOCK", "SMALL_SIZE", "SMALL_BUFFER", "LARGE_BUFFER", "MIN_LARGE_ALLOC",
           "ROUND_LARGE", "round_size", "allocation_size", "reserved_bytes",
           "peak_requests", "reserved_peak", "result_reserved", "reserved_model",
           "reserved_line_bytes"]

Request = tuple[float, float]  # (bytes of one tensor, how many are alive)


def _up(nbytes: float, unit: int) -> float:
    return unit * math.ceil(nbytes / unit - 1e-9) if nbytes > 0 else 0.0


def round_size(nbytes: float) -> float:
    """A request as the allocator rounds it (`round_size`): a multiple of 512 B, 512 at
    least."""
    return max(float(MIN_BLOCK), _up(nbytes, MIN_BLOCK))


def reserved_bytes(requests: Iterable[Request], expandable: bool = False) -> float:
    """Bytes of the segments the caching allocator reserves for `requests` alive together,
    packed as tightly as its rules allow (module docstring). Counts may be fractional
    (tensors apportioned over a category's bytes)."""
    small = mid = large = 0.0
    mid_segments = 0.0
    for size, count in requests:
        if count <= 0 or size <= 0:
            continue
        r = round_size(size)
        if r <= SMALL_SIZE:
            small += count * r
        elif expandable:
            large += count * r
        elif r < MIN_LARGE_ALLOC:
            # a 20 MiB segment serves floor(20 MiB / r) of them: it splits while more than
            # 1 MiB remains, and the last request takes the remainder whole
            mid += count * r
            mid_segments += count / (LARGE_BUFFER // int(r))
        else:
            large += count * allocation_size(r)
    if expandable:
        return _up(small, SMALL_BUFFER) + _up(large, LARGE_BUFFER)
    return _up(small, SMALL_BUFFER) + LARGE_BUFFER * math.ceil(mid_segments - 1e-9) + large


def _apportion(total: float, sizes: Sequence[Request]) -> list[Request]:
    """`total` bytes made of tensors in the proportions (size, weight) of `sizes`."""
    unit = sum(s * w for s, w in sizes)
    if total <= 0 or unit <= 0:
        return []
    return [(s, w * total / unit) for s, w in sizes if s > 0 and w > 0]


def peak_requests(program: Any, by_category: dict[str, float]) -> list[Request]:
    """The tensors alive at a peak of composition `by_category` (bytes per memory
    category), from `program` (`program.program.Program`): the activations in the
    proportions of the ops' saved sets (each op's saved set one request, a block's ops
    weighted by its copies; its loss buffers and re-run set one request each); every other
    category one request (the program keeps a block's parameter count and tensor count, not
    each tensor's size: a stack's contiguous buffers, Megatron-Core's parameter and gradient
    buffers, are one request indeed; per-parameter tensors, FSDP2's shards and the
    optimizer's states, are each rounded by less than 2 MiB, not counted)."""
    saved: list[Request] = []
    for b in program.blocks:
        for op in b.fwd:
            nbytes = getattr(op, "saved_bytes", 0.0)
            if nbytes > 0:
                saved.append((nbytes, float(b.repeat)))
        for extra in (b.transient_bytes, b.working_bytes):
            if extra > 0:
                saved.append((extra, 1.0))
    out = _apportion(by_category.get("activations", 0.0), saved)
    out += [(nbytes, 1.0) for cat, nbytes in by_category.items()
            if cat != "activations" and nbytes > 0]
    return out


def reserved_peak(program: Any, by_category: dict[str, float], mode: str | None
                  ) -> float | None:
    """`reserved_peak_bytes` of a peak (by_category without the stack's own
    `framework_overhead`, which the allocator does not hold): None when the stack's
    allocator is not PyTorch's (`mode` None), else `reserved_bytes` of `peak_requests`."""
    if mode is None:
        return None
    alive = {k: v for k, v in by_category.items() if k != "framework_overhead"}
    return reserved_bytes(peak_requests(program, alive),
                          expandable=mode == "pytorch_expandable")


def reserved_model(result: Any) -> str | None:
    """How `reserved_peak_bytes` of a SimResult is predicted: "allocation_replay" (its
    step's allocations and frees replayed through the caching allocator,
    `alloc_sequence.replay_result`), "closed_form" (the tensors alive at the peak, packed
    as tightly as the allocator's rounding allows: `reserved_peak`), or None (another
    allocator)."""
    fw = getattr(result, "framework", None)
    if fw is None or fw.memory_overheads.caching_allocator is None:
        return None
    return "allocation_replay" if replay_result(result) is not None else "closed_form"


def result_reserved(result: Any) -> int | None:
    """`reserved_peak_bytes` of a SimResult: the peak reserve of the replay of its
    allocations where its stack's sequence is modelled (`alloc_sequence.replay_result`),
    else `reserved_peak` of its peak's composition under its framework profile's
    `memory_overheads.caching_allocator` (None without a profile or for another
    allocator)."""
    replayed = replay_result(result)
    if replayed is not None:
        return int(replayed.peak_reserved)
    fw = getattr(result, "framework", None)
    mode = fw.memory_overheads.caching_allocator if fw is not None else None
    reserved = reserved_peak(result.program, dict(result.memory.by_category), mode)
    return None if reserved is None else int(round(reserved))


def reserved_line_bytes(result: Any) -> float | None:
    """Where the memory plots draw the allocator's view of the peak: the reserved segments
    and the stack's own memory beside them (`framework_overhead`, which the plots stack),
    so that the line and the stacked peak differ by what the allocator holds beyond the
    tensors (its rounding, or with a replayed sequence its history too) (None: not
    modelled)."""
    reserved = result_reserved(result)
    if reserved is None:
        return None
    return reserved + dict(result.memory.by_category).get("framework_overhead", 0.0)
