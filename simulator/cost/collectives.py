"""Time of a collective on a group of devices: the alpha-beta model on the node topology.

A step that moves `x` bytes over a link costs `alpha + x / B` (Hockney 1994). With that,
for a group of n devices and a buffer of S bytes (nccl-tests byte convention, see
`specs.py`), the classical algorithms cost (Thakur, Rabenseifner & Gropp 2005, "Optimization
of collective communication operations in MPICH", IJHPCA 19(1), sections 4.4-4.5;
Patarasuk & Yuan 2009 for the bandwidth-optimal ring):

    ring all_reduce      2(n-1)/n * S/B + 2(n-1) * alpha     (reduce_scatter + all_gather)
    ring all_gather      (n-1)/n * S/B + (n-1) * alpha        (likewise reduce_scatter)
    all_to_all           (n-1)/n * S/B + (n-1) * alpha        (pairwise exchange)
    ring broadcast       S/B + (n-1) * alpha                  (pipelined)
    send_recv            S/B + alpha
    tree all_reduce      2 * S/B + 2 * ceil(log2 N) * alpha   (NCCL double binary tree over
                                                                N nodes, Sanders et al. 2009)
    hierarchical         reduce_scatter in the node, all_reduce of S/m across the nodes
                         (the m local ranks in parallel), all_gather in the node

B is the *effective* bus bandwidth of the link the step crosses: the datasheet bandwidth
times the profile's `intra_node_bus_fraction` or `inter_node_bus_fraction`, which is what
nccl-tests reports as busbw for large messages. Within one node that is the per-device
NVLink/HCCS bandwidth; across nodes each device gets its fair share of its node's NICs
(nics_per_node * nic_bandwidth / devices_per_node: every device of the node communicates at
once, as in data-parallel gradient reduction), so the m members of a group on one node
together get m such shares. alpha is the profile's per-step latency of the link.
"""

from __future__ import annotations

import math
from typing import Any

from simulator.cost.specs import COLLECTIVES, GroupSpec
from simulator.errors import InputError
from simulator.hardware.schema import HardwareProfile
from simulator.yamlio import did_you_mean

__all__ = ["collective_time_s", "collective_cost", "choose_algorithm", "send_recv_time_s",
           "link_kind", "intra_bus_bandwidth", "inter_bus_bandwidth", "comm_benchmark",
           "busbw_factor", "ALGORITHMS"]

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "hierarchical")
_TREE_COLLECTIVES = ("all_reduce",)


def link_kind(group: GroupSpec) -> str:
    """'inter' when the group spans nodes (the NICs are the busy resource), else 'intra'."""
    return "inter" if group.crosses_nodes else "intra"


def intra_bus_bandwidth(hw: HardwareProfile, members: int | None = None) -> float:
    """Effective intra-node bus bandwidth B per device, bytes/s (datasheet x bus fraction).

    On a `mesh` fabric (HCCS full mesh: one direct link to each of the other devices of the
    node) a group of `members` devices in the node uses only members-1 of the
    devices_per_node_default-1 links, so it gets that share of the device's bandwidth; a
    `switch` (NVSwitch) or `ring` gives each device its full bandwidth whatever the group.
    (Measured on Ascend 910B: 8-card all_reduce busbw is ~7x the 2-card one, see its profile.)"""
    bw = hw.intra_link_bandwidth_bytes_per_s * hw.efficiency.intra_node_bus_fraction
    links = hw.intra_node.mesh_links or hw.devices_per_node_default - 1
    if hw.intra_node.topology == "mesh" and members is not None and 1 < members <= links:
        bw *= (members - 1) / links
    return bw


def inter_bus_bandwidth(hw: HardwareProfile, devices_per_node: int) -> float:
    """Effective network bandwidth per device, bytes/s: its share of the node's NICs."""
    share = hw.inter_link_bandwidth_bytes_per_s(devices_per_node)
    return share * hw.efficiency.inter_node_bus_fraction


