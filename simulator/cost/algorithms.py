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

Protocols (NCCL): Simple, LL128 and LL trade bandwidth for latency. On a profile with an
`nccl:` block (every NVIDIA one) each (algorithm, protocol) is priced by NCCL's own tuning
model (`simulator.cost.nccl_tuning`, NVIDIA/nccl src/graph/tuning.cc v2.30.7): its base
latency, its per-step NVLink and network latencies, its bandwidth share (LL half the bus
bandwidth up to NCCL's llMaxBw, LL128 0.92, tree 0.92), and the fill of the chunk pipelines
of NVLS, NVLS_TREE and the tree (NCCL's chunk sizes and channel counts), which is what makes
mid-size collectives slower than alpha-beta with the asymptotic bandwidth says; the fastest
protocol wins, as NCCL's tuner picks. A profile without one (Ascend, CPU) keeps its measured
step latencies, the network hop scaled by NCCL's protocol ratios and the NVLink one not. The
measured NVLink curve (`intra_node.allreduce_busbw_GBps`), where a profile has one, is the
ring inside a node whatever the protocol. Pairwise exchanges (all_to_all, send_recv) use
Simple only, as NCCL's point-to-point kernels do for large messages.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from simulator.config.hardware.schema import HardwareProfile
from simulator.cost import nccl_tuning as nccl
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

# profiles without an `nccl:` block: (network hop latency / Simple's, bandwidth share of
# Simple) per (algorithm, protocol):
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
    protocol applied), the latency of a step inside a node and across nodes (s, protocol
    applied) and the fixed latency of the whole collective (s)."""

    bw: float
    nic: float
    alpha_in: float
    alpha_net: float
    base: float = 0.0


def _ll_cap(hw: HardwareProfile, nodes: int) -> float:
    """NCCL's LL bus-bandwidth ceiling (llMaxBws), bytes/s; inf without an NCCL model."""
    if hw.nccl is None:
        return math.inf
    return nccl.ll_max_busbw_GBps(hw.nccl.generation, hw.nccl.cpu_vendor, nodes) * 1e9


def _net(group: GroupSpec, hw: HardwareProfile, family: str, protocol: str,
         active: int | None, collective: str = "all_reduce") -> Net:
    bw, _ = ring_link(group, hw, active)
    nic = group_network_bandwidth(group, hw, active) if group.crosses_nodes else bw
    nodes = group.nodes_spanned
    if hw.nccl is None:
        lat, bws = _PROTOCOL_SCALE[(family, protocol)]
        return Net(bw * bws, nic * bws, hw.intra_link_latency_s, hw.inter_link_latency_s * lat)
    share = nccl.protocol_bandwidth_factor(family, collective, protocol, nodes)
    cap = _ll_cap(hw, nodes) if protocol == "ll" else math.inf
    intra = nccl.hop_latency_us("nvlink", family, protocol)
    # with one rank per node every step is exposed: NCCL prices it with the tree's NET figure
    net_family = "tree" if group.members_per_node == 1 else family
    inter = nccl.hop_latency_us("net", net_family, protocol)
    if group.crosses_nodes and family == "ring":
        intra = max(intra, nccl.net_overhead_us(hw.nccl.cpu_vendor, protocol))
    return Net(min(bw * share, cap), min(nic * share, cap), intra * 1e-6, inter * 1e-6,
               nccl.base_latency_us(family, protocol) * 1e-6)


def _ring_steps(collective: str, n: int, nodes: int) -> tuple[int, int]:
    """(all steps, steps that cross the network) of a ring, as NCCL's tuning model counts."""
    if collective == "send_recv":
        return 1, int(nodes > 1)
    if collective == "all_reduce":
        return 2 * (n - 1), 2 * (nodes - 1)
    return n - 1, nodes - 1


def _ring_latency(coll: str, n: int, nodes: int, net: Net, hw: HardwareProfile,
                  protocol: str) -> float:
    steps, net_steps = _ring_steps(coll, n, nodes)
    lat = net.base + (steps - net_steps) * net.alpha_in + net_steps * net.alpha_net
    if (hw.nccl is not None and coll == "all_reduce" and nodes > 1 and protocol == "simple"
            and hw.nccl.generation in ("ampere", "hopper", "blackwell")):
        lat *= nccl.RING_PLATEAU
    return lat


def _ring_s(coll: str, nbytes: float, n: int, nodes: int, bw: float, net: Net,
            hw: HardwareProfile, protocol: str) -> float:
    return busbw_factor(coll, n) * nbytes / bw + _ring_latency(coll, n, nodes, net, hw, protocol)


def _ring(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
          active: int | None) -> float:
    n = 2 if coll == "send_recv" else group.size
    if coll == "all_to_all":
        return _all_to_all(nbytes, group, hw, active)
    net = _net(group, hw, "ring", protocol, active, coll)
    return _ring_s(coll, nbytes, n, group.nodes_spanned, net.bw, net, hw, protocol)


def _all_to_all(nbytes: float, group: GroupSpec, hw: HardwareProfile,
                active: int | None) -> float:
    """Pairwise exchange: each device keeps S/n, sends (m-1)/n*S inside its node and
    (n-m)/n*S through its NIC share; both run at once. With `group.remote_share` (DeepEP's
    once-a-node forwarding, `cost.deepep`): that share of S through the NIC and (m-1)/m*S
    over NVLink, at once."""
    n, m = group.size, group.members_per_node
    intra, inter, peers = (m - 1) / n, (n - m) / n, n - 1
    if group.remote_share and group.crosses_nodes:
        # once a node over the NIC, then forwarded over NVLink (cost.deepep): a device's
        # network peers are the other nodes' GPUs of its local rank
        intra, inter, peers = (m - 1) / m, group.remote_share, group.nodes_spanned - 1
    t_intra = intra * nbytes / intra_bus_bandwidth(hw, m) if m > 1 else 0.0
    t_inter = 0.0
    if group.crosses_nodes:
        t_inter = inter * nbytes / (group_network_bandwidth(group, hw, active) / m)
    alpha = hw.inter_link_latency_s if group.crosses_nodes else hw.intra_link_latency_s
    return max(t_intra, t_inter) + peers * alpha


def _tree(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
          active: int | None) -> float:
    net = _net(group, hw, "tree", protocol, active, coll)
    m, nodes = group.members_per_node, group.nodes_spanned
    if hw.nccl is None:
        depth = math.ceil(math.log2(nodes)) if nodes > 1 else 0
        return 2 * nbytes / net.bw + 2 * (m - 1) * net.alpha_in + 2 * depth * net.alpha_net
    depth = int(math.floor(math.log2(nodes))) if nodes > 1 else 0  # NCCL's log2i
    fill = nccl.tree_fill_bytes(protocol, nbytes, hw.nccl.channels, m, nodes)
    return ((2 * nbytes + fill) / net.bw + net.base
            + 2 * ((m - 1) * net.alpha_in + depth * net.alpha_net))


def _hierarchical(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
                  protocol: str, active: int | None) -> float:
    """Intra-node phase, inter-node phase on S/m per local rank, intra-node phase."""
    if not group.crosses_nodes:
        return _ring(coll, nbytes, group, hw, protocol, active)
    m, nodes = group.members_per_node, group.nodes_spanned
    net = _net(group, hw, "ring", protocol, active, coll)
    bws = net.bw / ring_link(group, hw, active)[0]
    inner = _ring_s(coll, nbytes, m, 1, min(intra_bus_bandwidth(hw, m) * bws,
                                             _ll_cap(hw, 1) if protocol == "ll" else math.inf),
                    net, hw, protocol) if m > 1 else 0.0
    outer_bytes = nbytes if coll == "broadcast" else nbytes / m
    return inner + _ring_s(coll, outer_bytes, nodes, nodes, net.nic / m, net, hw, protocol)


def _nvls_bytes(coll: str, nbytes: float, n: int) -> float:
    """Bytes one GPU moves per direction over its NVLink in an NVLS collective."""
    return (1 + 1 / n) * nbytes if coll == "all_reduce" else nbytes


def _nvls(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile, protocol: str,
          active: int | None) -> float:
    nvls = hw.intra_node.nvls
    assert nvls is not None
    bw = intra_bus_bandwidth(hw, group.size) * nvls.efficiency
    piped = nbytes if hw.nccl is None else nccl.nvls_pipeline_bytes(
        "nvls", coll, nbytes, hw.nccl.generation, group.size, 1)
    return _nvls_bytes(coll, piped, group.size) / bw + nvls.latency_s


def _nvls_tree(coll: str, nbytes: float, group: GroupSpec, hw: HardwareProfile,
               protocol: str, active: int | None) -> float:
    """NVLS reduce and multicast in each node, a tree of S/m per local rank across the nodes,
    the two pipelined (NCCL's NVLS_TREE: bandwidth min(intraBw, interBw), latency
    `intraLat + 2*log2i(nNodes)*interLat`; with 2 nodes the tree is one exchange, which
    tuning.cc models as twice the inter-node bandwidth)."""
    nvls = hw.intra_node.nvls
    assert nvls is not None
    m, nodes = group.members_per_node, group.nodes_spanned
    piped = nbytes if hw.nccl is None else nccl.nvls_pipeline_bytes(
        "nvls_tree", coll, nbytes, hw.nccl.generation, m, nodes)
    t_in = _nvls_bytes(coll, piped, m) / (intra_bus_bandwidth(hw, m) * nvls.efficiency)
    passes = 1 if nodes == 2 else 2
    t_net = passes * piped / group_network_bandwidth(group, hw, active)
    if hw.nccl is None:
        depth = math.ceil(math.log2(nodes))
        return max(t_in, t_net) + nvls.latency_s + 2 * depth * hw.inter_link_latency_s
    hop = nccl.hop_latency_us("net", "nvls_tree", "simple") * 1e-6
    return max(t_in, t_net) + nvls.latency_s + 2 * int(math.floor(math.log2(nodes))) * hop


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
    base = 0.0 if hw.nccl is None else nccl.base_latency_us("pat", "simple") * 1e-6
    return (n - 1) / n * nbytes / bw + base + depth * alpha / 3.5 + n * alpha * 2.8 / 14.0


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
    return best, seconds + _overhead_s(group, hw)


def _overhead_s(group: GroupSpec, hw: HardwareProfile) -> float:
    """What nccl-tests measures beyond NCCL's model at the smallest sizes (`nccl.overhead_us`,
    and `nccl.net_overhead_us` more across nodes); 0 without NCCL's model."""
    if hw.nccl is None:
        return 0.0
    net = hw.nccl.net_overhead_us if group.crosses_nodes else 0.0
    return (hw.nccl.overhead_us + net) * 1e-6
