"""The redistribution planner: the cheapest per-axis steps that turn one layout into another.

Along one mesh axis a placement change is one step (`redist_steps`: the kinds of step, their
bytes and prices; `redist_search`: the search below).

A step along axis `a` runs inside every group of devices that differ only in their
coordinate on `a`. It is legal when `a` is the innermost axis (of more than one device)
splitting each tensor dim the step gathers or splits, before and after: only then are the
members' blocks the pieces of one block (the outer axes split first, see `layout`).

On an N-D mesh the ORDER and choice of the steps matter: slicing on one axis before a
collective on another shrinks the collective (`B,P -> S(0),B`), a reduce_scatter before an
all_reduce shrinks it (`P,P -> S(0),B`), an all_to_all replaces all_gather + slice. The
planner is a shortest-path search (Dijkstra) over layouts whose edges are the legal
single-axis steps, priced by `cost`: by default `moved_bytes`, the bytes one device sends
with a bandwidth-optimal algorithm; callers with a hardware profile pass `link_seconds`
(one callable per profile: plans are cached on it). Ties go to fewer collectives, then
fewer reductions, then fewer steps. Axes of one device are relabelled first (free).
Partial intermediates are allowed on any axis: zero-padding a split into a Partial value is
free and lets an outer axis slice the dim first, so a reduce_scatter re-nests the split
(`B,S(0) -> S(0),S(0)` on 2 x 2: 32 B per device for an (8, 4) float32, not two
all_to_alls' 48 B). `enable_alltoall=False` (MindSpore's
`set_auto_parallel_context(enable_alltoall=False)`) forbids all_to_all, so S(d) -> S(e)
becomes all_gather + slice. One search per source answers every target (`plan_costs`
prices a row of propagation's cost tables from it).
"""

from __future__ import annotations

import math
from functools import lru_cache

from simulator.sharding.layout import Layout, LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.redist_search import Ctx, code, search, search_from
from simulator.sharding.redist_steps import RedistStep, StepCost, moved_bytes

__all__ = ["plan_redistribution", "plan_costs"]


@lru_cache(maxsize=1 << 14)
def _plan(src: Layout, dst: Layout, ctx: Ctx) -> tuple[RedistStep, ...]:
    steps, cur = [], list(src.placements)
    for a, size in enumerate(ctx.mesh.shape):
        if size == 1 and cur[a] != dst.placements[a]:
            before = Layout(tuple(cur))
            cur[a] = dst.placements[a]
            steps.append(RedistStep("relabel", a, before, Layout(tuple(cur)), 0.0))
    return tuple(steps) + search(tuple(code(p) for p in cur),
                                  tuple(code(p) for p in dst.placements), ctx)


@lru_cache(maxsize=1 << 12)
def plan_costs(src: Layout, dsts: tuple[Layout, ...], shape: tuple[int, ...], mesh: Mesh,
               itemsize: int = 4) -> tuple[float, ...]:
    """`plan_cost(plan_redistribution(src, dst, shape, mesh, itemsize))` for each dst
    (bytes one device sends, `moved_bytes`), inf where plan_redistribution raises
    LayoutError: the same plans, read off the search without building their steps."""
    try:
        src.check(shape, mesh, uneven=True)
    except LayoutError:
        return (math.inf,) * len(dsts)
    ctx = Ctx(tuple(shape), mesh, itemsize, moved_bytes, True, _blocks(src, src, shape))
    out = []
    for dst in dsts:
        try:
            dst.check(shape, mesh, uneven=True)
        except LayoutError:
            out.append(math.inf)
            continue
        if src == dst:
            out.append(0.0)
            continue
        # axes of one device are relabelled first, free (as `_plan` does)
        start = tuple(code(d if size == 1 else p) for p, d, size
                      in zip(src.placements, dst.placements, mesh.shape))
        tree = search_from(start, ctx)
        out.append(tree.price(tree.space.id(tuple(code(p) for p in dst.placements))))
    return tuple(out)


def _blocks(src: Layout, dst: Layout, shape: tuple[int, ...]
            ) -> tuple[tuple[int, ...], ...]:
    """The explicit blocks of each dim (`Shard.sizes`), () where the dim is chunked;
    LayoutError where src and dst cut a dim differently and one of them has explicit
    blocks (they are kept as they are, never gathered or re-split: a Gather's
    manual_split table, read by that Gather only)."""
    out = []
    for d in range(len(shape)):
        a, b = src.sizes(d), dst.sizes(d)
        if a != b:
            raise LayoutError(f"{src} -> {dst}: explicit blocks of dim {d} are kept as "
                              f"they are, not gathered or re-split")
        out.append(a)
    return tuple(out) if any(out) else ()


def plan_redistribution(src: Layout, dst: Layout, shape: tuple[int, ...], mesh: Mesh,
                        itemsize: int = 4, *, cost: StepCost = moved_bytes,
                        enable_alltoall: bool = True) -> list[RedistStep]:
    """The cheapest steps from `src` to `dst` under `cost` (empty when equal). Uneven
    (torch.chunk) splits are allowed; LayoutError if a layout splits a missing dim."""
    src.check(shape, mesh, uneven=True)
    dst.check(shape, mesh, uneven=True)
    if src == dst:
        return []
    ctx = Ctx(tuple(shape), mesh, itemsize, cost, enable_alltoall, _blocks(src, dst, shape))
    return list(_plan(src, dst, ctx))
