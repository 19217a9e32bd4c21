"""An op's local kernels on every device of the mesh, stacked or rank by rank.

Stacked: the ranks whose blocks have the same shapes (every rank under an even split) run
as one call of the family's stacked kernel (`numeric.stacked`), each on its own block with
its own offsets; the output is kept both as that stack and as one view per rank, so the
next op stacks it again without copying. Rank by rank: the family's kernel (or its group
kernel, for an internal label) once per device, as real devices run it. Both compute every
device's block; `vectorised=False` forces the second (tests compare the two).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from simulator.graph.ops import KernelCtx
from simulator.numeric import stacked_offsets, stacked_saved
from simulator.numeric.dist import DistTensor, Stack, stack_of
from simulator.numeric.stacked import StackCtx, stacked_kernel
from simulator.sharding.layout import Layout, regions
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import OpPlan, ShardingPlan, group_ranks

__all__ = ["forward_blocks", "vjp_blocks", "rank_ctxs"]

Blocks = tuple[np.ndarray, ...]
_ = stacked_offsets, stacked_saved  # register the offset-reading and saving families


@lru_cache(maxsize=1024)
def _starts_sizes(layout: Layout, shape: tuple[int, ...], mesh: Mesh
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's block start and size ([devices, ndim] int arrays)."""
    regs = regions(layout, shape, mesh)
    starts = np.array([[s.start for s in r] for r in regs], dtype=np.int64)
    stops = np.array([[s.stop for s in r] for r in regs], dtype=np.int64)
    starts, stops = starts.reshape(mesh.size, len(shape)), stops.reshape(mesh.size, len(shape))
    return starts, stops - starts


def _layouts(p: OpPlan, plan: ShardingPlan) -> list[tuple[Layout, tuple[int, ...]]]:
    shapes = plan.graph.shapes(p.op)
    out = [(p.sig.input_layout(i), tuple(s)) for i, s in enumerate(shapes)]
    return out + [(p.sig.output_layout, tuple(plan.graph.tensors[p.op.output].shape))]


@lru_cache(maxsize=256)
def rank_ctxs(plan: ShardingPlan, p: OpPlan, batch_offset: int) -> tuple[KernelCtx, ...]:
    """`execution.kernel_ctx` of every rank, from the cached block starts."""
    (*ins, (out_layout, out_shape)) = _layouts(p, plan)
    mesh = plan.mesh
    in_starts = [_starts_sizes(lay, s, mesh)[0].tolist() for lay, s in ins]
    out_starts = _starts_sizes(out_layout, out_shape, mesh)[0].tolist()
    shapes = tuple(s for _, s in ins)
    local = out_layout.local_shape(out_shape, mesh)
    return tuple(KernelCtx(shapes, out_shape, tuple(tuple(st[r]) for st in in_starts),
                           tuple(out_starts[r]), local, batch_offset)
                 for r in range(mesh.size))


@lru_cache(maxsize=1024)
def op_stacks(plan: ShardingPlan, p: OpPlan) -> tuple[tuple[tuple[int, ...], ...], int] | None:
    """The stacks of ranks whose input and output blocks have the same shapes, and the
    size of the internal-label groups (1 without one: each stack is ordered group by
    group); None where the op has groups of unequal size or split across stacks."""
    mesh = plan.mesh
    key = np.concatenate([_starts_sizes(lay, s, mesh)[1] for lay, s in _layouts(p, plan)],
                         axis=1)
    _, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    stacks = [tuple(np.flatnonzero(inverse == g).tolist()) for g in range(inverse.max() + 1)]
    groups = group_ranks(p, plan.graph, mesh)
    if groups is None:
        return tuple(stacks), 1
    m = len(groups[0])
    gid = {r: gi for gi, g in enumerate(groups) for r in g}
    ordered = []
    for ranks in stacks:
        members = sorted({gid[r] for r in ranks})
        rs = tuple(r for gi in members for r in groups[gi])
        if any(len(groups[gi]) != m for gi in members) or sorted(rs) != sorted(ranks):
            return None
        ordered.append(rs)
    return tuple(ordered), m


