"""A tensor's layout on a mesh: one placement per mesh axis, and the block each device holds.

When several mesh axes split the same tensor dim, the outer mesh axis splits first (mixed
radix in mesh order), as in DTensor and in MindSpore's row-major device matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Partial, Placement, Shard, dual

__all__ = ["Layout", "LayoutError"]


class LayoutError(ValueError):
    """A layout that cannot hold a tensor of the given shape (a split that does not divide)."""


@dataclass(frozen=True)
class Layout:
    placements: tuple[Placement, ...]

    def __str__(self) -> str:
        return "(" + ", ".join(str(p) for p in self.placements) + ")"

    @classmethod
    def replicated(cls, mesh: Mesh) -> Layout:
        from simulator.sharding.placement import B

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

    def check(self, shape: tuple[int, ...], mesh: Mesh) -> None:
        """Raise LayoutError unless every split dim exists and divides evenly."""
        for p in self.placements:
            if isinstance(p, Shard) and not 0 <= p.dim < len(shape):
                raise LayoutError(f"{self} splits dim {p.dim} of a {len(shape)}-D tensor")
        for d, n in enumerate(shape):
            f = self.split_factor(d, mesh)
            if n % f:
                raise LayoutError(f"{self}: dim {d} of size {n} does not split {f} ways")

    def local_shape(self, shape: tuple[int, ...], mesh: Mesh) -> tuple[int, ...]:
        return tuple(n // self.split_factor(d, mesh) for d, n in enumerate(shape))

    def region(self, shape: tuple[int, ...], mesh: Mesh, rank: int) -> tuple[slice, ...]:
        """The global index block held by device `rank`."""
        coords = mesh.coords(rank)
        out = []
        for d, n in enumerate(shape):
            index, parts = 0, 1
            for p, c, size in zip(self.placements, coords, mesh.shape):
                if isinstance(p, Shard) and p.dim == d:
                    index, parts = index * size + c, parts * size
            step = n // parts
            out.append(slice(index * step, (index + 1) * step))
        return tuple(out)

    def offsets(self, shape: tuple[int, ...], mesh: Mesh, rank: int) -> tuple[int, ...]:
        return tuple(s.start for s in self.region(shape, mesh, rank))
