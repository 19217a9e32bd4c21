"""A tensor's layout on a mesh: one placement per mesh axis, and the block each device holds.

When several mesh axes split the same tensor dim, the outer mesh axis splits first and each
inner axis splits the block the outer ones left (mesh order), as in DTensor and in
MindSpore's row-major device matrix. A split that does not divide evenly follows
`torch.chunk`, as DTensor does (`Shard._local_shard_size_and_offset` in
torch/distributed/tensor/placement_types.py, applied axis by axis in
`compute_local_shape_and_global_offset`, torch/distributed/tensor/_utils.py): chunks of
ceil(n / parts), so the last chunks are shorter or empty.

A dim whose Shard placements carry explicit `sizes` (MindSpore's Gather `manual_split`:
"(10, 20, 30, 4) means that the 0th dimension of the first input of the operator is cut into
4 parts", MindSpore tutorial "Other Features" r1.9, interface table) is cut into exactly
those blocks instead: slice k of the dim (numbered row-major over the mesh axes that split
it, outermost first, as the nested chunks are) holds rows [sum(sizes[:k]),
sum(sizes[:k + 1])).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, Partial, Placement, Shard, dual

__all__ = ["Layout", "LayoutError", "chunk", "regions"]


class LayoutError(ValueError):
    """A layout that cannot hold a tensor of the given shape (a split dim that does not exist,
    or, where even splits are required, a split that does not divide)."""


def chunk(n: int, parts: int, index: int) -> tuple[int, int]:
    """(start, size) of chunk `index` when `n` items split `parts` ways as torch.chunk does:
    chunks of ceil(n / parts), the last ones shorter or empty (start clamped to n)."""
    step = -(-n // parts)
    start = min(index * step, n)
    return start, min(n, start + step) - start


@dataclass(frozen=True)
class Layout:
    placements: tuple[Placement, ...]

    def __hash__(self) -> int:
        # cached: layouts key the per-rank region cache (`regions`), looked up per kernel
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(self.placements)
            object.__setattr__(self, "_hash", cached)
        return cached

    def __str__(self) -> str:
        return "(" + ", ".join(str(p) for p in self.placements) + ")"

    @classmethod
    def replicated(cls, mesh: Mesh) -> Layout:

        return cls(tuple(B for _ in range(mesh.ndim)))

    def dual(self) -> Layout:
        return Layout(tuple(dual(p) for p in self.placements))

    def split_factor(self, dim: int, mesh: Mesh) -> int:
        f = 1
        for p, size in zip(self.placements, mesh.shape):
            if isinstance(p, Shard) and p.dim == dim:
                f *= size
        return f

    def partial_axes(self) -> tuple[int, ...]:
        return tuple(i for i, p in enumerate(self.placements) if isinstance(p, Partial))

    def sizes(self, dim: int) -> tuple[int, ...]:
        """The explicit blocks of `dim` (`Shard.sizes`), or () where it is chunked."""
        for p in self.placements:
            if isinstance(p, Shard) and p.dim == dim and p.sizes:
                return p.sizes
        return ()

    def is_even(self, shape: tuple[int, ...], mesh: Mesh) -> bool:
        """True when every split divides its dim evenly (all shards the same shape)."""
        return all(n % self.split_factor(d, mesh) == 0 and len(set(self.sizes(d))) <= 1
                   for d, n in enumerate(shape))

    def _check_sizes(self, d: int, n: int, mesh: Mesh) -> None:
        sizes = self.sizes(d)
        if not sizes:
            return
        if any(isinstance(p, Shard) and p.dim == d and p.sizes != sizes
               for p in self.placements):
            raise LayoutError(f"{self}: the mesh axes splitting dim {d} give it different "
                              f"explicit blocks")
        f = self.split_factor(d, mesh)
        if len(sizes) != f or sum(sizes) != n or min(sizes) <= 0:
            raise LayoutError(f"{self}: explicit blocks {list(sizes)} of dim {d} (size "
                              f"{n}) are not {f} positive sizes summing to {n}")

    def check(self, shape: tuple[int, ...], mesh: Mesh, uneven: bool = False) -> None:
        """Raise LayoutError unless every split dim exists and, unless `uneven`, divides
        evenly. With `uneven`, torch.chunk shards are allowed (see the module doc)."""
        for p in self.placements:
            if isinstance(p, Shard) and not 0 <= p.dim < len(shape):
                raise LayoutError(f"{self} splits dim {p.dim} of a {len(shape)}-D tensor")
        for d, n in enumerate(shape):
            self._check_sizes(d, n, mesh)
        if uneven:
            return
        for d, n in enumerate(shape):
            f = self.split_factor(d, mesh)
            if n % f or len(set(self.sizes(d))) > 1:
                raise LayoutError(f"{self}: dim {d} of size {n} does not split {f} ways")

    def local_shape(self, shape: tuple[int, ...], mesh: Mesh) -> tuple[int, ...]:
        """The LARGEST block any device holds (device 0's under torch.chunk, the largest
        explicit block where a dim has them): it bounds time and memory. Equal to every
        device's block when the splits are even."""
        out = list(shape)
        for p, size in zip(self.placements, mesh.shape):
            if isinstance(p, Shard):
                out[p.dim] = max(p.sizes) if p.sizes else -(-out[p.dim] // size)
        return tuple(out)

    def local_shape_at(self, shape: tuple[int, ...], mesh: Mesh, rank: int
                       ) -> tuple[int, ...]:
        """The block device `rank` holds (shorter or empty on the last shards of an uneven
        split)."""
        return tuple(s.stop - s.start for s in self.region(shape, mesh, rank))

    def region(self, shape: tuple[int, ...], mesh: Mesh, rank: int) -> tuple[slice, ...]:
        """The global index block held by device `rank`: outer axes split first, each split
        a torch.chunk of the block left by the axes before it."""
        return regions(self, tuple(shape), mesh)[rank]

    def offsets(self, shape: tuple[int, ...], mesh: Mesh, rank: int) -> tuple[int, ...]:
        return tuple(s.start for s in self.region(shape, mesh, rank))


@lru_cache(maxsize=256)
def regions(layout: Layout, shape: tuple[int, ...], mesh: Mesh) -> tuple[tuple[slice, ...], ...]:
    """`layout.region` of every rank, computed once per (layout, shape, mesh): O(devices)
    for all of them, where one call per rank per collective member was O(devices^2)."""
    shards = [(a, p.dim) for a, p in enumerate(layout.placements) if isinstance(p, Shard)]
    sizes = mesh.shape
    explicit = {d: layout.sizes(d) for _, d in shards if layout.sizes(d)}
    out = []
    for rank in range(mesh.size):
        coords = mesh.coords(rank)
        start, size = [0] * len(shape), list(shape)
        block = dict.fromkeys(explicit, 0)
        for axis, dim in shards:
            if dim in explicit:  # slice number, row-major over the axes splitting dim
                block[dim] = block[dim] * sizes[axis] + coords[axis]
                continue
            offset, size[dim] = chunk(size[dim], sizes[axis], coords[axis])
            start[dim] += offset
        for dim, k in block.items():
            start[dim], size[dim] = sum(explicit[dim][:k]), explicit[dim][k]
        out.append(tuple(slice(s, s + n) for s, n in zip(start, size)))
    return tuple(out)
