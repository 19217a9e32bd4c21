"""The redistribution planner: which collectives turn one layout into another.

Per mesh axis, a placement change maps to one step:

    P -> B     all_reduce            S(d) -> B     all_gather(d)     (any, on 1 device) relabel
    P -> S(d)  reduce_scatter(d)     S(d) -> S(e)  all_to_all(d -> e)
    B -> S(d)  local slice           B | S -> P    local (keep the value on one rank)

Two phases keep every step a collective inside one axis group: first, innermost axis
outward, Partial values are reduced and splits undone (straight to the target split by
reduce_scatter / all_to_all where that is legal); then, outermost inward, local slices.
A split nested inside an outer split that changes is undone first, since the blocks below a
changing outer split are not the members' blocks. `bytes` of a
step follows nccl-tests (all_gather: the gathered buffer; reduce_scatter: the input; others:
the buffer), for ONE device's local block. Moving a Partial value on to a slice of itself is
never free: the planner reduces first.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, Broadcast, Partial, Placement, Shard

__all__ = ["RedistStep", "plan_redistribution", "step_kind", "COMM_KINDS"]

COMM_KINDS = ("all_reduce", "reduce_scatter", "all_to_all", "all_gather")


@dataclass(frozen=True)
class RedistStep:
    """One step along mesh axis `axis` from layout `src` to layout `dst`."""

    kind: str
    axis: int
    src: Layout
    dst: Layout
    bytes: float

    @property
    def is_comm(self) -> bool:
        return self.kind in COMM_KINDS

    def __str__(self) -> str:
        return f"{self.kind}@{self.axis}: {self.src} -> {self.dst} ({self.bytes:.0f} B)"


def step_kind(src: Placement, dst: Placement) -> str | None:
    """The step that changes `src` into `dst` along one axis; None when they are equal."""
    if src == dst:
        return None
    if isinstance(dst, Partial):
        return "to_partial"
    if isinstance(src, Partial):
        return "all_reduce" if isinstance(dst, Broadcast) else "reduce_scatter"
    if isinstance(src, Broadcast):
        return "slice"
    return "all_gather" if isinstance(dst, Broadcast) else "all_to_all"


def _bytes(kind: str, before: Layout, after: Layout, shape: tuple[int, ...], mesh: Mesh,
           itemsize: int) -> float:
    if kind not in COMM_KINDS:
        return 0.0
    ref = after if kind == "all_gather" else before
    n = 1
    for size in ref.local_shape(shape, mesh):
        n *= size
    return float(n * itemsize)


def _splits_inner(cur: list[Placement], axis: int, dim: int) -> bool:
    """True when an axis inside `axis` (a later mesh axis) splits `dim`."""
    return any(isinstance(p, Shard) and p.dim == dim for p in cur[axis + 1 :])


def _outer_change(src: Layout, dst: Layout, axis: int, dim: int) -> bool:
    """True when an axis outside `axis` changes how `dim` is split, so the nested blocks
    below it must be undone first."""
    for b in range(axis):
        s, d = src.placements[b], dst.placements[b]
        if s != d and Shard(dim) in (s, d):
            return True
    return False


class _Walk:
    def __init__(self, src: Layout, shape: tuple[int, ...], mesh: Mesh, itemsize: int):
        self.cur, self.shape, self.mesh, self.itemsize = list(src.placements), shape, mesh, \
            itemsize
        self.steps: list[RedistStep] = []

    def to(self, axis: int, placement: Placement) -> None:
        before = Layout(tuple(self.cur))
        # Along an axis of one device every placement holds the same data: no collective.
        kind = "relabel" if self.mesh.shape[axis] == 1 else step_kind(self.cur[axis],
                                                                      placement)
        self.cur[axis] = placement
        after = Layout(tuple(self.cur))
        after.check(self.shape, self.mesh)
        self.steps.append(RedistStep(kind, axis, before, after, _bytes(
            kind, before, after, self.shape, self.mesh, self.itemsize)))


def _undo(w: _Walk, src: Layout, dst: Layout) -> None:
    """Phase 1, innermost axis first: reduce Partial values and undo splits that change or
    that sit inside a changing outer split, moving straight to the target split where legal."""
    for a in reversed(range(w.mesh.ndim)):
        cur, want = w.cur[a], dst.placements[a]
        nested = isinstance(cur, Shard) and _outer_change(src, dst, a, cur.dim)
        if cur == want and not nested:
            continue
        if isinstance(cur, Partial) and isinstance(want, Partial):
            continue
        direct = (isinstance(want, Shard) and not _splits_inner(w.cur, a, want.dim)
                  and not _outer_change(src, dst, a, want.dim))
        if isinstance(cur, Partial | Shard):
            w.to(a, want if direct and not nested else B)


def _apply(w: _Walk, dst: Layout) -> None:
    """Phase 2, outermost axis first: local slices and Partial conversions."""
    for a in range(w.mesh.ndim):
        if w.cur[a] != dst.placements[a]:
            w.to(a, dst.placements[a])


def plan_redistribution(src: Layout, dst: Layout, shape: tuple[int, ...], mesh: Mesh,
                        itemsize: int = 4) -> list[RedistStep]:
    """The steps from `src` to `dst` (empty when equal). LayoutError if a layout is invalid."""
    src.check(shape, mesh)
    dst.check(shape, mesh)
    if src == dst:
        return []
    w = _Walk(src, shape, mesh, itemsize)
    _undo(w, src, dst)
    _apply(w, dst)
    return w.steps
