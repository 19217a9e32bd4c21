"""An N-D device mesh with named axes; rank order is row-major (the last axis is fastest)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

__all__ = ["Mesh"]


@dataclass(frozen=True)
class Mesh:
    """`axes` are (name, size) pairs, outermost first."""

    axes: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, **sizes: int) -> Mesh:
        return cls(tuple(sizes.items()))

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.axes)

    @cached_property
    def shape(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.axes)

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def axis_index(self, name: str) -> int:
        if name not in self.names:
            raise KeyError(f"mesh has no axis {name!r} (axes: {', '.join(self.names)})")
        return self.names.index(name)

    def coords(self, rank: int) -> tuple[int, ...]:
        out = []
        for size in reversed(self.shape):
            out.append(rank % size)
            rank //= size
        return tuple(reversed(out))

    def rank(self, coords: tuple[int, ...]) -> int:
        r = 0
        for c, size in zip(coords, self.shape):
            r = r * size + c
        return r

    def group(self, rank: int, axis: int) -> list[int]:
        """Ranks that differ from `rank` only along mesh axis `axis`, in axis order."""
        c = list(self.coords(rank))
        out = []
        for i in range(self.shape[axis]):
            c[axis] = i
            out.append(self.rank(tuple(c)))
        return out

    def stride(self, axis: int) -> int:
        """Distance in rank between neighbours along `axis`."""
        return math.prod(self.shape[axis + 1 :])

    def __str__(self) -> str:
        return "(" + ", ".join(f"{n}={s}" for n, s in self.axes) + ")"
