"""Why sharding propagation chose what it chose, per operator (`shardsim explain`).

- **cost** of a signature of op v: v's node cost plus the redistributions on its edges with
  every neighbour at its chosen signature (bytes; the rest of the plan held fixed). The
  chosen one is the cheapest such only up to ties and joint moves; the two best
  alternatives are the other signatures of lowest cost.
- **from**: the configured operator whose fixed layout reached v through edges that move
  nothing under the chosen plan (zero redistribution bytes), the nearest in hops (ties: the
  earlier op); none when v's layout meets every configured op only through a
  redistribution (it was chosen for its own cost).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from simulator.sharding.propagate.search import Propagation

__all__ = ["OpExplanation", "explain"]


@dataclass(frozen=True)
class OpExplanation:
    op: str
    type: str
    configured: bool
    signature: str
    cost_bytes: float
    origin: str | None
    alternatives: tuple[tuple[str, float], ...]

    def to_dict(self) -> dict[str, object]:
        return {"op": self.op, "type": self.type, "configured": self.configured,
                "signature": self.signature, "cost_bytes": self.cost_bytes,
                "from": self.origin, "alternatives": [
                    {"signature": s, "cost_bytes": c} for s, c in self.alternatives]}


def _local(prop: Propagation, v: int) -> list[float]:
    p = prop.problem
    cost = p.node[v].astype(float).copy()
    for w in p.neighbours(v):
        cost += p.edge(v, w)[:, prop.choice[w]]
    return [float(c) for c in cost]


def _origins(prop: Propagation) -> dict[int, int]:
    """Multi-source breadth-first search from the configured ops over zero-cost edges."""
    p = prop.problem
    origin = {v: v for v in range(len(p.candidates)) if p.fixed[v]}
    queue = deque(sorted(origin))
    while queue:
        u = queue.popleft()
        for w in p.neighbours(u):
            if w not in origin and p.edge(u, w)[prop.choice[u], prop.choice[w]] == 0:
                origin[w] = origin[u]
                queue.append(w)
    return origin


def explain(prop: Propagation) -> list[OpExplanation]:
    p, origins = prop.problem, _origins(prop)
    rows = []
    for v, op in enumerate(p.graph.ops):
        local = _local(prop, v)
        others = sorted((c, s) for s, c in enumerate(local) if s != prop.choice[v])[:2]
        src = origins.get(v)
        rows.append(OpExplanation(
            op.name, op.type, p.fixed[v], str(prop.signature(v)), local[prop.choice[v]],
            None if src is None else p.graph.ops[src].name,
            tuple((str(p.candidates[v][s]), c) for c, s in others)))
    return rows
