"""The cost functions the lowering prices tasks with, bundled so tests can inject their own.

`CostModel.from_hardware(hw)` binds the pure functions of `simulator.cost` to a hardware
profile; tests pass plain lambdas (zero-cost communication, unit compute, ...). Nothing here
keeps state: pricing an op tuple is a pure sum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.schedule.program import Op

__all__ = ["CostModel", "Priced", "price_ops", "merge_volumes"]


@dataclass(frozen=True)
class CostModel:
    """Seconds for a kernel, a collective over a group, and a point-to-point message."""

    compute_s: Callable[[ComputeSpec], float]
    collective_s: Callable[[str, float, GroupSpec], float]
    send_recv_s: Callable[[float, bool], float]
    copy_s: Callable[[float], float] = lambda nbytes: 0.0  # host <-> device, one direction

    @classmethod
    def from_hardware(cls, hw: Any) -> CostModel:
        """The cost model of `simulator.cost` for hardware profile `hw`."""
        from simulator.cost import collective_time_s, compute_time_s, send_recv_time_s

        pcie = float(hw.pcie_bandwidth_bytes_per_s)
        return cls(
            compute_s=lambda spec: compute_time_s(spec, hw),
            collective_s=lambda coll, nbytes, group: collective_time_s(coll, nbytes, group, hw),
            send_recv_s=lambda nbytes, intra: send_recv_time_s(nbytes, intra, hw),
            copy_s=lambda nbytes: nbytes / pcie,
        )


@dataclass(frozen=True)
class Priced:
    """Seconds of an op sequence on one device: kernels, and critical-path collectives."""

    compute_s: float
    comm_s: float
    comm: tuple[tuple[str, float], ...]  # (collective, total bytes), one entry per kind

    def __add__(self, other: Priced) -> Priced:
        return Priced(self.compute_s + other.compute_s, self.comm_s + other.comm_s,
                      merge_volumes(self.comm + other.comm))

    def scaled(self, k: int) -> Priced:
        """The same ops run k times in a row."""
        return Priced(self.compute_s * k, self.comm_s * k,
                      tuple((c, b * k) for c, b in self.comm))


def merge_volumes(pairs: tuple[tuple[str, float], ...]) -> tuple[tuple[str, float], ...]:
    """(collective, bytes) pairs summed per collective, in first-seen order."""
    out: dict[str, float] = {}
    for coll, nbytes in pairs:
        out[coll] = out.get(coll, 0.0) + nbytes
    return tuple(out.items())


def price_ops(ops: tuple[Op, ...], costs: CostModel, groups: dict[str, GroupSpec]) -> Priced:
    """Price `ops` run back to back: collectives on axis a use group `groups[a]`."""
    compute = comm = 0.0
    volumes: list[tuple[str, float]] = []
    for op in ops:
        if isinstance(op, CommSpec):
            comm += costs.collective_s(op.collective, op.bytes, groups[op.axis])
            volumes.append((op.collective, op.bytes))
        else:
            compute += costs.compute_s(op)
    return Priced(compute, comm, merge_volumes(tuple(volumes)))
