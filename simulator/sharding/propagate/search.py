"""Sharding propagation: configured operators keep their signature; every other operator
gets the N-D signature that minimises the whole graph's cost

    C = sum over edges of redistribution bus bytes + sum over operators of compute bytes.

This is MindSpore's cost model in bytes (`operator_costmodel.h`: "the returned value in each
method is bytes of memory size"), read here as:

- **edge**: an activation from its producer to each consumer; a graph input or parameter
  from its first consumer (whose layout it is kept in, as `sharding.plan.build_plan` keeps
  it) to each later one. Cost: the steps `plan_redistribution` plans, each step's bytes
  times nccl-tests' bus factor of its collective on its mesh axis (all-reduce 2(n-1)/n,
  all-gather / reduce-scatter / all-to-all (n-1)/n, a local slice 0; nccl-tests
  doc/PERFORMANCE.md): the bytes one device sends. Forward redistributions only, as in
  MindSpore's sharding propagation (the backward ones are their transposes).
- **node** (compute imbalance): the bytes of the op's local input blocks, MindSpore's
  per-device computation cost (`MatMulCost::GetForwardComputationCost` = slice(A) +
  slice(B)). An op left whole along a mesh axis reads its whole inputs on every device of
  that axis, so an unsplit op costs more.

Each consumer pays its own redistribution: the plan moves a tensor once for two consumers
that want the same layout, which this pairwise model does not credit.

The candidates of an unconfigured op are `rules.signatures` whose splits divide its inputs
and output; by default only those that split a label on every mesh axis (MindSpore's
`fully_use_devices`, see `_free_choices`). Among plans of equal cost the one closest to
the data-parallel default wins (`Problem`), so every search returns one plan. The solvers
(`propagate_solvers.py`) minimise C exactly (dynamic programming on chains and trees, an
ILP on any graph) or greedily (MindSpore's breadth-first propagation).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.cost.collectives import busbw_factor
from simulator.graph.graph import Graph, OpNode
from simulator.sharding.layout import Layout, LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.notation import data_parallel_default, dataset_layout
from simulator.sharding.placement import B, Partial
from simulator.sharding.plan import Strategy, _resolve, op_internal_steps
from simulator.sharding.propagate.problem import Problem
from simulator.sharding.propagate.solvers import (
    solve_dp,
    solve_greedy,
    solve_ilp,
    solve_recursive,
)
from simulator.sharding.redistribute import plan_costs, plan_redistribution
from simulator.sharding.rules import Signature, SignatureError, signatures, split_label

__all__ = ["SEARCH_RUNS", "Problem", "Propagation", "build_problem", "propagate",
           "redistribution_cost", "search_sources"]


@functools.lru_cache(maxsize=1 << 18)
def redistribution_cost(src: Layout, dst: Layout, shape: tuple[int, ...], mesh: Mesh,
                        itemsize: int) -> float:
    """Bus bytes one device sends to turn `src` into `dst` (see the module docstring); inf
    when the planner finds no way (an intermediate layout that does not divide)."""
    try:
        steps = plan_redistribution(src, dst, shape, mesh, itemsize)
    except LayoutError:
        return math.inf
    return float(sum(s.bytes * busbw_factor(s.kind, mesh.shape[s.axis])
                     for s in steps if s.is_comm))


def _fixed_choice(op: OpNode, graph: Graph, mesh: Mesh) -> tuple[Signature, Layout]:
    """A configured op's signature and output layout; SignatureError naming the op."""
    try:
        sig, target = _resolve(op, graph, mesh)
        for i, name in enumerate(op.inputs):
            sig.input_layout(i).check(graph.tensors[name].shape, mesh, uneven=True)
        sig.output_layout.check(graph.tensors[op.output].shape, mesh, uneven=True)
    except (SignatureError, ValueError) as exc:
        raise SignatureError(f"op {op.name!r} ({op.type}): {exc}", op.name) from None
    return sig, target or sig.output_layout


def _free_choices(op: OpNode, graph: Graph, mesh: Mesh, fully_use_devices: bool
                  ) -> tuple[Signature, ...]:
    """Every signature whose splits divide the op's inputs and output evenly; with
    `fully_use_devices`, only those that split a label on every mesh axis (of more than one
    device) when the op has any: MindSpore's `fully_use_devices` (default True,
    `set_algo_parameters`; costmodel_context.h DEFAULT_FULLY_USE_DEVICES), which also keeps
    the cost tables small (an op with k signatures per axis has k^ndim)."""
    view, out_shape = graph.labels(op), graph.tensors[op.output].shape
    sigs = [s for s in signatures(view, mesh, graph.shapes(op)) if all(
        n % s.output_layout.split_factor(d, mesh) == 0 for d, n in enumerate(out_shape))]
    if fully_use_devices:
        splits = {split_label(view, lab) for lab in view.splittable()}
        full = [s for s in sigs if all(a in splits or size == 1
                                       for a, size in zip(s.axes, mesh.shape))]
        sigs = full or sigs
    return tuple(sigs)


