"""The three searches of `propagate.py` over a Problem (node costs, pairwise edge costs):

- `solve_dp`: exact on chains and trees (min-sum dynamic programming, leaves to root and back;
  Bertele & Brioschi, Nonserial Dynamic Programming, 1972, ch. 2 for the serial case).
  `NotATree` when the operator graph has a cycle (a residual connection makes one).
- `solve_ilp`: exact on any graph: one binary x[v, s] per op signature with sum_s x[v, s] = 1;
  each edge's cost linearised over classes of equal cost rows / columns with continuous
  y[a, b] >= 0 whose row sums equal the row class's x and column sums the column class's x
  (for integral x exactly one y is 1: the pair chosen), solved by HiGHS (highspy).
- `solve_greedy`: MindSpore's sharding propagation (tutorial "Sharding Propagation", r1.10:
  from one op to the next, the strategy of zero communication cost, else of the least),
  breadth-first from the configured ops in graph order: each op reached takes the
  signature that moves the fewest bytes to and from the ops already decided around it
  (ties: its own cost), never revisited. An op no configured op reaches starts a new walk
  from its cheapest signature. Not exact.

- `solve_recursive`: the inner recursion of MindSpore's double recursive search
  (`search_mode="recursive_programming"`, the Symbolic Automatic Parallel Planner; tutorial
  "Double Recursive Strategy Search Algorithm", r2.3: "sorting the operators by weight ...
  compresses the exponential search complexity to linear"): the configured ops first, then
  every other op in decreasing weight (the elements of its inputs and output), each taking
  the signature of least cost of its own plus its redistributions to and from the ops
  already decided, never revisited. SAPP's outer recursion bisects the devices one factor
  of two at a time; here the candidates of an op are already the products over the mesh
  axes, so every factor is chosen at once. Not exact.

Ties go to the lowest candidate index (dp, greedy, recursive); the ILP returns one optimum.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections import deque
from collections.abc import Iterator

import numpy as np

from simulator.sharding.propagate.problem import Problem

__all__ = ["NotATree", "solve_dp", "solve_ilp", "solve_greedy", "solve_recursive"]


class NotATree(ValueError):
    """The operators to choose (configured ones removed) are not chains or trees; `ops`
    names those left after removing every branch that is (the cycles and what joins them)."""

    def __init__(self, ops: tuple[str, ...]) -> None:
        super().__init__("the operators to choose do not form chains or trees (with the "
                         "configured operators removed, cycles run through "
                         f"{', '.join(ops)})")
        self.ops = ops


class _Work:
    """A mutable copy of a Problem's cost tables from which ops are eliminated one by one
    (variable elimination, exact); `finish` recovers the eliminated ops' choices."""

    def __init__(self, p: Problem) -> None:
        self.node = dict(enumerate(p.obj_node))
        self.edges = dict(p.obj_edges)
        self.adj = {v: set(p.neighbours(v)) for v in self.node}
        self.undo: list[tuple[int, tuple[int, ...], np.ndarray]] = []

    def edge(self, v: int, w: int) -> np.ndarray:
        return self.edges[(v, w)] if v < w else self.edges[(w, v)].T

    def add_edge(self, a: int, b: int, m: np.ndarray) -> None:
        key, m = ((a, b), m) if a < b else ((b, a), m.T)
        self.edges[key] = self.edges[key] + m if key in self.edges else m
        self.adj[a].add(b)
        self.adj[b].add(a)

    def drop(self, v: int) -> None:
        for w in self.adj.pop(v):
            self.adj[w].discard(v)
            self.edges.pop((min(v, w), max(v, w)))
        del self.node[v]

    def condition(self) -> None:
        """Ops with one candidate (configured) turn their edges into their neighbours' node
        costs: what is left is the graph of the ops to choose."""
        for v in [v for v, c in self.node.items() if len(c) == 1]:
            for w in self.adj[v]:
                self.node[w] = self.node[w] + self.edge(w, v)[:, 0]
            self.undo.append((v, (), np.array(0)))
            self.drop(v)

    def _leaf(self, v: int) -> None:
        """Fold op v (at most one neighbour w) into w: w pays v's best answer to each of
        its choices."""
        if not self.adj[v]:
            self.undo.append((v, (), np.array(np.argmin(self.node[v]))))
        else:
            (w,) = self.adj[v]
            total = self.node[v][:, None] + self.edge(v, w)
            self.node[w] = self.node[w] + total.min(axis=0)
            self.undo.append((v, (w,), np.argmin(total, axis=0)))
        self.drop(v)

    def _series(self, v: int) -> None:
        """Replace op v between a and b by one edge a-b: its best answer to each pair."""
        a, b = sorted(self.adj[v])
        ea, eb = self.edge(a, v), self.edge(v, b)
        best = np.full((len(self.node[a]), len(self.node[b])), np.inf)
        arg = np.zeros(best.shape, dtype=int)
        for s, cost in enumerate(self.node[v]):
            total = ea[:, s][:, None] + cost + eb[s][None, :]
            better = total < best
            best[better], arg[better] = total[better], s
        self.undo.append((v, (a, b), arg))
        self.drop(v)
        self.add_edge(a, b, best)

    def reduce(self, series: bool) -> None:
        """Eliminate leaves (and, with `series`, ops of two neighbours) until none is left."""
        while True:
            v = next((v for v in sorted(self.node) if len(self.adj[v]) <= 1), None)
            if v is None and series:
                v = next((v for v in sorted(self.node) if len(self.adj[v]) == 2), None)
            if v is None:
                return
            self._leaf(v) if len(self.adj[v]) <= 1 else self._series(v)

    def finish(self, core: dict[int, int], n: int) -> tuple[int, ...]:
        choice = dict(core)
        for v, given, table in reversed(self.undo):
            choice[v] = int(table[tuple(choice[w] for w in given)])
        return tuple(choice[v] for v in range(n))


