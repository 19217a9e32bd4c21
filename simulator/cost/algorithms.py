"""Collective algorithms and NCCL protocols, each priced by one alpha-beta formula.

A step that moves `x` bytes over a link costs `alpha + x / B` (Hockney 1994). For a group of
n devices, m of them on each of N nodes, and a buffer of S bytes (nccl-tests convention, see
`specs.py`), with B the effective bus bandwidth of the slowest link (`links.py`):

    ring          f(coll, n) * S / B + (steps - net_steps) * alpha_nvlink + net_steps * alpha_net
                  f = nccl-tests' busbw factor: 2(n-1)/n all_reduce, (n-1)/n all_gather,
                  reduce_scatter, all_to_all (pairwise exchange), 1 broadcast and send_recv;
                  steps = 2(n-1) all_reduce, else n-1; net_steps = 2(N-1) all_reduce, else N-1
                  (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel: ring latency
                  `(nsteps-nInterSteps)*intraLat + nInterSteps*interLat`; Thakur, Rabenseifner
                  & Gropp 2005 sec. 4.4-4.5 and Patarasuk & Yuan 2009 for the bandwidth term)
    tree          2 S / B + 2 (m-1) alpha_nvlink + 2 ceil(log2 N) alpha_net  (all_reduce; chain
                  in the node, double binary tree across nodes, pipelined: Sanders et al. 2009;
                  tuning.cc tree latency `2*((nRanks/nNodes-1)*intraLat + log2i(nNodes)*interLat)`)
    hierarchical  ring in the node, ring of S/m across the N nodes on each local rank's NIC
                  share, ring in the node again (phases one after the other)
    nvls          NVLink SHARP inside one node (all_reduce, reduce_scatter, all_gather)
    nvls_tree     NVLS in each node, a tree across nodes, pipelined (all_reduce)
    pat           NCCL's Parallel Aggregated Trees, one member per node (all_gather,
                  reduce_scatter): logarithmic network latency, 0.75 of the ring's bandwidth

NVLS physics. The switch reduces (multimem.ld_reduce) and multicasts (multimem.st). In an
all_reduce each GPU sends its whole buffer S to the switch once and reads back its reduced
shard S/n, then stores that shard once and receives all n shards: (1 + 1/n) S per direction
over its NVLink, against 2(n-1)/n S for the ring. reduce_scatter and all_gather move S in one
direction. NVLS transfers reach `nvls.efficiency` of the ring's effective bandwidth (NCCL's
`nvlsEfficiency`, 0.85 on Hopper) and cost `nvls.latency_us` once. nccl-tests on 8 x H100:
busbw ~480 GB/s against ~370 GB/s for the ring (nccl-tests #212; nccl #1455 finds 370, 420,
440, 460, 480 GB/s on 4..8 GPUs, which (1 + 1/n) reproduces); see benchmarks/comm_accuracy.

Protocols (NCCL): Simple, LL128 and LL trade bandwidth for latency. The profile's network
latency is NCCL's Simple figure (14 us per hop); a protocol scales the network hop latency
and every link's bandwidth by NCCL's factors. The profile's NVLink latency is measured on
small messages, i.e. already what NCCL's best protocol achieves, so it is not scaled. The
measured NVLink curve (`intra_node.allreduce_busbw_GBps`), where a profile has one, is the
ring inside a node whatever the protocol. Pairwise exchanges (all_to_all, send_recv) use
Simple only, as NCCL's point-to-point kernels do for large messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.links import (
    group_network_bandwidth,
    intra_bus_bandwidth,
    measured_bus_time,
    ring_link,
)
from simulator.cost.specs import GroupSpec

__all__ = ["Algorithm", "ALGORITHMS", "PROTOCOLS", "busbw_factor", "applicable",
           "protocols_of", "price", "Pricer"]

PROTOCOLS: tuple[str, ...] = ("simple", "ll128", "ll")

# (network hop latency / Simple's, bandwidth share of Simple) per (algorithm, protocol):
# NVIDIA/nccl src/graph/tuning.cc (v2.28) hwLatencies[NET]: Ring {LL 2.7, LL128 4.0, Simple
# 14.0} us, Tree {LL 5.0, LL128 8.5, Simple 14} us; bandwidth: ring LL busBw*0.5, LL128 120
# of each 128 bytes; tree LL busBw/3.8, LL128 120/128 across nodes.
_PROTOCOL_SCALE: dict[tuple[str, str], tuple[float, float]] = {
    ("ring", "simple"): (1.0, 1.0), ("ring", "ll128"): (4.0 / 14.0, 120.0 / 128.0),
    ("ring", "ll"): (2.7 / 14.0, 0.5),
    ("tree", "simple"): (1.0, 1.0), ("tree", "ll128"): (8.5 / 14.0, 120.0 / 128.0),
    ("tree", "ll"): (5.0 / 14.0, 1.0 / 3.8),
}


def busbw_factor(collective: str, n: int) -> float:
    """nccl-tests' bus bandwidth factor for `collective` on n ranks (doc/PERFORMANCE.md)."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True)