def _node_cost(op: OpNode, graph: Graph, mesh: Mesh, sigs: tuple[Signature, ...],
               itemsize: int) -> np.ndarray:
    shapes = graph.shapes(op)
    return np.array([float(itemsize * sum(math.prod(s.input_layout(i).local_shape(sh, mesh))
                                          for i, sh in enumerate(shapes)))
                     + _exchange_bytes(op, graph, mesh, s, itemsize) for s in sigs])


def _exchange_bytes(op: OpNode, graph: Graph, mesh: Mesh, sig: Signature, itemsize: int
                    ) -> float:
    """Bytes of an op's own exchange that depends on the split label (a convolution's halo,
    both passes), so that the search weighs a spatial split against the redistributions it
    saves."""
    group = op.family.group
    if group is None or group.label_comm is None:
        return 0.0
    return float(sum(s.bytes for phase in ("fwd", "bwd")
                     for s in op_internal_steps(op, sig, graph, mesh, itemsize, phase)))


def _tie_rank(op: OpNode, graph: Graph, mesh: Mesh, sigs: tuple[Signature, ...]
              ) -> np.ndarray:
    """Per candidate, the mesh axes on which it differs from the data-parallel default."""
    if len(sigs) == 1:
        return np.zeros(1)
    try:
        dp = data_parallel_default(graph.labels(op), mesh, graph.shapes(op))
    except SignatureError:  # no batch label to split (a reshape that merges dim 0 away)
        return np.zeros(len(sigs))
    return np.array([float(sum(a != b for a, b in zip(s.axes, dp.axes))) for s in sigs])


def _matrix(src: list[Layout], dst: list[Layout], shape: tuple[int, ...], mesh: Mesh,
            itemsize: int) -> np.ndarray:
    """Redistribution cost from each src layout to each dst layout, computed once per pair
    of distinct layouts."""
    si = {x: k for k, x in enumerate(dict.fromkeys(src))}
    di = {x: k for k, x in enumerate(dict.fromkeys(dst))}
    targets = tuple(di)
    small = np.array([plan_costs(a, targets, shape, mesh, itemsize) for a in si])
    return small[np.ix_([si[x] for x in src], [di[x] for x in dst])]


def _kept(layout: Layout) -> Layout:
    return Layout(tuple(B if isinstance(p, Partial) else p for p in layout.placements))


def _loaded(graph: Graph, name: str, mesh: Mesh) -> Layout | None:
    """The layout an input is loaded in (its dataset strategy), None without one."""
    t = graph.tensors[name]
    return dataset_layout(t.load, t.shape, mesh)


def _add(edges: dict[tuple[int, int], np.ndarray], node: list[np.ndarray], u: int, v: int,
         m: np.ndarray) -> None:
    """Add cost matrix m [u, v] to the edge u-v (to the node when u == v: an op that reads
    one tensor twice)."""
    if u == v:
        node[u] = node[u] + np.diag(m)
    elif u < v:
        edges[(u, v)] = edges.get((u, v), 0) + m
    else:
        edges[(v, u)] = edges.get((v, u), 0) + m.T


def _edges(graph: Graph, mesh: Mesh, cands: list[tuple[Signature, ...]],
           outs: list[tuple[Layout, ...]], node: list[np.ndarray], itemsize: int
           ) -> dict[tuple[int, int], np.ndarray]:
    """Every edge's cost matrix (an op reading one tensor twice adds to its node cost)."""
    edges: dict[tuple[int, int], np.ndarray] = {}
    producer = {op.output: v for v, op in enumerate(graph.ops)}
    first: dict[str, tuple[int, int]] = {}
    for v, op in enumerate(graph.ops):
        for i, name in enumerate(op.inputs):
            want = [s.input_layout(i) for s in cands[v]]
            if name in producer:
                u, src = producer[name], list(outs[producer[name]])
            elif (loaded := _loaded(graph, name, mesh)) is not None:  # every consumer
                m = _matrix([loaded], want, graph.tensors[name].shape, mesh, itemsize)
                node[v] = node[v] + m[0]  # pays the move from the dataset's layout
                continue
            elif name in first:
                u, j = first[name]
                src = [_kept(s.input_layout(j)) for s in cands[u]]
            else:
                first[name] = (v, i)
                continue
            m = _matrix(src, want, graph.tensors[name].shape, mesh, itemsize)
            _add(edges, node, u, v, m)
    return edges


