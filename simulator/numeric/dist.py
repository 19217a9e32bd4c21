"""Distributed tensors on virtual numpy devices, and the collectives that move their blocks.

Every step is real data movement between device blocks addressed by global index regions, so
nested splits (two mesh axes on one dim) and Partial values on other axes come out right
without special cases: an all_gather copies the members' blocks into the new region, a
reduce_scatter / all_reduce sums the members' blocks over it, a slice keeps a sub-block.
Uneven (torch.chunk) splits need nothing more: a device's block is its region, shorter or
empty on the last shards (`Layout.local_shape_at`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from simulator.sharding.layout import Layout, regions
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Broadcast, Shard
from simulator.sharding.redist_steps import RedistStep

__all__ = ["DistTensor", "distribute", "assemble", "replica_mismatch", "apply_step", "Stack",
           "stack_of", "add"]

Region = tuple[slice, ...]
Stack = tuple[tuple[int, ...], np.ndarray]
"""Ranks and their blocks stacked along a leading axis (block i belongs to ranks[i])."""


@dataclass(frozen=True, eq=False)
class DistTensor:
    """A logical tensor of `shape` held as one block per device rank under `layout`.
    `stacks`, when given, cover every rank: `blocks` are views of them (numeric.local).
    Blocks are never written in place, so replicas that received the same values may
    share one array."""

    shape: tuple[int, ...]
    layout: Layout
    blocks: tuple[np.ndarray, ...]
    stacks: tuple[Stack, ...] = ()


def stack_of(t: DistTensor, ranks: tuple[int, ...]) -> np.ndarray:
    """The blocks of `ranks` stacked along a new leading axis: a kept stack of the same
    ranks as is, one array every rank shares as a stride-0 view, else a copy."""
    for rs, arr in t.stacks:
        if (rs is ranks or rs == ranks) and all(
                np.may_share_memory(t.blocks[r], arr) for r in (ranks[0], ranks[-1])):
            return arr  # (a tensor rebuilt with other blocks but the old stacks is not)
    first = t.blocks[ranks[0]]
    if all(t.blocks[r] is first for r in ranks):
        return np.broadcast_to(first, (len(ranks),) + first.shape)
    return np.stack([t.blocks[r] for r in ranks])


def add(a: DistTensor | None, b: DistTensor) -> DistTensor:
    """Blockwise sum of two tensors in one layout (stack by stack where both have them)."""
    if a is None:
        return b
    assert a.layout == b.layout, (a.layout, b.layout)
    if a.stacks and [rs for rs, _ in a.stacks] == [rs for rs, _ in b.stacks]:
        stacks = tuple((rs, x + y) for (rs, x), (_, y) in zip(a.stacks, b.stacks))
        blocks: list[np.ndarray] = [np.empty(0)] * len(a.blocks)
        for rs, arr in stacks:
            arr.flags.writeable = False
            for i, r in enumerate(rs):
                blocks[r] = arr[i]
        return DistTensor(a.shape, a.layout, tuple(blocks), stacks)
    return DistTensor(a.shape, a.layout, tuple(x + y for x, y in zip(a.blocks, b.blocks)))


def _region(layout: Layout, shape: tuple[int, ...], mesh: Mesh, rank: int) -> Region:
    return layout.region(shape, mesh, rank)


def _partial_split(value: np.ndarray, n: int, rng: np.random.Generator | None
                   ) -> list[np.ndarray]:
    """n summands of `value`: random and unequal when rng is given, else all on the first."""
    if rng is None:
        return [value] + [np.zeros_like(value) for _ in range(n - 1)]
    parts = [rng.standard_normal(value.shape) * (1 + i) for i in range(n - 1)]
    return parts + [value - sum(parts)]


def distribute(full: np.ndarray, layout: Layout, mesh: Mesh,
               rng: np.random.Generator | None = None) -> DistTensor:
    """Lay a whole tensor out on the mesh. Partial axes get asymmetric summands (rng) so a
    wrong reduction cannot match by accident; the summands are drawn once per canonical rank
    and copied to its replicas along broadcast axes, which must hold identical blocks."""
    shape = tuple(full.shape)
    layout.check(shape, mesh, uneven=True)
    canon = _canonicals(layout, mesh)
    blocks: list[np.ndarray | None] = [
        full[reg].copy() if canon[r] == r else None
        for r, reg in enumerate(regions(layout, shape, mesh))]
    for axis in layout.partial_axes():
        for r in range(mesh.size):
            group = _groups(mesh, axis)[r]
            if group[0] != r or canon[r] != r:
                continue
            for member, part in zip(group, _partial_split(_present(blocks[r]), len(group), rng)):
                blocks[member] = part
    return DistTensor(shape, layout, tuple(_present(blocks[canon[r]])
                                           for r in range(mesh.size)))


def _present(block: np.ndarray | None) -> np.ndarray:
    assert block is not None, "a canonical rank's block is always laid out"
    return block


@lru_cache(maxsize=256)
def _canonicals(layout: Layout, mesh: Mesh) -> tuple[int, ...]:
    """Per rank, the rank holding the same data with coordinate 0 on every broadcast axis
    (computed once per (layout, mesh))."""
    out = []
    for rank in range(mesh.size):
        coords = list(mesh.coords(rank))
        for a, p in enumerate(layout.placements):
            if isinstance(p, Broadcast):
                coords[a] = 0
        out.append(mesh.rank(tuple(coords)))
    return tuple(out)


def assemble(t: DistTensor, mesh: Mesh) -> np.ndarray:
    """The logical value: disjoint blocks placed, Partial summands added, replicas once."""
    if mesh.size == 1:
        return np.asarray(t.blocks[0])
    whole = _stacked_whole(t, mesh)
    if whole is not None:
        return whole
    full = np.zeros(t.shape, dtype=t.blocks[0].dtype if t.blocks else float)
    canon, regs = _canonicals(t.layout, mesh), regions(t.layout, t.shape, mesh)
    partial = bool(t.layout.partial_axes())
    for r in range(mesh.size):
        if canon[r] == r:
            if partial:
                full[regs[r]] += t.blocks[r]
            else:  # canonical regions are disjoint
                full[regs[r]] = t.blocks[r]
    return full


def _stacked_whole(t: DistTensor, mesh: Mesh) -> np.ndarray | None:
    """The logical value as one reshape of stacks that hold every rank in rank order,
    where the ranks' regions are consecutive equal blocks of the first dim (data parallel
    activations); None otherwise."""
    if not t.stacks or not t.shape or t.layout.partial_axes():
        return None
    ranks = tuple(r for rs, _ in t.stacks for r in rs)
    first = t.stacks[0][1]
    rows = first.shape[1] if first.ndim > 1 else 0
    if ranks != tuple(range(mesh.size)) or rows * mesh.size != t.shape[0]:
        return None
    rest = tuple(slice(0, n) for n in t.shape[1:])
    for r, reg in enumerate(regions(t.layout, t.shape, mesh)):
        if reg[0] != slice(r * rows, (r + 1) * rows) or reg[1:] != rest:
            return None
    arrs = [arr for _, arr in t.stacks]
    return (arrs[0] if len(arrs) == 1 else np.concatenate(arrs)).reshape(t.shape)


def replica_mismatch(t: DistTensor, mesh: Mesh) -> float:
    """Largest difference between a block and its replica on a broadcast axis (should be 0)."""
    worst = 0.0
    canon = _canonicals(t.layout, mesh)
    for r in range(mesh.size):
        c = canon[r]
        if c != r and t.blocks[r].size and t.blocks[r] is not t.blocks[c]:
            worst = max(worst, float(np.max(np.abs(t.blocks[r] - t.blocks[c]))))
    return worst


def _intersect(a: Region, b: Region) -> Region | None:
    out = []
    for x, y in zip(a, b):
        lo, hi = max(x.start, y.start), min(x.stop, y.stop)
        if lo >= hi:
            return None
        out.append(slice(lo, hi))
    return tuple(out)


def _shift(region: Region, origin: Region) -> Region:
    return tuple(slice(r.start - o.start, r.stop - o.start) for r, o in zip(region, origin))


@lru_cache(maxsize=64)
def _groups(mesh: Mesh, axis: int) -> tuple[tuple[int, ...], ...]:
    """`mesh.group(r, axis)` of every rank r, each group built once (O(devices) in all)."""
    stride, size = mesh.stride(axis), mesh.shape[axis]
    built: dict[int, tuple[int, ...]] = {}
    out = []
    for r in range(mesh.size):
        base = r - (r // stride % size) * stride
        if base not in built:
            built[base] = tuple(base + i * stride for i in range(size))
        out.append(built[base])
    return tuple(out)


class _GroupSource:
    """The blocks of one group's members, indexed for `gather`: members with the same region
    (replicas or Partial summands) are combined once, in member order (a sum that adds them
    in the order the all-pairs loop did, or the last one, which that loop kept); distinct
    regions are disjoint along the one tensor dim the group's axis splits, so the regions a
    target block overlaps are found by bisection, not by trying every member."""

    def __init__(self, t: DistTensor, src: tuple[Region, ...], members: tuple[int, ...],
                 add: bool) -> None:
        order: dict[tuple[tuple[int, int], ...], list[int]] = {}
        for m in members:
            if all(x.stop > x.start for x in src[m]):
                order.setdefault(_key(src[m]), []).append(m)
        self.pieces = [(src[ms[0]], _combine(t, ms, add)) for ms in order.values()]
        self.dim = dim = _split_dim([reg for reg, _ in self.pieces])
        if dim is not None:
            self.pieces.sort(key=lambda p: p[0][dim].start)
            self.starts = [reg[dim].start for reg, _ in self.pieces]
            self.stops = [reg[dim].stop for reg, _ in self.pieces]

    def overlapping(self, dst: Region) -> list[tuple[Region, np.ndarray]]:
        if self.dim is None:
            return self.pieces
        lo = bisect.bisect_right(self.stops, dst[self.dim].start)
        hi = bisect.bisect_left(self.starts, dst[self.dim].stop)
        return self.pieces[lo:hi]


def _key(region: Region) -> tuple[tuple[int, int], ...]:
    """A hashable form of a region (slices are not hashable before Python 3.12)."""
    return tuple((s.start, s.stop) for s in region)


def _combine(t: DistTensor, members: list[int], add: bool) -> np.ndarray:
    if not add:
        return t.blocks[members[-1]]
    out = np.zeros_like(t.blocks[members[0]])
    for m in members:
        out += t.blocks[m]
    return out


def _split_dim(regs: list[Region]) -> int | None:
    """The one dim along which the (non-empty, distinct) regions differ, if there is one and
    they are disjoint along it; else None (then every region is tried)."""
    if len(regs) < 2:
        return None
    differ = [d for d in range(len(regs[0]))
              if len({(r[d].start, r[d].stop) for r in regs}) > 1]
    if len(differ) != 1:
        return None
    d = differ[0]
    spans = sorted((r[d].start, r[d].stop) for r in regs)
    ok = all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    return d if ok else None


def _gather_into(source: _GroupSource, dst: Region, dtype: np.dtype, add: bool
                 ) -> np.ndarray:
    out = np.zeros(tuple(s.stop - s.start for s in dst), dtype=dtype)
    for src, piece in source.overlapping(dst):
        common = _intersect(src, dst)
        if common is None:
            continue
        if add:
            out[_shift(common, dst)] += piece[_shift(common, src)]
        else:
            out[_shift(common, dst)] = piece[_shift(common, src)]
    return out


def apply_step(t: DistTensor, step: RedistStep, mesh: Mesh, wrong_slice: bool = False
               ) -> DistTensor:
    """Execute one redistribution step on every device. `wrong_slice` (a fault for mutation
    tests) makes a slice step keep its neighbour's block. Members of a group that receive
    the same region receive the same values, computed once."""
    stacked = _stacked_all_reduce(t, step, mesh) if mesh.shape[step.axis] > 1 else None
    if stacked is not None:  # (before the regions of every rank, which it needs not)
        return stacked
    src = regions(t.layout, t.shape, mesh)
    dsts = regions(step.dst, t.shape, mesh)
    if mesh.shape[step.axis] == 1 and src == dsts:  # a relabel moves nothing
        return DistTensor(t.shape, step.dst, t.blocks, t.stacks)
    if step.kind == "to_partial":
        return _to_partial(t, step, mesh, src, dsts)
    groups = _groups(mesh, step.axis)
    dtype = t.blocks[0].dtype
    summed = step.kind in ("all_reduce", "reduce_scatter")
    sources: dict[tuple[int, ...], _GroupSource] = {}
    done: dict[tuple[tuple[int, ...], tuple[tuple[int, int], ...]], np.ndarray] = {}
    blocks = []
    for r in range(mesh.size):
        dst, group = dsts[r], groups[r]
        if wrong_slice and step.kind == "slice":
            dst = dsts[group[(group.index(r) + 1) % len(group)]]
        key = (group, _key(dst))
        if key not in done:
            if group not in sources:
                sources[group] = _GroupSource(t, src, group, summed)
            done[key] = _gather_into(sources[group], dst, dtype, summed)
        blocks.append(done[key])
    return DistTensor(t.shape, step.dst, tuple(blocks))


def _stacked_all_reduce(t: DistTensor, step: RedistStep, mesh: Mesh) -> DistTensor | None:
    """An all_reduce of blocks that each hold the whole tensor (no axis splits a dim,
    before or after: a data-parallel gradient), kept as stacks: one np.add.reduce along
    the step's mesh axis of every rank's stack, which adds a group's members one after
    another in group order as `_combine` does (the same sums, bit for bit); the members
    of a group share the one result. None where this does not apply."""
    if (step.kind != "all_reduce" or not t.stacks or not t.blocks or 0 in t.shape
            or _splits(t.layout, mesh) or _splits(step.dst, mesh)):
        return None
    arr = stack_of(t, tuple(range(mesh.size)))
    if arr.shape[1:] != t.shape:
        return None
    summed = np.add.reduce(arr.reshape(tuple(mesh.shape) + t.shape), axis=step.axis)
    flat = summed.reshape((-1,) + t.shape)
    stride, size = mesh.stride(step.axis), mesh.shape[step.axis]
    views = [flat[i] for i in range(len(flat))]
    return DistTensor(t.shape, step.dst, tuple(
        views[r // (stride * size) * stride + r % stride] for r in range(mesh.size)))


def _splits(layout: Layout, mesh: Mesh) -> bool:
    """Whether an axis of more than one device splits a dim."""
    return any(isinstance(p, Shard) and n > 1 for p, n in zip(layout.placements, mesh.shape))


def _to_partial(t: DistTensor, step: RedistStep, mesh: Mesh, src: tuple[Region, ...],
                dsts: tuple[Region, ...]) -> DistTensor:
    """B | S -> P along the step's axis: from a broadcast axis the group's first member
    keeps its block and the others hold zeros; from a split one every member keeps its
    block, zero-padded to its new region. A block kept whole is kept as is (the same array),
    and the members holding zeros share one read-only zero block per shape."""
    groups, dtype = _groups(mesh, step.axis), t.blocks[0].dtype
    broadcast = _is_broadcast(t.layout, step.axis)
    zeros: dict[tuple[int, ...], np.ndarray] = {}
    blocks = []
    for r in range(mesh.size):
        keep = groups[r][0] == r or not broadcast
        if keep and dsts[r] == src[r]:
            blocks.append(t.blocks[r])
        elif keep:
            blocks.append(_gather_into(_GroupSource(t, src, (r,), False), dsts[r], dtype,
                                       False))
        else:
            shape = tuple(s.stop - s.start for s in dsts[r])
            if shape not in zeros:
                zeros[shape] = np.zeros(shape, dtype=dtype)
                zeros[shape].flags.writeable = False
            blocks.append(zeros[shape])
    same = all(b is a for a, b in zip(t.blocks, blocks))
    return DistTensor(t.shape, step.dst, tuple(blocks), t.stacks if same else ())


def _is_broadcast(layout: Layout, axis: int) -> bool:
    return isinstance(layout.placements[axis], Broadcast)
