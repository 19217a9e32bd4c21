"""The fat-tree uplinks each network transfer climbs through, as the engine shares them
(`inter_node.flow_sharing: fair` with a tree: `inter_node.fat_tree`, or `nodes_per_leaf` +
`oversubscription` as one tier; `cost.fabric` says what each switch's uplinks carry).

A data-parallel collective of a device whose group spans switches of a tier holds the
uplinks of its own switch at that tier and every tier below, both directions (its members
send to and receive from the members beyond them); a pipeline send holds its sender's
switches' uplinks and its receiver's downlinks, up to the tier that joins the two. Under
`representative` fidelity a simulated device stands for the devices of its pipeline stage:
its weight on an uplink is how many of them climb through that same uplink on the same rail
(each with its own group or peer); under `full` it is 1. The cost model priced a
collective on the tree it assumes, aligned to the switches (`cost.links.fabric_share`); the
route carries how much slower than on a non-blocking fabric that made the transfer, so the
engine takes its work alone off that price and applies the fabric's share itself.
Parameter-server transfers and DualPipe's mirror sync hold no route (their NIC only)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from simulator.cost import collective_time_s
from simulator.cost.fabric import Fabric, fabric
from simulator.cost.links import nic_sharing
from simulator.cost.specs import GroupSpec
from simulator.lower.layout import RankMesh

__all__ = ["Routes", "routes_for"]

Key = tuple[int, int, int, str]  # (tier, switch, rail, 'u' up | 'd' down)


class Routes:
    """Route ids of a plan's transfers, interned as the lowering asks for them."""

    def __init__(self, hw: Any, tree: Fabric, ranks: RankMesh, fidelity: str) -> None:
        self.hw, self.tree, self.ranks, self.fidelity = hw, tree, ranks, fidelity
        self.flat = hw.model_copy(update={"inter_node": hw.inter_node.model_copy(
            update={"fat_tree": None, "nodes_per_leaf": None, "oversubscription": 1.0})})
        self.share = nic_sharing(hw, ranks.devices_per_node)
        self.uplink_ids: dict[Key, int] = {}
        self.route_ids: dict[tuple, int] = {}
        self.factors: dict[tuple, float] = {}
        self.holds: dict[tuple, tuple[tuple[int, int], ...]] = {}

    def _rail(self, rank: int) -> int:
        if not self.tree.rail_optimized:
            return 0
        return self.share.resource(rank % self.ranks.devices_per_node)

    def _keys(self, rank: int, tiers: int, peer: int | None) -> list[Key]:
        """Uplinks of a transfer of `rank` through `tiers` tiers: to the members of its
        group (peer None: its own switches, both ways), or to `peer` (up here, down
        there)."""
        dpn, tree = self.ranks.devices_per_node, self.tree
        node = rank // dpn
        keys = []
        for i in range(tiers):
            keys.append((i, tree.switch(i, node), self._rail(rank), "u"))
            if peer is None:
                keys.append((i, tree.switch(i, node), self._rail(rank), "d"))
            else:
                keys.append((i, tree.switch(i, peer // dpn), self._rail(peer), "d"))
        return keys

    def _represented(self, dev: int) -> range:
        if self.fidelity == "full":
            return range(dev, dev + 1)
        per_stage = self.ranks.devices // self.ranks.pipeline
        first = self.ranks.stage(dev) * per_stage
        return range(first, first + per_stage)

    def collective(self, dev: int, axis: str, coll: str, nbytes: float,
                   group: GroupSpec) -> int:
        """The route of `dev`'s collective `coll` of `nbytes` over its `axis` group."""
        mesh = self.ranks.mesh
        a = mesh.names.index(axis)
        stride, size = mesh.stride(a), mesh.shape[a]
        dpn = self.ranks.devices_per_node

        def keys(rank: int) -> list[Key]:
            first = rank - mesh.coords(rank)[a] * stride
            last = first + (size - 1) * stride
            return self._keys(rank, self.tree.crossed(first // dpn, last // dpn), None)

        at = (coll, nbytes, group)
        if at not in self.factors:
            self.factors[at] = collective_time_s(coll, nbytes, group, self.hw) / max(
                collective_time_s(coll, nbytes, group, self.flat), 1e-300)
        if (dev, axis) not in self.holds:
            self.holds[(dev, axis)] = self._intern_keys(dev, keys)
        return self._route(self.factors[at], self.holds[(dev, axis)])

    def send(self, dev: int, peer: int) -> int:
        """The route of a point-to-point message from `dev` to `peer` (another stage)."""
        if (dev, peer) not in self.holds:
            stage = self.ranks.stage(peer)
            dpn = self.ranks.devices_per_node

            def keys(rank: int) -> list[Key]:
                other = peer if rank == dev else self.ranks.with_stage(rank, stage)
                return self._keys(rank, self.tree.crossed(rank // dpn, other // dpn), other)

            self.holds[(dev, peer)] = self._intern_keys(dev, keys)
        return self._route(1.0, self.holds[(dev, peer)])

    def _intern_keys(self, dev: int, keys_of: Any) -> tuple[tuple[int, int], ...]:
        count = Counter(k for r in self._represented(dev) for k in keys_of(r))
        ups = []
        for key in keys_of(dev):
            if key not in self.uplink_ids:
                self.uplink_ids[key] = len(self.uplink_ids)
            ups.append((self.uplink_ids[key], max(1, count[key])))
        return tuple(ups)

    def _route(self, factor: float, ups: tuple[tuple[int, int], ...]) -> int:
        if not ups and factor == 1.0:
            return -1
        route = (factor, ups)
        if route not in self.route_ids:
            self.route_ids[route] = len(self.route_ids)
        return self.route_ids[route]

    def fields(self) -> dict[str, tuple]:
        """The `engine.tasks.Plan` fields routes and uplinks."""
        names = self.tree.names
        uplinks = tuple((self.tree.capacity[k[0]], names[k[0]]) for k in self.uplink_ids)
        return {"routes": tuple(self.route_ids), "uplinks": uplinks}


def routes_for(hw: Any, ranks: RankMesh, fidelity: str) -> Routes | None:
    """The routes of a plan on `hw` (None without a profile, under fifo sharing, or where
    the profile states no fat tree)."""
    if hw is None or hw.inter_node.flow_sharing != "fair":
        return None
    tree = fabric(hw, ranks.devices_per_node)
    return None if tree is None else Routes(hw, tree, ranks, fidelity)