def search_sources(graph: Graph, mesh: Mesh, outs: list[tuple[Layout, ...]],
                   cands: list[tuple[Signature, ...]]) -> dict[tuple[int, ...], int]:
    """Per tensor shape, the distinct layouts `_edges` searches redistributions from (each
    one search, shared by the tensors of that shape): producers' output layouts, a
    dataset's layout, a first consumer's kept input layouts."""
    producer = {op.output: v for v, op in enumerate(graph.ops)}
    first: dict[str, tuple[int, int]] = {}
    sources: dict[tuple[int, ...], set[Layout]] = {}
    for v, op in enumerate(graph.ops):
        for i, name in enumerate(op.inputs):
            shape = graph.tensors[name].shape
            if name in producer:
                src = set(outs[producer[name]])
            elif (loaded := _loaded(graph, name, mesh)) is not None:
                src = {loaded}
            elif name in first:
                u, j = first[name]
                src = {_kept(s.input_layout(j)) for s in cands[u]}
            else:
                first[name] = (v, i)
                continue
            sources.setdefault(shape, set()).update(src)
    return {shape: len(src) for shape, src in sources.items()}


def build_problem(graph: Graph, mesh: Mesh, itemsize: int = 4,
                  fully_use_devices: bool = True,
                  check: Callable[[dict[tuple[int, ...], int]], None] | None = None
                  ) -> Problem:
    """The cost tables of propagating over `graph`: ops with a strategy are fixed
    (SignatureError naming the op when their strategy is invalid). `check` sees
    `search_sources` before any search runs (and may raise to refuse the work)."""
    cands: list[tuple[Signature, ...]] = []
    outs: list[tuple[Layout, ...]] = []
    for op in graph.ops:
        if op.strategy is None:
            sigs = _free_choices(op, graph, mesh, fully_use_devices)
            cands.append(sigs)
            outs.append(tuple(s.output_layout for s in sigs))
        else:
            sig, out = _fixed_choice(op, graph, mesh)
            cands.append((sig,))
            outs.append((out,))
    node = [_node_cost(op, graph, mesh, c, itemsize) for op, c in zip(graph.ops, cands)]
    if check is not None:
        check(search_sources(graph, mesh, outs, cands))
    tie = tuple(_tie_rank(op, graph, mesh, c) for op, c in zip(graph.ops, cands))
    edges = _edges(graph, mesh, cands, outs, node, itemsize)
    fixed = tuple(op.strategy is not None for op in graph.ops)
    return Problem(graph, mesh, tuple(cands), tuple(outs), tuple(node), edges, fixed, tie)


@dataclass(frozen=True, eq=False)
class Propagation:
    """A solved problem: `choice[v]` indexes op v's candidates."""

    problem: Problem
    choice: tuple[int, ...]
    search: str

    @property
    def cost(self) -> float:
        return self.problem.cost(self.choice)

    def signature(self, v: int) -> Signature:
        return self.problem.candidates[v][self.choice[v]]

    def graph(self) -> Graph:
        """The graph with every unconfigured op's chosen signature as its strategy."""
        g = self.problem.graph
        ops = tuple(op if op.strategy is not None else dataclasses.replace(
            op, strategy=Strategy(signature=self.signature(v))) for v, op in enumerate(g.ops))
        return Graph(g.tensors, ops)


# what each search runs, as `shardsim explain` says it (propagate/solvers.py cites each)
SEARCH_RUNS = {
    "sharding_propagation": "MindSpore's sharding propagation: a greedy breadth-first walk "
                            "from the configured operators (not exact)",
    "dynamic_programming": "exact dynamic programming over chains and trees",
    "ilp": "exact: an integer program solved by HiGHS",
    "recursive_programming": "the inner recursion of MindSpore's double recursive search "
                             "(SAPP) only: operators by decreasing weight, each cheapest "
                             "against those decided; not SAPP's outer recursion, which "
                             "bisects the devices a factor of two at a time (the candidates "
                             "here are already products over the mesh axes), and priced by "
                             "the same bus bytes as the other searches, not SAPP's symbolic "
                             "cost model; not exact",
}


def _searches() -> dict[str, Callable[[Problem], tuple[int, ...]]]:
    return {"sharding_propagation": solve_greedy, "dynamic_programming": solve_dp,
            "ilp": solve_ilp, "recursive_programming": solve_recursive}


def propagate(graph: Graph, mesh: Mesh, itemsize: int = 4, search: str = "ilp",
              fully_use_devices: bool = True,
              check: Callable[[dict[tuple[int, ...], int]], None] | None = None
              ) -> Propagation:
    """Choose every unconfigured op's signature with `search`: sharding_propagation,
    dynamic_programming, ilp or recursive_programming (propagate/solvers.py); `check` as
    `build_problem`'s."""
    solvers = _searches()
    if search not in solvers:
        raise KeyError(f"unknown search {search!r} (registered: {', '.join(solvers)})")
    problem = build_problem(graph, mesh, itemsize, fully_use_devices, check)
    return Propagation(problem, solvers[search](problem), search)
