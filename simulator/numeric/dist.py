"""Distributed tensors on virtual numpy devices, and the collectives that move their blocks.

Every step is real data movement between device blocks addressed by global index regions, so
nested splits (two mesh axes on one dim) and Partial values on other axes come out right
without special cases: an all_gather copies the members' blocks into the new region, a
reduce_scatter / all_reduce sums the members' blocks over it, a slice keeps a sub-block.
Uneven (torch.chunk) splits need nothing more: a device's block is its region, shorter or
empty on the last shards (`Layout.local_shape_at`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Broadcast
from simulator.sharding.redistribute import RedistStep

__all__ = ["DistTensor", "distribute", "assemble", "replica_mismatch", "apply_step"]

Region = tuple[slice, ...]


@dataclass(frozen=True, eq=False)
class DistTensor:
    """A logical tensor of `shape` held as one block per device rank under `layout`."""

    shape: tuple[int, ...]
    layout: Layout
    blocks: tuple[np.ndarray, ...]


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
    blocks = [full[_region(layout, shape, mesh, r)].copy() for r in range(mesh.size)]
    for axis in layout.partial_axes():
        for r in range(mesh.size):
            group = mesh.group(r, axis)
            if group[0] != r or _canonical(layout, mesh, r) != r:
                continue
            for member, part in zip(group, _partial_split(blocks[r], len(group), rng)):
                blocks[member] = part
    for r in range(mesh.size):
        blocks[r] = blocks[_canonical(layout, mesh, r)]
    return DistTensor(shape, layout, tuple(b.copy() for b in blocks))


def _canonical(layout: Layout, mesh: Mesh, rank: int) -> int:
    """The rank holding the same data with coordinate 0 on every broadcast axis."""
    coords = list(mesh.coords(rank))
    for a, p in enumerate(layout.placements):
        if isinstance(p, Broadcast):
            coords[a] = 0
    return mesh.rank(tuple(coords))


def assemble(t: DistTensor, mesh: Mesh) -> np.ndarray:
    """The logical value: disjoint blocks placed, Partial summands added, replicas once."""
    full = np.zeros(t.shape, dtype=t.blocks[0].dtype if t.blocks else float)
    for r in range(mesh.size):
        if _canonical(t.layout, mesh, r) == r:
            full[_region(t.layout, t.shape, mesh, r)] += t.blocks[r]
    return full


def replica_mismatch(t: DistTensor, mesh: Mesh) -> float:
    """Largest difference between a block and its replica on a broadcast axis (should be 0)."""
    worst = 0.0
    for r in range(mesh.size):
        c = _canonical(t.layout, mesh, r)
        if c != r and t.blocks[r].size:
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


def _gather_into(t: DistTensor, dst: Region, members: list[int], mesh: Mesh, add: bool
                 ) -> np.ndarray:
    out = np.zeros(tuple(s.stop - s.start for s in dst), dtype=t.blocks[0].dtype)
    for m in members:
        src = _region(t.layout, t.shape, mesh, m)
        common = _intersect(src, dst)
        if common is None:
            continue
        piece = t.blocks[m][_shift(common, src)]
        if add:
            out[_shift(common, dst)] += piece
        else:
            out[_shift(common, dst)] = piece
    return out


def apply_step(t: DistTensor, step: RedistStep, mesh: Mesh, wrong_slice: bool = False
               ) -> DistTensor:
    """Execute one redistribution step on every device. `wrong_slice` (a fault for mutation
    tests) makes a slice step keep its neighbour's block."""
    blocks = []
    for r in range(mesh.size):
        dst = _region(step.dst, t.shape, mesh, r)
        group = mesh.group(r, step.axis)
        if step.kind in ("all_reduce", "reduce_scatter"):
            blocks.append(_gather_into(t, dst, group, mesh, add=True))
        elif step.kind == "to_partial":
            keep = group[0] == r or not _is_broadcast(t.layout, step.axis)
            own = [r] if keep else []
            blocks.append(_gather_into(t, dst, own, mesh, add=False))
        else:
            if wrong_slice and step.kind == "slice":
                pos = group.index(r)
                dst = _region(step.dst, t.shape, mesh, group[(pos + 1) % len(group)])
            blocks.append(_gather_into(t, dst, group, mesh, add=False))
    return DistTensor(t.shape, step.dst, tuple(blocks))


def _is_broadcast(layout: Layout, axis: int) -> bool:
    return isinstance(layout.placements[axis], Broadcast)