def solve_dp(p: Problem) -> tuple[int, ...]:
    w = _Work(p)
    w.condition()
    w.reduce(series=False)
    if w.node:
        raise NotATree(tuple(p.graph.ops[v].name for v in sorted(w.node)))
    return w.finish({}, len(p.candidates))


def _classes(m: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows (axis 0) or columns (axis 1) of m and each one's class."""
    uniq, inverse = np.unique(m, axis=axis, return_inverse=True)
    return uniq, inverse.reshape(-1)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints its banner on the C stdout when the first solver is built: send it to
    stderr, so that `--json` output stays one JSON document."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


Row = tuple[list[int], list[float], float]  # column indices, coefficients, right-hand side


def _edge_rows(m: np.ndarray, xu: int, xv: int, base: int) -> tuple[list[float], list[Row]]:
    """The y columns (from `base`) of one edge whose ops' x columns start at xu and xv: their
    costs, and the rows tying each row class (column class) to the x of its signatures."""
    rows_u, cls_u = _classes(m, 0)
    pair, cls_v = _classes(rows_u, 1)
    na, nb = pair.shape
    rows: list[Row] = []
    for a in range(na):  # sum_b y[a, b] = sum of x[u, s] over row class a
        xs = [xu + int(s) for s in np.flatnonzero(cls_u == a)]
        rows.append(([base + a * nb + b for b in range(nb)] + xs,
                     [1.0] * nb + [-1.0] * len(xs), 0.0))
    for b in range(nb):  # sum_a y[a, b] = sum of x[v, t] over column class b
        xs = [xv + int(t) for t in np.flatnonzero(cls_v == b)]
        rows.append(([base + a * nb + b for a in range(na)] + xs,
                     [1.0] * na + [-1.0] * len(xs), 0.0))
    return list(pair.reshape(-1)), rows


def _ilp(node: dict[int, np.ndarray], edges: dict[tuple[int, int], np.ndarray]
         ) -> dict[int, int]:
    """The exact minimum of the node and edge costs by HiGHS (see the module docstring)."""
    import highspy

    start = dict(zip(node, np.cumsum([0] + [len(c) for c in node.values()][:-1]).tolist()))
    costs = [float(x) for c in node.values() for x in c]
    nx = len(costs)
    rows: list[Row] = [(list(range(start[v], start[v] + len(c))), [1.0] * len(c), 1.0)
                       for v, c in node.items()]
    for (u, v), m in edges.items():
        y_costs, y_rows = _edge_rows(m, start[u], start[v], len(costs))
        costs += y_costs
        rows += y_rows
    with _quiet_stdout():
        h = highspy.Highs()
    for key, value in (("output_flag", False), ("mip_rel_gap", 0.0), ("mip_abs_gap", 1e-9)):
        h.setOptionValue(key, value)
    cost = np.array(costs)
    upper = np.array([1.0] * nx + [highspy.kHighsInf] * (len(costs) - nx))
    upper[np.isinf(cost)] = 0.0  # an impossible choice or pair is forbidden, not priced
    cost[np.isinf(cost)] = 0.0
    empty = np.array([], np.int32)
    h.addCols(len(costs), cost, np.zeros(len(costs)), upper, 0, empty, empty, np.array([]))
    for idx, val, rhs in rows:
        h.addRow(rhs, rhs, len(idx), np.array(idx, np.int32), np.array(val))
    h.changeColsIntegrality(nx, np.arange(nx, dtype=np.int32),
                            np.array([highspy.HighsVarType.kInteger] * nx))
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"HiGHS: {h.modelStatusToString(h.getModelStatus())}")
    x = np.array(h.getSolution().col_value[:nx])
    return {v: int(np.argmax(x[start[v]:start[v] + len(c)])) for v, c in node.items()}


