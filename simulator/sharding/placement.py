"""Placements along one mesh axis: split along a tensor dim, broadcast (replicate), partial sum.

The SBP view of OneFlow (Yuan et al.): `S(d)`, `B`, `P`. Printed as in the literature; parsed
from either SBP spelling (`B`) or DTensor's (`R`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Shard", "Broadcast", "Partial", "Placement", "parse_placement", "dual", "B", "P"]


@dataclass(frozen=True)
class Shard:
    """Each device along the axis holds an equal contiguous slice of tensor dim `dim`
    (torch.chunk's pieces where it does not divide, `sharding.layout`). `sizes`, when
    given, are explicit blocks instead: the rows of each slice of the dim over ALL the mesh
    axes that split it, in slice order (MindSpore's Gather `manual_split`; every Shard of
    that dim carries the same sizes, `Layout.check`)."""

    dim: int
    sizes: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True)
class Broadcast:
    """Every device along the axis holds the whole value (GShard's 'replicate')."""

    def __str__(self) -> str:
        return "B"


@dataclass(frozen=True)
class Partial:
    """Every device holds a summand; the value is the sum over the axis ('unreduced')."""

    def __str__(self) -> str:
        return "P"


Placement = Shard | Broadcast | Partial
B = Broadcast()
P = Partial()
_SPLIT = re.compile(r"^S\((\d+)\)$")


def parse_placement(text: str) -> Placement:
    """'S(1)' / 'B' / 'R' / 'P' -> placement; ValueError with the allowed forms otherwise."""
    t = text.strip().replace(" ", "")
    if t in ("B", "R"):
        return B
    if t == "P":
        return P
    m = _SPLIT.match(t)
    if m:
        return Shard(int(m.group(1)))
    raise ValueError(f"{text!r} is not a placement (allowed: S(<dim>), B, P)")


def dual(p: Placement) -> Placement:
    """The placement of a gradient whose forward value had placement `p`.

    Transposing the linear maps: a copy (B) transposes to a sum (P), a sum to a copy, and a
    slice to the same slice.
    """
    if isinstance(p, Broadcast):
        return P
    if isinstance(p, Partial):
        return B
    return p
