"""Time of a collective on a group of devices: one pricing function for every caller.

`collective_cost` prices `collective` of S bytes (nccl-tests convention, `specs.py`) over a
`GroupSpec` with an algorithm and protocol of `simulator.cost.algorithms` on the links of
`simulator.cost.links`. With `algorithm="auto"` it does what NCCL's tuner does (NVIDIA/nccl
src/graph/tuning.cc, ncclTopoGetAlgoTime: the algorithm and protocol of least modelled time):
it prices every algorithm that applies with the same `price` function an explicit request
uses, and returns the fastest, so `auto` choosing X costs exactly what asking for X costs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.config.hardware.schema import HardwareProfile
from simulator.config.yamlio import did_you_mean
from simulator.cost import algorithms as _algorithms
from simulator.cost.algorithms import PROTOCOLS, applicable, busbw_factor, price, protocols_of
from simulator.cost.links import (
    inter_bus_bandwidth,
    intra_bus_bandwidth,
    measured_bus_time,
    ring_link,
)
from simulator.cost.specs import COLLECTIVES, GroupSpec
from simulator.errors import InputError

__all__ = ["collective_time_s", "collective_cost", "collective_choice", "choose_algorithm",
           "Choice", "send_recv_time_s", "link_kind", "intra_bus_bandwidth",
           "inter_bus_bandwidth", "measured_bus_time", "comm_benchmark", "busbw_factor",
           "candidate_algorithms", "ALGORITHMS", "PROTOCOLS"]

ALGORITHMS: tuple[str, ...] = tuple(_algorithms.ALGORITHMS)
_ring_link = ring_link  # the name tests and older callers import


@dataclass(frozen=True)
class Choice:
    """What one collective runs as: algorithm, protocol ('measured' where the profile's
    measured curve prices it) and seconds."""

    algorithm: str
    protocol: str
    time_s: float

    def __str__(self) -> str:
        return f"{self.algorithm}/{self.protocol} {self.time_s * 1e6:.1f} us"


def link_kind(group: GroupSpec) -> str:
    """'inter' when the group spans nodes (the NICs are the busy resource), else 'intra'."""
    return "inter" if group.crosses_nodes else "intra"


def _check(collective: str, nbytes: float, algorithm: str, protocol: str) -> None:
    if collective not in COLLECTIVES:
        raise InputError("collective", "", f"unknown collective '{collective}'"
                         f"{did_you_mean(collective, COLLECTIVES)}; allowed: "
                         f"{', '.join(COLLECTIVES)}")
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise InputError("algorithm", "", f"unknown algorithm '{algorithm}'"
                         f"{did_you_mean(algorithm, ALGORITHMS)}; allowed: auto, "
                         f"{', '.join(ALGORITHMS)}")
    if protocol != "auto" and protocol not in PROTOCOLS:
        raise InputError("protocol", "", f"unknown protocol '{protocol}'"
                         f"{did_you_mean(protocol, PROTOCOLS)}; allowed: auto, "
                         f"{', '.join(PROTOCOLS)}")
    if not nbytes >= 0:
        raise InputError("bytes", "", f"found {nbytes}; expected a number >= 0")


def candidate_algorithms(collective: str, group: GroupSpec, hw: HardwareProfile
                         ) -> tuple[str, ...]:
    """The registered algorithms that can run `collective` on `group` on this hardware.
    On a profile priced by NCCL's tuning model (`hw.nccl`) these are NCCL's own: NCCL has
    no 'hierarchical' algorithm, so its tuner never picks one (it stays available by name)."""
    return tuple(a for a in ALGORITHMS if applicable(a, collective, group, hw) is None
                 and not (hw.nccl is not None and a == "hierarchical"))


def collective_choice(collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                      algorithm: str = "auto", protocol: str = "auto",
                      active_per_node: int | None = None) -> Choice:
    """The algorithm, protocol and seconds of `collective` of `nbytes` over `group`.

    `algorithm`/`protocol` 'auto' take the fastest that applies (first registered on a tie).
    `active_per_node` is how many devices of each node use the network at the same time
    (default: all of them; see `links.py`)."""
    _check(collective, nbytes, algorithm, protocol)
    if group.size <= 1 or nbytes == 0:
        return Choice("ring" if algorithm == "auto" else algorithm, "simple", 0.0)
    if algorithm != "auto":
        why = applicable(algorithm, collective, group, hw)
        if why is not None:
            raise InputError("algorithm", "", why)
    names = candidate_algorithms(collective, group, hw) if algorithm == "auto" \
        else (algorithm,)
    if protocol != "auto":
        names = tuple(a for a in names if protocol in protocols_of(a, collective))
        if not names:
            raise InputError("protocol", "", f"{algorithm} does not run {collective} with "
                             f"protocol '{protocol}'")
    best: Choice | None = None
    for name in names:
        proto, seconds = price(name, collective, nbytes, group, hw, protocol, active_per_node)
        if best is None or seconds < best.time_s:
            best = Choice(name, proto, seconds)
    assert best is not None  # ring applies to every collective
    return best


def collective_cost(collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                    algorithm: str = "auto", protocol: str = "auto",
                    active_per_node: int | None = None) -> tuple[str, float]:
    """(algorithm used, seconds) for `collective` of `nbytes` over `group`."""
    choice = collective_choice(collective, nbytes, group, hw, algorithm, protocol,
                               active_per_node)
    return choice.algorithm, choice.time_s


def choose_algorithm(collective: str, nbytes: float, group: GroupSpec,
                     hw: HardwareProfile) -> str:
    """The algorithm NCCL's tuner would pick in this model: the fastest that applies."""
    return collective_choice(collective, nbytes, group, hw).algorithm


def collective_time_s(collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                      algorithm: str = "auto", protocol: str = "auto",
                      active_per_node: int | None = None) -> float:
    """Seconds for `collective` of `nbytes` (nccl-tests convention) over `group`; 0 for a
    group of one device or an empty buffer."""
    return collective_choice(collective, nbytes, group, hw, algorithm, protocol,
                             active_per_node).time_s


def send_recv_time_s(nbytes: float, intra_node: bool, hw: HardwareProfile,
                     devices_per_node: int | None = None) -> float:
    """Seconds for one point-to-point message (pipeline activations): S/B + alpha."""
    if nbytes <= 0:
        return 0.0
    if intra_node:
        return nbytes / intra_bus_bandwidth(hw, 2) + hw.intra_link_latency_s
    per_node = devices_per_node or hw.devices_per_node_default
    return nbytes / inter_bus_bandwidth(hw, per_node) + hw.inter_link_latency_s


# The collective micro-benchmark of `shardsim comm` (CONTRACT section 4), like nccl-tests:
# algbw = S / t, busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md).

def comm_benchmark(collective: str, nbytes: float, devices: int, devices_per_node: int,
                   hw: HardwareProfile, algorithm: str = "auto") -> dict[str, Any]:
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
    try:
        algorithm, time_s = collective_cost(collective, nbytes, group, hw, algorithm)
    except InputError as exc:
        raise InputError(f"--{exc.source}", "", exc.message) from None
    algbw = nbytes / time_s / 1e9 if time_s > 0 else 0.0
    return {"collective": collective, "devices": devices, "devices_per_node": devices_per_node,
            "bytes": nbytes, "algorithm": algorithm, "time_s": time_s, "algbw_GBps": algbw,
            "busbw_GBps": algbw * busbw_factor(collective, devices)}
