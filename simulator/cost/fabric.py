"""The scale-out fat tree as the engine shares it (`inter_node.fat_tree`, or
`nodes_per_leaf` + `oversubscription` as one tier, under `inter_node.flow_sharing: fair`).

Every switch of tier i joins `nodes[i]` nodes; its uplinks to the tier above carry
1 / oversubscription of what comes up from below, so the uplinks of one switch carry
nodes[i] x slots / (r_0 x ... x r_i) transfers of a device alone on its NIC at full rate,
`slots` being what one node's NIC resource carries (`cost.links.nic_sharing`: one NIC of a
rail, or the node's pool). A flow between nodes a and b climbs through the uplinks of every
tier whose switch does not hold both (`crossed`); above the last tier a non-blocking root
joins everything. Where the fabric is rail-optimised each rail is its own tree (NIC i of
every node on the leaf of rail i; NVIDIA's DGX SuperPOD reference architectures: "each group
of 32 nodes is rail-aligned", DGX H100 RA, Network Fabrics), so a resource is one switch's
uplinks on one rail.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.links import nic_sharing

__all__ = ["Fabric", "fabric"]


@dataclass(frozen=True)
class Fabric:
    """nodes: nodes below one switch, per tier bottom up; capacity: device-alone transfers
    the uplinks of one switch (of one rail, where rail-optimised) carry at full rate at
    once, per tier; names: what `run` calls each tier's uplinks."""

    nodes: tuple[int, ...]
    capacity: tuple[float, ...]
    names: tuple[str, ...]
    rail_optimized: bool

    def crossed(self, a: int, b: int) -> int:
        """How many tiers, bottom up, a flow between nodes a and b climbs through (0: one
        leaf joins both; len(nodes): it goes over every tier, through the root)."""
        k = 0
        while k < len(self.nodes) and a // self.nodes[k] != b // self.nodes[k]:
            k += 1
        return k

    def switch(self, tier: int, node: int) -> int:
        """The switch of `tier` above `node` (numbered from 0 along the nodes)."""
        return node // self.nodes[tier]


def fabric(hw: HardwareProfile, devices_per_node: int) -> Fabric | None:
    """The fat tree of `hw` on nodes of `devices_per_node`; None where the profile states
    none (a non-blocking fabric, nothing to share above the NICs)."""
    tiers = hw.inter_node.tiers
    if not tiers:
        return None
    slots = nic_sharing(hw, devices_per_node).slots
    ratio, capacity = 1.0, []
    for tier in tiers:
        ratio *= tier.oversubscription
        capacity.append(tier.nodes * slots / ratio)
    return Fabric(tuple(t.nodes for t in tiers), tuple(capacity),
                  tuple(hw.inter_node.tier_name(i) for i in range(len(tiers))),
                  bool(hw.inter_node.rail_optimized))