def _stack_ctx(plan: ShardingPlan, p: OpPlan, ranks: tuple[int, ...], batch_offset: int,
               m: int) -> StackCtx:
    (*ins, (out_layout, out_shape)) = _layouts(p, plan)
    idx, mesh = np.asarray(ranks), plan.mesh
    return StackCtx(tuple(s for _, s in ins), out_shape,
                    tuple(_starts_sizes(lay, s, mesh)[0][idx] for lay, s in ins),
                    _starts_sizes(out_layout, out_shape, mesh)[0][idx],
                    out_layout.local_shape(out_shape, mesh), batch_offset, m)


def _scatter(stacks: list[Stack], size: int) -> Blocks:
    """One view per rank of the stacked results (read-only: a block is never written)."""
    blocks: list[np.ndarray] = [np.empty(0)] * size
    for ranks, arr in stacks:
        arr.flags.writeable = False
        for i, r in enumerate(ranks):
            blocks[r] = arr[i]
    return tuple(blocks)


def forward_blocks(plan: ShardingPlan, p: OpPlan, ins: list[DistTensor], batch_offset: int,
                   vectorised: bool = True) -> tuple[Blocks, tuple[Stack, ...]]:
    """Every rank's output block of `p` (and the stacks they are views of)."""
    fam, mesh = p.op.family, plan.mesh
    kernel = stacked_kernel(fam.name) if vectorised else None
    found = op_stacks(plan, p) if kernel is not None else None
    if kernel is None or found is None:
        ctxs = rank_ctxs(plan, p, batch_offset)
        local = [[t.blocks[r] for t in ins] for r in range(mesh.size)]
        groups = group_ranks(p, plan.graph, mesh)
        if groups is not None and fam.group is not None:
            return tuple(fam.group.forward(local, p.op.attrs, list(ctxs), groups)), ()
        return tuple(fam.forward(local[r], p.op.attrs, ctxs[r]) for r in range(mesh.size)), ()
    stacks, m = found
    out = [(ranks, kernel.forward([stack_of(t, ranks) for t in ins], p.op.attrs,
                                  _stack_ctx(plan, p, ranks, batch_offset, m)))
           for ranks in stacks]
    return _scatter(out, mesh.size), tuple(out)


def _per_rank_vjp(plan: ShardingPlan, p: OpPlan, ins: list[DistTensor], y: DistTensor,
                  dy: DistTensor, batch_offset: int) -> list[list]:
    fam, mesh = p.op.family, plan.mesh
    ctxs = rank_ctxs(plan, p, batch_offset)
    local = [[t.blocks[r] for t in ins] for r in range(mesh.size)]
    groups = group_ranks(p, plan.graph, mesh)
    if groups is not None and fam.group is not None:
        return fam.group.vjp(local, list(y.blocks), list(dy.blocks), p.op.attrs, list(ctxs),
                             groups)
    return [fam.vjp(local[r], y.blocks[r], dy.blocks[r], p.op.attrs, ctxs[r])
            for r in range(mesh.size)]


def vjp_blocks(plan: ShardingPlan, p: OpPlan, ins: list[DistTensor], y: DistTensor,
               dy: DistTensor, batch_offset: int, vectorised: bool = True
               ) -> list[tuple[Blocks, tuple[Stack, ...]] | None]:
    """Per input of `p`: every rank's gradient block (None where the family gives none)."""
    kernel = stacked_kernel(p.op.family.name) if vectorised else None
    found = op_stacks(plan, p) if kernel is not None else None
    if kernel is None or found is None or y.layout != p.sig.output_layout:
        per_rank = _per_rank_vjp(plan, p, ins, y, dy, batch_offset)
        return [None if per_rank[0][i] is None else
                (tuple(_checked(g[i]) for g in per_rank), ()) for i in range(len(ins))]
    stacks, m = found
    grads = [(ranks, kernel.vjp([stack_of(t, ranks) for t in ins], stack_of(y, ranks),
                                stack_of(dy, ranks), p.op.attrs,
                                _stack_ctx(plan, p, ranks, batch_offset, m)))
             for ranks in stacks]
    out: list[tuple[Blocks, tuple[Stack, ...]] | None] = []
    for i in range(len(ins)):
        if grads[0][1][i] is None:
            out.append(None)
            continue
        per_input = [(ranks, _checked(g[i])) for ranks, g in grads]
        out.append((_scatter(per_input, plan.mesh.size), tuple(per_input)))
    return out


def _checked(g: np.ndarray | None) -> np.ndarray:
    assert g is not None, "a VJP returned no gradient for a differentiable input"
    return g