def _ring_link(group: GroupSpec, hw: HardwareProfile) -> tuple[float, float]:
    """(B, alpha) of one ring step: the slowest hop of a ring over the whole group.

    Across nodes, the ring's whole flow leaves each node through the members' NIC shares."""
    m = group.members_per_node
    if not group.crosses_nodes:
        return intra_bus_bandwidth(hw, m), hw.intra_link_latency_s
    nic = m * inter_bus_bandwidth(hw, group.devices_per_node)
    bw = min(intra_bus_bandwidth(hw, m), nic) if m > 1 else nic
    return bw, hw.inter_link_latency_s


def measured_bus_time(hw: HardwareProfile, nbytes: float) -> float | None:
    """`nbytes` / busbw in seconds inside a node, from the profile's measured all_reduce
    curve: linear in log-log between its points, non-decreasing (a larger message never
    goes faster than a smaller one plus more), constant bandwidth past its ends. A
    collective of n ranks takes busbw_factor(collective, n) times this. None without one."""
    curve = hw.intra_node.allreduce_busbw_GBps
    if not curve or nbytes <= 0:
        return None
    pts, worst = [], 0.0
    for size, gbps in curve:
        worst = max(worst, size / (gbps * 1e9))
        pts.append((math.log(size), math.log(worst)))
    x = math.log(nbytes)
    if x <= pts[0][0]:
        return math.exp(pts[0][1]) * nbytes / curve[0][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x <= x1:
            return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return math.exp(pts[-1][1]) * nbytes / curve[-1][0]


def _ring(collective: str, nbytes: float, n: int, bw: float, alpha: float) -> float:
    """The ring (or pairwise / pipelined) closed forms of the module docstring."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * alpha
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * nbytes / bw + (n - 1) * alpha
    if collective == "broadcast":
        return nbytes / bw + (n - 1) * alpha
    return nbytes / bw + alpha  # send_recv


def _all_to_all(nbytes: float, group: GroupSpec, hw: HardwareProfile) -> float:
    """Pairwise exchange: each device keeps S/n, sends (m-1)/n*S inside its node and
    (n-m)/n*S through its NIC share; both run at once."""
    n, m = group.size, group.members_per_node
    t_intra = (m - 1) / n * nbytes / intra_bus_bandwidth(hw, m) if m > 1 else 0.0
    t_inter = (n - m) / n * nbytes / inter_bus_bandwidth(hw, group.devices_per_node)
    alpha = hw.inter_link_latency_s if group.crosses_nodes else hw.intra_link_latency_s
    return max(t_intra, t_inter) + (n - 1) * alpha


def _tree(nbytes: float, group: GroupSpec, hw: HardwareProfile) -> float:
    """NCCL tree all_reduce: a chain in each node, a double binary tree across nodes."""
    bw, _ = _ring_link(group, hw)
    m, nodes = group.members_per_node, group.nodes_spanned
    depth = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    latency = 2 * depth * hw.inter_link_latency_s + 2 * (m - 1) * hw.intra_link_latency_s
    return 2 * nbytes / bw + latency


def _hierarchical(collective: str, nbytes: float, group: GroupSpec,
                  hw: HardwareProfile) -> float:
    """Intra-node phase, inter-node phase on S/m per local rank, intra-node phase."""
    m, nodes = group.members_per_node, group.nodes_spanned
    b_in, a_in = intra_bus_bandwidth(hw, m), hw.intra_link_latency_s
    b_out, a_out = inter_bus_bandwidth(hw, group.devices_per_node), hw.inter_link_latency_s
    inner = _ring(collective, nbytes, m, b_in, a_in) if m > 1 else 0.0
    outer = _ring(collective, nbytes / m, nodes, b_out, a_out)
    if collective == "broadcast":
        outer = _ring(collective, nbytes, nodes, b_out, a_out)
    return inner + outer


def _check(collective: str, nbytes: float, algorithm: str) -> None:
    if collective not in COLLECTIVES:
        raise InputError("collective", "", f"unknown collective '{collective}'"
                         f"{did_you_mean(collective, COLLECTIVES)}; allowed: "
                         f"{', '.join(COLLECTIVES)}")
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise InputError("algorithm", "", f"unknown algorithm '{algorithm}'"
                         f"{did_you_mean(algorithm, ALGORITHMS)}; allowed: auto, "
                         f"{', '.join(ALGORITHMS)}")
    if algorithm == "tree" and collective not in _TREE_COLLECTIVES:
        raise InputError("algorithm", "", f"tree is implemented for "
                         f"{', '.join(_TREE_COLLECTIVES)} only, not {collective}")
    if not nbytes >= 0:
        raise InputError("bytes", "", f"found {nbytes}; expected a number >= 0")


# NCCL's per-hop latency of a ring step over the network, by protocol (src/graph/tuning.cc,
# hwLat[NET][RING] = {LL 2.7, LL128 4.0, Simple 14.0} us): the profile's inter-node latency is
# the Simple figure; LL128 carries 120 data bytes in each 128-byte line.
_LL128_LATENCY_SCALE = 4.0 / 14.0
_LL128_BANDWIDTH_SCALE = 120.0 / 128.0


def _cross_node_ring(collective: str, nbytes: float, n: int, bw: float, alpha: float) -> float:
    """NCCL picks the faster protocol for a ring across nodes: Simple, or LL128 (lower
    latency per hop, 120/128 of the bandwidth), which wins on mid-size, many-hop rings."""
    simple = _ring(collective, nbytes, n, bw, alpha)
    ll128 = _ring(collective, nbytes, n, bw * _LL128_BANDWIDTH_SCALE,
                  alpha * _LL128_LATENCY_SCALE)
    return min(simple, ll128)


def _time(collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
          algorithm: str, protocols: bool = False) -> float:
    if collective == "all_to_all":
        return _all_to_all(nbytes, group, hw)
    if algorithm == "tree":
        return _tree(nbytes, group, hw)
    if algorithm == "hierarchical" and group.crosses_nodes:
        return _hierarchical(collective, nbytes, group, hw)
    bw, alpha = _ring_link(group, hw)
    n = 2 if collective == "send_recv" else group.size
    bus_time = measured_bus_time(hw, nbytes) if protocols and not group.crosses_nodes \
        else None
    if bus_time is not None and collective != "send_recv":
        # nccl-tests: time = busbw_factor * S / busbw (the factor of each collective)
        return busbw_factor(collective, n) * bus_time
    if protocols and group.crosses_nodes and collective != "send_recv":
        return _cross_node_ring(collective, nbytes, n, bw, alpha)
    return _ring(collective, nbytes, n, bw, alpha)


def choose_algorithm(collective: str, nbytes: float, group: GroupSpec,
                     hw: HardwareProfile) -> str:
    """What NCCL's tuner roughly picks: the fastest modelled algorithm. Inside one node that
    is the ring (NCCL's tree is a chain there); across nodes ring, tree or hierarchical."""
    if not group.crosses_nodes or collective in ("all_to_all", "send_recv"):
        return "ring"
    options = ["ring", "hierarchical"] + (["tree"] if collective in _TREE_COLLECTIVES else [])
    return min(options, key=lambda a: (_time(collective, nbytes, group, hw, a, True),
                                       ALGORITHMS.index(a)))


def collective_cost(collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                    algorithm: str = "auto") -> tuple[str, float]:
    """(algorithm used, seconds) for `collective` of `nbytes` over `group`."""
    _check(collective, nbytes, algorithm)
    if group.size <= 1 or nbytes == 0:
        return ("ring" if algorithm == "auto" else algorithm), 0.0
    if algorithm == "auto":
        algorithm = choose_algorithm(collective, nbytes, group, hw)
        return algorithm, _time(collective, nbytes, group, hw, algorithm, True)
    return algorithm, _time(collective, nbytes, group, hw, algorithm)


def collective_time_s(collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                      algorithm: str = "auto") -> float:
    """Seconds for `collective` of `nbytes` (nccl-tests convention) over `group`; 0 for a
    group of one device or an empty buffer."""
    return collective_cost(collective, nbytes, group, hw, algorithm)[1]


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
