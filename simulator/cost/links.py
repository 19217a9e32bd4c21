"""The links a collective crosses: effective bandwidths (bytes/s) and the measured NVLink curve.

B is the *effective* bus bandwidth of a link: the datasheet bandwidth times the profile's
`intra_node_bus_fraction` or `inter_node_bus_fraction`, which is what nccl-tests reports as
busbw for large messages (NCCL's protocol overhead, nccl-tests issue #212: "450GB/s is the
line rate ... NCCL can get an effective NVLink bandwidth of 370GB/s").

NIC sharing (contention). A device reaches the network through its nearest NIC(s): with at
least as many NICs as devices each device owns nics/devices of them and never shares, but never
more than its profile's node gives each of its devices (nics_per_node /
devices_per_node_default: a 4-GPU `devices_per_node` on an NVL72 rack keeps one NIC per GPU,
not 72/4); with
fewer, every NIC serves devices_per_node/nics devices, and the ones that use the network at
the same time split it evenly (fair share, max-min over equal flows). How many devices of a
node use the network at once is `active_per_node`; by default all of them (the SPMD case:
every tensor-parallel rank runs its own data-parallel reduction at the same moment), which is
also the worst case, so a caller that knows fewer are active may pass the smaller count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.specs import GroupSpec

__all__ = ["NicSharing", "nic_sharing", "intra_bus_bandwidth", "nic_share_bandwidth",
           "inter_bus_bandwidth", "group_network_bandwidth", "ring_link", "measured_bus_time",
           "fabric_share"]


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


def nic_share_bandwidth(hw: HardwareProfile, devices_per_node: int,
                        active_per_node: int | None = None) -> float:
    """Datasheet network bandwidth one device gets, bytes/s, one direction, when
    `active_per_node` devices of its node (default: all) use the network at once."""
    nics = hw.inter_node.nics_per_node
    # a device never owns more NICs than the profile's node gives each of its devices
    everyone = hw.node_network_bandwidth_bytes_per_s / max(devices_per_node,
                                                           hw.devices_per_node_default)
    if nics >= devices_per_node or active_per_node is None:
        return everyone  # a NIC (or several) of its own, or all devices busy: an even split
    sharing = math.ceil(max(1, active_per_node) / nics)  # active devices on one NIC
    return max(everyone, hw.nic_bandwidth_bytes_per_s / sharing)


def inter_bus_bandwidth(hw: HardwareProfile, devices_per_node: int,
                        active_per_node: int | None = None) -> float:
    """Effective network bandwidth per device, bytes/s: its NIC share x the bus fraction."""
    share = nic_share_bandwidth(hw, devices_per_node, active_per_node)
    return share * hw.efficiency.inter_node_bus_fraction


def fabric_share(group: GroupSpec, hw: HardwareProfile) -> float:
    """The share of its NIC bandwidth a group keeps in the scale-out fabric: 1 inside one
    leaf, and for a group whose members span more nodes than a switch of a tier joins, 1 /
    the product of the oversubscriptions of the tiers it climbs through (`inter_node.tiers`:
    `fat_tree`, or `nodes_per_leaf` + `oversubscription` as one tier), when every node
    below sends up at once (the SPMD case: every data-parallel group reduces at the same
    moment; a leaf's uplinks carry 1/r1 of what its nodes send, its pod's uplinks 1/r2 of
    that). A group's span is the node range from its first member to its last ((size - 1) x
    stride devices on), placed as a scheduler would, aligned to the switches (the engine
    sees the real placement: `cost.fabric`). Typical ratios: 1:1 in NVIDIA's DGX SuperPOD
    reference architecture (a non-blocking rail-optimised fat tree), 7:1 above Meta's
    3,072-GPU pods of the Llama 3 clusters (Dubey et al. 2024, "The Llama 3 Herd of Models",
    Sec. 3.3.1)."""
    tiers = hw.inter_node.tiers
    if not tiers or group.size == 1:
        return 1.0
    span = (group.size - 1) * group.stride // group.devices_per_node + 1
    ratio = 1.0
    for tier in tiers:
        if span <= tier.nodes:
            break
        ratio *= tier.oversubscription
    return 1.0 / ratio if ratio != 1.0 else 1.0


def group_network_bandwidth(group: GroupSpec, hw: HardwareProfile,
                            active_per_node: int | None = None) -> float:
    """Effective bandwidth with which the group's members on one node reach the network
    together: members_per_node NIC shares (NCCL spreads its channels over the NICs), times
    the share the fabric above the leaves leaves it (`fabric_share`)."""
    return group.members_per_node * inter_bus_bandwidth(hw, group.devices_per_node,
                                                        active_per_node) \
        * fabric_share(group, hw)


def ring_link(group: GroupSpec, hw: HardwareProfile,
              active_per_node: int | None = None) -> tuple[float, float]:
    """(B, alpha) of the slowest hop of a ring over the whole group: the NVLink of a member
    inside a node, or the node's exit through the members' NIC shares across nodes (alpha is
    then the network step latency)."""
    m = group.members_per_node
    if not group.crosses_nodes:
        return intra_bus_bandwidth(hw, m), hw.intra_link_latency_s
    nic = group_network_bandwidth(group, hw, active_per_node)
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


@dataclass(frozen=True)
class NicSharing:
    """Which NIC resource each device of a node transfers through, and how the engine shares
    it (`inter_node.flow_sharing: fair`). `resource(local)`: the resource of the device at
    local rank `local` (an index below devices_per_node); `slots`: how many transfers of a
    device alone on its NIC the resource carries at full rate at once; `priced`: how much
    slower than alone the all-active share the cost model prices a transfer at
    (`nic_share_bandwidth`) is, so that the engine can take a transfer's work alone as its
    duration / priced."""

    rail_optimized: bool
    nics: int
    devices_per_node: int
    slots: float
    priced: float

    def resource(self, local: int) -> int:
        if not self.rail_optimized:
            return 0  # the node's NICs, one pool
        if self.nics >= self.devices_per_node:
            return local  # a NIC (or several) of its own
        return local * self.nics // self.devices_per_node  # its nearest NIC


def nic_sharing(hw: HardwareProfile, devices_per_node: int) -> NicSharing:
    """How the devices of a node share its NICs: rail-optimised (`inter_node.rail_optimized`:
    NIC i of every node on rail switch i, a device's traffic through its nearest NIC, as
    NCCL keeps it with NCCL_CROSS_NIC=0), a resource per NIC carrying one device-alone
    transfer at a time; else one pool of the node's NICs (all on one shared leaf, NCCL
    spreading channels over any of them, NCCL_CROSS_NIC=1), carrying as many device-alone
    transfers as it has NICs (or devices, when each device has a NIC's worth of its own).
    A device alone gets `nic_share_bandwidth(..., active_per_node=1)`."""
    alone = nic_share_bandwidth(hw, devices_per_node, 1)
    shared = nic_share_bandwidth(hw, devices_per_node)
    nics = hw.inter_node.nics_per_node
    rail = bool(hw.inter_node.rail_optimized)
    slots = 1.0 if rail else float(min(nics, devices_per_node))
    return NicSharing(rail, nics, devices_per_node, slots, alone / shared)