class Net:
    """The link figures one priced call needs: NVLink and network bandwidth (bytes/s,
    protocol applied) and step latencies (s, protocol applied to the network one)."""

    bw: float
    nic: float
    alpha_in: float
    alpha_net: float


def _net(group: GroupSpec, hw: HardwareProfile, family: str, protocol: str,
         active: int | None) -> Net:
    lat, bws = _PROTOCOL_SCALE[(family, protocol)]
    bw, _ = ring_link(group, hw, active)
    nic = group_network_bandwidth(group, hw, active) if group.crosses_nodes else bw
    return Net(bw * bws, nic * bws, hw.intra_link_latency_s, hw.inter_link_latency_s * lat)


def _ring_steps(collective: str, n: int, nodes: int) -> tuple[int, int]:
    """(all steps, steps that cross the network) of a ring, as NCCL's tuning model counts."""
    if collective == "send_recv":
        return 1, int(nodes > 1)
    if collective == "all_reduce":
        return 2 * (n - 1), 2 * (nodes - 1)
    return n - 1, nodes - 1


def _ring_s(coll: str, nbytes: float, n: int, nodes: int, bw: float, net: Net) -> float:
    steps, net_steps = _ring_steps(coll, n, nodes)
    return (busbw_factor(coll, n) * nbytes / bw + (steps - net_steps) * net.alpha_in
            + net_steps * net.alpha_net)


def _ring(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
          active: int | None) -> float:
    n = 2 if coll == "send_recv" else group.size
    if coll == "all_to_all":
        return _all_to_all(nbytes, group, hw, active)
    net = _net(group, hw, "ring", protocol, active)
    return _ring_s(coll, nbytes, n, group.nodes_spanned, net.bw, net)


def _all_to_all(nbytes: float, group: GroupSpec, hw: HardwareProfile,
                active: int | None) -> float:
    """Pairwise exchange: each device keeps S/n, sends (m-1)/n*S inside its node and
    (n-m)/n*S through its NIC share; both run at once."""
    n, m = group.size, group.members_per_node
    t_intra = (m - 1) / n * nbytes / intra_bus_bandwidth(hw, m) if m > 1 else 0.0
    t_inter = 0.0
    if group.crosses_nodes:
        t_inter = (n - m) * nbytes / n / (group_network_bandwidth(group, hw, active) / m)
    alpha = hw.inter_link_latency_s if group.crosses_nodes else hw.intra_link_latency_s
    return max(t_intra, t_inter) + (n - 1) * alpha


def _tree(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
          active: int | None) -> float:
    net = _net(group, hw, "tree", protocol, active)
    m, nodes = group.members_per_node, group.nodes_spanned
    depth = math.ceil(math.log2(nodes)) if nodes > 1 else 0
    return 2 * nbytes / net.bw + 2 * (m - 1) * net.alpha_in + 2 * depth * net.alpha_net


def _hierarchical(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                  protocol: str, active: int | None) -> float:
    """Intra-node phase, inter-node phase on S/m per local rank, intra-node phase."""
    if not group.crosses_nodes:
        return _ring(coll, nbytes, group, hw, protocol, active)
    m, nodes = group.members_per_node, group.nodes_spanned
    net = _net(group, hw, "ring", protocol, active)
    bws = _PROTOCOL_SCALE[("ring", protocol)][1]
    inner = _ring_s(coll, nbytes, m, 1, intra_bus_bandwidth(hw, m) * bws, net) if m > 1 \
        else 0.0
    outer_bytes = nbytes if coll == "broadcast" else nbytes / m
    return inner + _ring_s(coll, outer_bytes, nodes, nodes, net.nic / m, net)


def _nvls_bytes(coll: str, nbytes: float, n: int) -> float:
    """Bytes one GPU moves per direction over its NVLink in an NVLS collective."""
    return (1 + 1 / n) * nbytes if coll == "all_reduce" else nbytes


def _nvls(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
          active: int | None) -> float:
    nvls = hw.intra_node.nvls
    assert nvls is not None
    bw = intra_bus_bandwidth(hw, group.size) * nvls.efficiency
    return _nvls_bytes(coll, nbytes, group.size) / bw + nvls.latency_s


def _nvls_tree(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
               protocol: str, active: int | None) -> float:
    """NVLS reduce and multicast in each node, a tree of S/m per local rank across the nodes,
    the two pipelined (NCCL's NVLS_TREE: bandwidth min(intraBw, interBw), latency
    `intraLat + 2*log2i(nNodes)*interLat`; with 2 nodes the tree is one exchange, which
    tuning.cc models as twice the inter-node bandwidth)."""
    nvls = hw.intra_node.nvls
    assert nvls is not None
    m, nodes = group.members_per_node, group.nodes_spanned
    t_in = _nvls_bytes(coll, nbytes, m) / (intra_bus_bandwidth(hw, m) * nvls.efficiency)
    passes = 1 if nodes == 2 else 2
    t_net = passes * nbytes / group_network_bandwidth(group, hw, active)
    depth = math.ceil(math.log2(nodes))
    return max(t_in, t_net) + nvls.latency_s + 2 * depth * hw.inter_link_latency_s


