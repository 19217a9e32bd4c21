"""The mutation of explicit blocks (MindSpore's Gather `manual_split`, `Shard.sizes`) for
the mutation tests: every block but the first read one row too early, as if its offset
were off by one (`Faults.block_shift`). `verify` must then fail."""

from __future__ import annotations

from simulator.numeric.dist import DistTensor, assemble
from simulator.sharding.layout import regions
from simulator.sharding.mesh import Mesh

__all__ = ["shifted"]


def shifted(t: DistTensor, mesh: Mesh) -> DistTensor:
    """`t` with each block of an explicitly split dim taken one row before its own start
    (blocks starting at row 0 kept); `t` itself where no dim has explicit blocks."""
    dims = [d for d in range(len(t.shape)) if t.layout.sizes(d)]
    if not dims:
        return t
    whole = assemble(t, mesh)
    blocks = []
    for reg in regions(t.layout, t.shape, mesh):
        moved = list(reg)
        for d in dims:
            back = 1 if reg[d].start > 0 else 0
            moved[d] = slice(reg[d].start - back, reg[d].stop - back)
        blocks.append(whole[tuple(moved)].copy())
    return DistTensor(t.shape, t.layout, tuple(blocks))