def solve_ilp(p: Problem, reduce: bool = True) -> tuple[int, ...]:
    """Exact on any graph. With `reduce`, configured ops, leaves and ops of two neighbours
    are eliminated first (exactly) and the ILP sees only what is left."""
    w = _Work(p)
    if reduce:
        w.condition()
        w.reduce(series=True)
    core = _ilp(w.node, w.edges) if w.node else {}
    return w.finish(core, len(p.candidates))


def _cheapest(p: Problem, v: int, decided: dict[int, int]) -> int:
    """The signature of op v that moves the fewest bytes to and from the ops already decided
    around it; ties go to its own cost (compute bytes, then the data-parallel tie rank)."""
    comm = np.zeros(len(p.candidates[v]))
    for w in p.neighbours(v):
        if w in decided:
            m = p.obj_edges[(v, w)] if v < w else p.obj_edges[(w, v)].T
            comm += m[:, decided[w]]
    return int(np.lexsort((p.obj_node[v], comm))[0])


def solve_greedy(p: Problem) -> tuple[int, ...]:
    n = len(p.candidates)
    decided = {v: 0 for v in range(n) if p.fixed[v]}
    queue = deque(sorted(decided))
    while len(decided) < n:
        if not queue:
            v = min(set(range(n)) - set(decided))
            decided[v] = _cheapest(p, v, decided)
            queue.append(v)
        u = queue.popleft()
        for w in p.neighbours(u):
            if w not in decided:
                decided[w] = _cheapest(p, w, decided)
                queue.append(w)
    return tuple(decided[v] for v in range(n))


def _weight(p: Problem, v: int) -> int:
    """The work of op v for the recursive search's order: elements of its tensors."""
    op = p.graph.ops[v]
    return sum(math.prod(p.graph.tensors[n].shape) for n in (*op.inputs, op.output))


def solve_recursive(p: Problem) -> tuple[int, ...]:
    n = len(p.candidates)
    decided = {v: 0 for v in range(n) if p.fixed[v]}
    for v in sorted(set(range(n)) - set(decided), key=lambda v: (-_weight(p, v), v)):
        total = p.obj_node[v].copy()
        for w in p.neighbours(v):
            if w in decided:
                m = p.obj_edges[(v, w)] if v < w else p.obj_edges[(w, v)].T
                total = total + m[:, decided[w]]
        decided[v] = int(np.argmin(total))
    return tuple(decided[v] for v in range(n))