def _pat(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
         active: int | None) -> float:
    """NCCL's PAT (Parallel Aggregated Trees, NCCL 2.23+) all_gather / reduce_scatter with one
    GPU per node: tuning.cc prices it at 0.75 of the ring's bus bandwidth with latency
    `log2i(nNodes) * interLat/3.5 + nRanks * 2.8` us, i.e. logarithmic in the network hops
    plus a linear part of 2.8/14 of a network step per rank (Simple protocol only)."""
    n = group.size
    bw = group_network_bandwidth(group, hw, active) * 0.75
    alpha = hw.inter_link_latency_s
    depth = math.floor(math.log2(group.nodes_spanned))
    return (n - 1) / n * nbytes / bw + depth * alpha / 3.5 + n * alpha * 2.8 / 14.0


def _one_gpu_per_node(group: GroupSpec, hw: HardwareProfile) -> str | None:
    if group.crosses_nodes and group.members_per_node == 1:
        return None
    return "pat runs with one member per node (NCCL: 'PAT only supports 1 GPU per node')"


Pricer = Callable[[str, float, GroupSpec, HardwareProfile, str, int | None], float]


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: the collectives it implements, its protocols, when it
    applies (None, or why not) and its pricing function."""

    name: str
    collectives: tuple[str, ...]
    protocols: tuple[str, ...]
    unavailable: Callable[[GroupSpec, HardwareProfile], str | None]
    time_s: Pricer


def _always(group: GroupSpec, hw: HardwareProfile) -> str | None:
    return None


def _in_nvls_node(group: GroupSpec, hw: HardwareProfile) -> str | None:
    if hw.intra_node.nvls is None:
        return f"hardware '{hw.name}' has no NVLink SHARP (intra_node.nvls)"
    return "nvls runs inside one node; use nvls_tree across nodes" if group.crosses_nodes \
        else None


def _across_nvls_nodes(group: GroupSpec, hw: HardwareProfile) -> str | None:
    if hw.intra_node.nvls is None:
        return f"hardware '{hw.name}' has no NVLink SHARP (intra_node.nvls)"
    if not group.crosses_nodes or group.members_per_node < 2:
        return "nvls_tree needs a group across nodes with at least 2 members on each"
    return None


_ALL = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
_REDUCING = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
ALGORITHMS: dict[str, Algorithm] = {a.name: a for a in (
    Algorithm("ring", _ALL, PROTOCOLS, _always, _ring),
    Algorithm("tree", ("all_reduce",), PROTOCOLS, _always, _tree),
    Algorithm("hierarchical", _REDUCING, PROTOCOLS, _always, _hierarchical),
    Algorithm("nvls", ("all_reduce", "all_gather", "reduce_scatter"), ("simple",),
              _in_nvls_node, _nvls),
    Algorithm("nvls_tree", ("all_reduce",), ("simple",), _across_nvls_nodes, _nvls_tree),
    Algorithm("pat", ("all_gather", "reduce_scatter"), ("simple",), _one_gpu_per_node, _pat),
)}


def applicable(name: str, collective: str, group: GroupSpec, hw: HardwareProfile
               ) -> str | None:
    """None when algorithm `name` can run `collective` on `group`, else the reason."""
    algo = ALGORITHMS[name]
    if collective not in algo.collectives:
        return f"{name} is implemented for {', '.join(algo.collectives)} only, not {collective}"
    return algo.unavailable(group, hw)


def protocols_of(name: str, collective: str) -> tuple[str, ...]:
    """The protocols algorithm `name` runs `collective` with."""
    algo = ALGORITHMS[name]
    return ("simple",) if collective in ("all_to_all", "send_recv") else algo.protocols


def _measured(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile
              ) -> float | None:
    """Inside a node with a measured curve: nccl-tests' time = factor * S / busbw, which is
    what NCCL's own choice of algorithm and protocol achieves (every algorithm gets it)."""
    if group.crosses_nodes or coll in ("all_to_all", "send_recv"):
        return None
    bus_time = measured_bus_time(hw, nbytes)
    return None if bus_time is None else busbw_factor(coll, group.size) * bus_time


def price(name: str, collective: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
          protocol: str = "auto", active: int | None = None) -> tuple[str, float]:
    """(protocol, seconds) of algorithm `name`: the given protocol, or with 'auto' the
    fastest of the algorithm's protocols (first listed on a tie), as NCCL's tuner picks."""
    algo = ALGORITHMS[name]
    measured = _measured(collective, nbytes, group, hw)
    if measured is not None:
        return "measured", measured
    options = protocols_of(name, collective) if protocol == "auto" else (protocol,)
    timed = [(algo.time_s(collective, nbytes, group, hw, p, active), i, p)
             for i, p in enumerate(options)]
    seconds, _, best = min(timed)
    return best, seconds
