"""The redistribution planner's search (`sharding.redistribute`): Dijkstra over layouts
encoded as tuples of small ints, whose edges are the legal single-axis steps priced by a
`StepCost`, one lazily run search per source and context answering every target."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from functools import lru_cache

from simulator.cost.collectives import busbw_factor
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, Broadcast, P, Placement, Shard
from simulator.sharding.redist_steps import COMM_KINDS, RedistStep, StepCost, moved_bytes

__all__ = ["Ctx", "code", "search_from", "search"]


@dataclass(frozen=True)
class Ctx:
    """What the search needs besides the layouts (hashable: moves are cached on it)."""

    shape: tuple[int, ...]
    mesh: Mesh
    itemsize: int
    cost: StepCost
    enable_alltoall: bool
    # explicit blocks of each dim (`Shard.sizes`, a Gather's manual_split), () where the
    # dim is chunked: such a dim keeps its split (no step gathers or re-splits it) and its
    # local size is its largest block
    blocks: tuple[tuple[int, ...], ...] = ()

    def explicit(self, c: int) -> bool:
        return 0 <= c < len(self.blocks) and bool(self.blocks[c])


# Inside the search a layout is a tuple of small ints (hashed and compared in C):
# Shard(d) -> d, B -> -1, P -> -2.
_B, _P = -1, -2
_REDUCING = ("all_reduce", "reduce_scatter")


def code(p: Placement) -> int:
    if isinstance(p, Shard):
        return p.dim
    return _B if isinstance(p, Broadcast) else _P


def _placement(c: int, ctx: Ctx | None = None) -> Placement:
    if c >= 0:
        return Shard(c, ctx.blocks[c]) if ctx is not None and ctx.explicit(c) else Shard(c)
    return B if c == _B else P


def _innermost(state: tuple[int, ...], axis: int, c: int, sizes: tuple[int, ...]) -> bool:
    """True unless `c` splits a dim that an axis inside `axis` (of >1 device) also splits."""
    return c < 0 or not any(s == c and sizes[b] > 1
                            for b, s in enumerate(state[axis + 1:], axis + 1))


def _kind(src: int, dst: int) -> str | None:
    """`step_kind` on codes."""
    if src == dst:
        return None
    if dst == _P:
        return "to_partial"
    if src == _P:
        return "all_reduce" if dst == _B else "reduce_scatter"
    if src == _B:
        return "slice"
    return "all_gather" if dst == _B else "all_to_all"


_Legal = tuple[tuple[int, ...], str, int, float]


@lru_cache(maxsize=1 << 16)
def _legal(state: tuple[int, ...], ctx: Ctx) -> tuple[_Legal, ...]:
    """Every legal single-axis step out of `state`, inner axes first: (next state, kind,
    axis, bytes), on codes only. `bytes` follows nccl-tests (`redist_steps`) for the
    largest block (`Layout.local_shape`)."""
    out = []
    sizes = ctx.mesh.shape
    local = list(ctx.shape)  # `Layout.local_shape` of `state`
    for c, size in zip(state, sizes):
        if c >= 0:
            local[c] = max(ctx.blocks[c]) if ctx.explicit(c) else -(-local[c] // size)
    n = math.prod(local) * ctx.itemsize
    for a in reversed(range(len(sizes))):
        if sizes[a] == 1 or not _innermost(state, a, state[a], sizes) or ctx.explicit(
                state[a]):
            continue
        for c in (_B, *range(len(ctx.shape)), _P):
            kind = _kind(state[a], c)
            if kind is None or not _innermost(state, a, c, sizes) or ctx.explicit(c) or (
                    kind == "all_to_all" and not ctx.enable_alltoall):
                continue
            nbytes = (0.0 if kind not in COMM_KINDS else
                      float(n * sizes[a] if kind == "all_gather" else
                            _padded(n, local, c, sizes[a], ctx.itemsize)))
            out.append((state[:a] + (c,) + state[a + 1:], kind, a, nbytes))
    return tuple(out)


def _padded(n: int, local: list[int], dim: int, parts: int, itemsize: int) -> int:
    """The buffer of a step that splits `dim` of the block `local` (`n` bytes) `parts`
    ways (reduce_scatter, all_to_all), padded as DTensor pads a dim the parts do not
    divide to parts * ceil(size / parts) (`Shard._reduce_shard_tensor` splits
    `with_padding`, torch/distributed/tensor/placement_types.py); `n` where they do, or
    where the step splits no dim."""
    if dim < 0 or local[dim] % parts == 0:
        return n
    return n // local[dim] * (-(-local[dim] // parts) * parts) if local[dim] else 0


_Move = tuple[tuple[int, ...], RedistStep, float, int, int]


@lru_cache(maxsize=1 << 16)
def _moves(state: tuple[int, ...], ctx: Ctx) -> tuple[_Move, ...]:
    """`_legal`'s steps as RedistSteps: (next state, step, price, 1 if a collective, 1 if a
    reduction)."""
    out = []
    before = Layout(tuple(_placement(c, ctx) for c in state))
    for nxt, kind, a, nbytes in _legal(state, ctx):
        step = RedistStep(kind, a, before, Layout(tuple(_placement(x, ctx) for x in nxt)), nbytes)
        out.append((nxt, step, ctx.cost(step, ctx.mesh), int(step.is_comm),
                    int(kind in _REDUCING)))
    return tuple(out)


def _priced(state: tuple[int, ...], ctx: Ctx) -> list[tuple[tuple[int, ...], float, int, int]]:
    """(next state, price, 1 if a collective, 1 if a reduction) of each of `_moves`; under
    `moved_bytes` priced on codes (the same product `moved_bytes` takes) without the steps."""
    if ctx.cost is not moved_bytes:
        return [(nxt, price, comm, red) for nxt, _, price, comm, red in _moves(state, ctx)]
    sizes = ctx.mesh.shape
    return [(nxt, busbw_factor(kind, sizes[a]) * nbytes if kind in COMM_KINDS else 0.0,
             int(kind in COMM_KINDS), int(kind in _REDUCING))
            for nxt, kind, a, nbytes in _legal(state, ctx)]


def _rounded(total: float) -> float:
    # 12 significant digits: equal-cost orders summed in another order still tie.
    return float(f"{total:.12g}")


# A search key (cost, collectives, reductions, steps) is held as (cost, packed) with the three
# counts packed in one int, most significant first: tuples compare the same, in fewer steps.
_COUNT_BITS = 21
_Move4 = tuple[int, float, int, int]  # next layout's number, price, packed counts, position


class _Space:
    """The layouts one context's searches reach, numbered, with each one's moves as
    (next number, price, packed counts of the move, its position in `_moves`) and the
    rounding of every total met: built once per context and shared by the searches from
    every source, so a search's inner loop indexes and compares small values."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.index: dict[tuple[int, ...], int] = {}
        self.states: list[tuple[int, ...]] = []
        self.adj: list[tuple[_Move4, ...] | None] = []
        self.rounded: dict[float, float] = {}

    def id(self, state: tuple[int, ...]) -> int:
        i = self.index.get(state)
        if i is None:
            i = self.index[state] = len(self.states)
            self.states.append(state)
            self.adj.append(None)
        return i

    def moves(self, i: int) -> tuple[_Move4, ...]:
        out = self.adj[i]
        if out is None:
            out = self.adj[i] = tuple(
                (self.id(nxt), price,
                 (comm << 2 * _COUNT_BITS) + (red << _COUNT_BITS) + 1, pos)
                for pos, (nxt, price, comm, red) in enumerate(
                    _priced(self.states[i], self.ctx)))
        return out

    def step(self, i: int, pos: int) -> RedistStep:
        """The move at `pos` out of layout i."""
        return _moves(self.states[i], self.ctx)[pos][1]


