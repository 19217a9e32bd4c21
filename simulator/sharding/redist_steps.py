"""One redistribution step and its price. Along one mesh axis, a placement change is one step:

    P -> B     all_reduce            S(d) -> B     all_gather(d)     (any, on 1 device) relabel
    P -> S(d)  reduce_scatter(d)     S(d) -> S(e)  all_to_all(d -> e)
    B -> S(d)  local slice           B | S -> P    local (keep the value on one rank / pad)

`bytes` of a step follows nccl-tests (all_gather: the gathered buffer; reduce_scatter: the
input; others: the buffer) for ONE device's largest block; a price (`StepCost`) turns it
into what the planner minimises: `moved_bytes` (bytes one device sends) or `link_seconds`
(a hardware profile's collectives).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.cost.collectives import busbw_factor, collective_time_s
from simulator.cost.specs import GroupSpec
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Broadcast, Partial, Placement

if TYPE_CHECKING:
    from simulator.config.hardware.schema import HardwareProfile

__all__ = ["RedistStep", "step_kind", "COMM_KINDS", "StepCost", "moved_bytes", "link_seconds",
           "frozen", "plan_cost"]

# send_recv: an op's own point-to-point exchange (a convolution's halo, graph.ops.halo); the
# layout search never plans one
COMM_KINDS = ("all_reduce", "reduce_scatter", "all_to_all", "all_gather", "send_recv")


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


StepCost = Callable[[RedistStep, Mesh], float]
"""The price of one step on a mesh (bytes, seconds, ...): pure, non-negative, additive."""


def moved_bytes(step: RedistStep, mesh: Mesh) -> float:
    """Bytes each device sends (and receives) in `step` with a bandwidth-optimal (ring)
    algorithm: the nccl-tests bus-bandwidth factor times the buffer (2(n-1)/n for
    all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all; nccl-tests
    doc/PERFORMANCE.md; Thakur, Rabenseifner & Gropp 2005, section 4). 0 for local steps."""
    if not step.is_comm:
        return 0.0
    return busbw_factor(step.kind, mesh.shape[step.axis]) * step.bytes


def link_seconds(hw: HardwareProfile, devices_per_node: int) -> StepCost:
    """A StepCost in seconds: each collective priced by `cost.collectives` on the links its
    group crosses (a mesh axis of `size` devices, `mesh.stride(axis)` apart in rank order,
    on nodes of `devices_per_node`); local steps are free."""

    def seconds(step: RedistStep, mesh: Mesh) -> float:
        if not step.is_comm:
            return 0.0
        group = GroupSpec(mesh.shape[step.axis], mesh.stride(step.axis), devices_per_node)
        return collective_time_s(step.kind, step.bytes, group, hw)

    return seconds


def frozen(axes: tuple[int, ...], base: StepCost = moved_bytes) -> StepCost:
    """`base`, with every step on the given mesh axes impossible (infinite): a plan that
    leaves those axes as they are (a gradient reduced on tp before its data-parallel
    reduction, which runs elsewhere on the whole buffer)."""
    def cost(step: RedistStep, mesh: Mesh) -> float:
        return math.inf if step.axis in axes else base(step, mesh)

    return cost


def plan_cost(steps: Iterable[RedistStep], mesh: Mesh, cost: StepCost = moved_bytes) -> float:
    """The total price of a plan."""
    return sum(cost(s, mesh) for s in steps)


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
