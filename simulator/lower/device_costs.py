"""Per-device cost models for a cluster whose devices differ (`hardware.cluster`): mixed
kinds, slowed devices, jittered speeds.

Synchronous training makes groups move at the pace of their slowest member, and that is
what each simulated device is priced with:
- compute: a tensor-parallel group runs in lock step (collectives inside every layer), so a
  device's kernels take the time of the slowest member of its group: for each kind in the
  group, the kernel's time on that kind's profile over the kind's lowest compute factor,
  the largest of these.
- collectives: a collective over a group runs at its slowest link: priced on each member
  kind's profile with every NIC at the group's slowest per-NIC bandwidth (profile bandwidth
  x NIC factor; across kinds that is the slower NIC), the largest of these.
- pipeline sends: the same over the sender and the receiver.
Under `representative` fidelity a simulated device stands for its whole pipeline stage, so
its scope for all three is the stage: it runs as the stage's slowest replica, and the
gradient collectives, which every replica must join, wait for it (a synchronous step's time
is its slowest replica's). Under `full` fidelity every device has its own scope (its tensor
group, the members of each of its collectives) and the engine's rendezvous makes the others
wait. Devices priced alike share one CostModel (and the lowering one view).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simulator.config.hardware.cluster import ClusterHardware, with_nic
from simulator.config.hardware.schema import HardwareProfile
from simulator.cost.specs import ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel
from simulator.lower.layout import RankMesh

__all__ = ["DeviceCosts"]

Link = tuple[tuple[int, ...], float]  # (kinds, slowest per-NIC Gb/s)


class DeviceCosts:
    """`for_device(rank)`: the CostModel of a simulated device; `pacer(rank)`: the real
    device whose speed it runs at (the slowest of its compute scope)."""

    def __init__(self, cluster: ClusterHardware, ranks: RankMesh, fidelity: str, dtype: str,
                 base: Callable[[HardwareProfile], CostModel] = CostModel.from_hardware
                 ) -> None:
        self.cluster, self.ranks, self.fidelity, self.dtype = cluster, ranks, fidelity, dtype
        self._base_of = base
        self._bases: dict[tuple[int, float], CostModel] = {}
        self._models: dict[tuple, CostModel] = {}
        self.axis_of = {g: a for a, g in ranks.groups().items()}
        self._strides = {name: ranks.mesh.stride(i) for i, (name, _) in
                         enumerate(ranks.mesh.axes)}

    # ---- scopes ----------------------------------------------------------------------------
    def _stage(self, rank: int) -> np.ndarray:
        per = self.ranks.devices // self.ranks.pipeline
        s = self.ranks.stage(rank)
        return np.arange(s * per, (s + 1) * per)

    def _members(self, rank: int, axis: str) -> np.ndarray:
        size, stride = self.ranks.size(axis), self._strides[axis]
        base = rank - ((rank // stride) % size) * stride
        return base + stride * np.arange(size)

    def scope(self, rank: int, axis: str | None) -> np.ndarray:
        """Ranks whose pace `rank` takes on `axis` (None: its compute)."""
        if self.fidelity != "full":
            return self._stage(rank)
        if axis is None:  # its tensor group: tp, the tpx x tpy grid of 2-D, the cube of 3-D
            tensor = [a for a in ("tp", "tpx", "tpy", "tpz") if a in self._strides]
            scope = np.array([rank])
            for a in tensor:
                scope = np.unique(np.concatenate([self._members(r, a) for r in scope]))
            return scope
        return self._members(rank, axis)

    def pacer(self, rank: int) -> int:
        return self.cluster.slowest(self.scope(rank, None), self.dtype)

    # ---- pricing ---------------------------------------------------------------------------
    def _base(self, kind: int, nic_Gbps: float | None = None) -> CostModel:
        prof = self.cluster.profiles[kind]
        nic = prof.inter_node.nic_bandwidth_Gbps if nic_Gbps is None else nic_Gbps
        key = (kind, nic)
        if key not in self._bases:
            self._bases[key] = self._base_of(with_nic(prof, nic))
        return self._bases[key]

    def send_s(self, nbytes: float, intra: bool, rank: int, peer: int) -> float:
        """A pipeline send from `rank` to `peer`, at the slower of the two."""
        scope = np.union1d(self.scope(rank, "pp"), self.scope(peer, "pp")) \
            if self.fidelity != "full" else np.array([rank, peer])
        kinds, nic = self.cluster.link(scope)
        return max(self._base(k, nic).send_recv_s(nbytes, intra) for k in kinds)

    def for_device(self, rank: int) -> CostModel:
        """The cost model of simulated device `rank` (one object per distinct pricing)."""
        speeds = self.cluster.speeds(self.scope(rank, None))
        links = tuple((axis, self.cluster.link(self.scope(rank, axis)))
                      for axis in self._strides)
        key = (speeds, links)
        if key not in self._models:
            self._models[key] = self._model(speeds, dict(links))
        return self._models[key]

    def _model(self, speeds: tuple[tuple[int, float], ...], links: dict[str, Link]
               ) -> CostModel:
        own = self._base(speeds[0][0])

        def compute_s(spec: ComputeSpec) -> float:
            return max(self._base(k).compute_s(spec) / f for k, f in speeds)

        def collective_s(coll: str, nbytes: float, group: GroupSpec) -> float:
            kinds, nic = links.get(self.axis_of.get(group, ""), links[next(iter(links))])
            return max(self._base(k, nic).collective_s(coll, nbytes, group) for k in kinds)

        def send_recv_s(nbytes: float, intra: bool) -> float:
            kinds, nic = links.get("pp", links[next(iter(links))])
            return max(self._base(k, nic).send_recv_s(nbytes, intra) for k in kinds)

        return CostModel(compute_s=compute_s, collective_s=collective_s,
                         send_recv_s=send_recv_s, copy_s=own.copy_s, peer_send_s=self.send_s,
                         hardware=own.hardware, overlap_slowdown=own.overlap_slowdown,
                         host_kernel_s=own.host_kernel_s,
                         moe_host_kernel_s=own.moe_host_kernel_s,
                         moe_dispatcher_kernels=own.moe_dispatcher_kernels,
                         moe_loop_s=own.moe_loop_s,
                         graph_launch_s=own.graph_launch_s,
                         nvme_read_s=own.nvme_read_s,
                         nvme_write_s=own.nvme_write_s)