@lru_cache(maxsize=1 << 6)
def _space(ctx: Ctx) -> _Space:
    return _Space(ctx)


class _Dijkstra:
    """Dijkstra from one layout over legal steps, run only as far as the targets asked so
    far need (one search answers every target of the same source). Keys: (cost,
    collectives, reductions, steps), so among equal costs fewer collectives win, then
    fewer reducing ones (all_gather + slice over to_partial + reduce_scatter), then fewer
    steps; among equal keys the path found first. `back`: each reached layout's last step
    (its predecessor and the move's position); a layout's entry is final once it has been
    popped (`done`): every key left on the heap is at least its own and prices are not
    negative, so no later path improves it (a move into a final layout is not even
    priced: its key would be larger), and the answer is the full search's. Per layout
    number (lists, grown as the space numbers more layouts): the best key's rounded cost
    (None: not reached) and packed counts, its heap entry's sequence number, `back`."""

    def __init__(self, start: tuple[int, ...], ctx: Ctx) -> None:
        self.space = _space(ctx)
        self.start = self.space.id(start)
        self.cost: list[float | None] = []
        self.counts: list[int] = []
        self.seqs: list[int] = []
        self.back: list[tuple[int, int] | None] = []
        self.done = bytearray()
        self._grow()
        self.cost[self.start], self.counts[self.start], self.seqs[self.start] = 0.0, 0, 0
        self.heap: list[tuple[float, int, int, float, int]] = [(0.0, 0, 0, 0.0, self.start)]
        self.seq = 0

    def _grow(self) -> None:
        more = len(self.space.states) - len(self.done)
        self.cost += [None] * more
        self.counts += [0] * more
        self.seqs += [0] * more
        self.back += [None] * more
        self.done += bytes(more)

    def settle(self, goal: int) -> None:
        """Search on until `goal` is final (or every reachable layout is)."""
        space, done, heap, back = self.space, self.done, self.heap, self.back
        cost, counts, seqs = self.cost, self.counts, self.seqs
        adj, states, rounded = space.adj, space.states, space.rounded
        pop, push, seq = heapq.heappop, heapq.heappush, self.seq
        if goal >= len(done):
            self._grow()
        while not done[goal] and heap:
            r0, c0, s0, total, i = pop(heap)
            if s0 != seqs[i]:  # superseded by a better key (pushed later)
                continue
            done[i] = 1
            moves = adj[i] or space.moves(i)
            if len(done) < len(states):
                self._grow()
            for j, price, inc, pos in moves:
                if done[j]:
                    continue
                if price:
                    t = total + price
                    r = rounded.get(t)
                    if r is None:
                        r = rounded[t] = _rounded(t)
                else:  # total + 0.0 is total, whose rounding is r0
                    t, r = total, r0
                c = c0 + inc
                old = cost[j]
                if old is None or r < old or (r == old and c < counts[j]):
                    seq += 1
                    cost[j], counts[j], seqs[j], back[j] = r, c, seq, (i, pos)
                    push(heap, (r, c, seq, t, j))
        self.seq = seq

    def path(self, goal: int) -> list[tuple[int, int]]:
        """The cheapest path to `goal`: (layout number, move position) of each step."""
        self.settle(goal)
        path = []
        while goal != self.start:
            step = self.back[goal]
            if step is None:  # not reachable: as the search over every layout, KeyError
                raise KeyError(self.space.states[goal])
            goal, pos = step
            path.append((goal, pos))
        return path[::-1]

    def price(self, goal: int) -> float:
        """`plan_cost` of the path to `goal` (its prices summed in path order, as
        `plan_cost` sums them)."""
        prices = [self.space.moves(i)[pos][1] for i, pos in self.path(goal)]
        return float(sum(p for p in prices if p))


@lru_cache(maxsize=1 << 9)
def search_from(start: tuple[int, ...], ctx: Ctx) -> _Dijkstra:
    """The (lazily run) search from `start`, one per source and context."""
    return _Dijkstra(start, ctx)


def search(start: tuple[int, ...], goal: tuple[int, ...], ctx: Ctx
            ) -> tuple[RedistStep, ...]:
    tree = search_from(start, ctx)
    return tuple(tree.space.step(i, pos) for i, pos in tree.path(tree.space.id(goal)))
