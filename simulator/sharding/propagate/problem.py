"""The problem sharding propagation solves: per operator its candidate signatures and node
costs, per operator pair the edge cost matrices (built by `search.build_problem`, solved by
`solvers`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from simulator.graph.graph import Graph
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.rules import Signature

__all__ = ["Problem"]


@dataclass(frozen=True, eq=False)
class Problem:
    """Per op (graph order): candidate signatures, the layout each leaves its output in, the
    node cost of each in bytes, its tie rank, whether the op is configured (one candidate);
    per op pair u < v the edge cost matrix [candidates of u, candidates of v] in bytes.

    The solvers minimise `objective`, integers (exact in float64 below 2^53): cost x `scale`
    (the lcm of the mesh axis sizes, which clears the bus factors' denominators) x `ties`
    (one more than the largest total tie rank), plus the tie rank:
    among plans of equal cost the one closest to the data-parallel default wins (the number
    of mesh axes on which a signature differs from it; MindSpore breaks ties the same way,
    `OperatorInfo::BreakingTiesForPreferringDataParallel`)."""

    graph: Graph
    mesh: Mesh
    candidates: tuple[tuple[Signature, ...], ...]
    out_layouts: tuple[tuple[Layout, ...], ...]
    node: tuple[np.ndarray, ...]
    edges: dict[tuple[int, int], np.ndarray]
    fixed: tuple[bool, ...]
    tie: tuple[np.ndarray, ...]

    @property
    def scale(self) -> int:
        return math.lcm(*self.mesh.shape)

    @property
    def ties(self) -> int:
        return int(sum(t.max() for t in self.tie)) + 1

    @functools.cached_property
    def obj_node(self) -> tuple[np.ndarray, ...]:
        return tuple(np.rint(c * self.scale) * self.ties + t for c, t in zip(self.node,
                                                                             self.tie))

    @functools.cached_property
    def obj_edges(self) -> dict[tuple[int, int], np.ndarray]:
        return {k: np.rint(m * self.scale) * self.ties for k, m in self.edges.items()}

    def cost(self, choice: tuple[int, ...]) -> float:
        """Total bytes of a plan."""
        total = sum(float(self.node[v][s]) for v, s in enumerate(choice))
        return total + sum(float(m[choice[u], choice[v]]) for (u, v), m in self.edges.items())

    def objective(self, choice: tuple[int, ...]) -> float:
        total = sum(float(self.obj_node[v][s]) for v, s in enumerate(choice))
        return total + sum(float(m[choice[u], choice[v]])
                           for (u, v), m in self.obj_edges.items())

    def edge(self, v: int, w: int) -> np.ndarray:
        """The edge matrix (bytes) oriented [candidates of v, candidates of w]."""
        return self.edges[(v, w)] if v < w else self.edges[(w, v)].T

    def neighbours(self, v: int) -> list[int]:
        return self._adjacency[v]

    @functools.cached_property
    def _adjacency(self) -> list[list[int]]:
        adj: list[set[int]] = [set() for _ in self.candidates]
        for u, v in self.edges:
            adj[u].add(v)
            adj[v].add(u)
        return [sorted(a) for a in adj]
