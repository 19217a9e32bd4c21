"""The collective micro-benchmark of `shardsim comm` (CONTRACT section 4), like nccl-tests.

The time is `collectives.collective_cost`, the very function the engine uses; algbw and busbw
follow nccl-tests' PERFORMANCE.md: algbw = S / t, busbw = algbw * factor with factor
2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 otherwise.
"""

from __future__ import annotations

from typing import Any

from simulator.cost.collectives import collective_cost
from simulator.cost.specs import GroupSpec
from simulator.errors import InputError
from simulator.hardware.schema import HardwareProfile

__all__ = ["comm_benchmark", "busbw_factor"]


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor for `collective` on n ranks."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def comm_benchmark(collective: str, nbytes: float, devices: int, devices_per_node: int,
                   hw: HardwareProfile) -> dict[str, Any]:
    """One nccl-tests style measurement: `collective` of `nbytes` over `devices` consecutive
    ranks on nodes of `devices_per_node`. Keys exactly as CONTRACT section 4."""
    if devices < 1:
        raise InputError("--devices", "", f"found {devices}; expected an integer >= 1")
    if devices_per_node < 1:
        raise InputError("--devices-per-node", "",
                         f"found {devices_per_node}; expected an integer >= 1")
    if devices > devices_per_node and devices % devices_per_node:
        raise InputError("--devices", "", f"found {devices}; expected a multiple of "
                         f"--devices-per-node={devices_per_node} when it spans nodes")
    group = GroupSpec(size=devices, stride=1, devices_per_node=devices_per_node)
    algorithm, time_s = collective_cost(collective, nbytes, group, hw)
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    return {"collective": collective, "devices": devices, "devices_per_node": devices_per_node,
            "bytes": nbytes, "algorithm": algorithm, "time_s": time_s, "algbw_GBps": algbw,
            "busbw_GBps": algbw * busbw_factor(collective, devices)}
