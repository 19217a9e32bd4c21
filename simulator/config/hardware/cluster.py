"""Which device of a cluster is what kind, and how fast it runs: the `cluster.node_types`,
`cluster.slow` and `cluster.jitter` keys of a scenario as per-device arrays.

- kinds: nodes take their hardware profile from `node_types` in node order (ranks are
  node-major: rank r sits on node r // devices_per_node); without node_types every node is
  the scenario's `hardware`.
- speed: `compute` is the share of the profile's kernel throughput a device delivers (each
  of its kernels takes 1/compute as long: a throttled or degraded device, the what-if of
  Lin et al. 2025, "Understanding Stragglers in Large Model Training Using What-if Analysis",
  OSDI'25, which re-simulates a step with a worker's operation times changed); `nic` is the
  share of its NIC bandwidth it gets (a degraded link or port).
- jitter: per sample, every device draws a kernel-time multiplier from a lognormal of mean 1
  and coefficient of variation `compute_cv` (Sinha et al. 2022, "Not All GPUs Are Created
  Equal", SC'22: 8% average, up to 22%, performance variation between GPUs of one SKU); the
  step of each sample is simulated with those speeds.

Pure values: loading the other kinds' profiles is `cluster_hardware`'s only I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from simulator.config.hardware.schema import HardwareProfile
from simulator.errors import InputError

__all__ = ["ClusterHardware", "cluster_hardware", "jitter_multipliers", "with_nic"]


@dataclass(frozen=True, eq=False)
class ClusterHardware:
    """Per-device kind (index into `profiles`), compute and NIC speed factors."""

    profiles: tuple[HardwareProfile, ...]
    kind: np.ndarray      # int, one per device
    compute: np.ndarray   # float in (0, 1], one per device
    nic: np.ndarray       # float in (0, 1], one per device
    devices_per_node: int

    @property
    def devices(self) -> int:
        return len(self.kind)

    def nic_Gbps(self, ranks: np.ndarray) -> np.ndarray:
        """Per-NIC bandwidth each of `ranks` gets: its profile's, times its NIC factor."""
        bw = np.array([p.inter_node.nic_bandwidth_Gbps for p in self.profiles])
        return bw[self.kind[ranks]] * self.nic[ranks]

    def speeds(self, ranks: np.ndarray) -> tuple[tuple[int, float], ...]:
        """(kind, lowest compute factor of that kind) for each kind among `ranks`: the
        slowest member of a lock-step group sets its pace."""
        kinds = self.kind[ranks]
        return tuple((int(k), float(self.compute[ranks][kinds == k].min()))
                     for k in np.unique(kinds))

    def link(self, ranks: np.ndarray) -> tuple[tuple[int, ...], float]:
        """(kinds among `ranks`, the slowest per-NIC bandwidth among them in Gb/s): a
        collective over them runs at its slowest link."""
        return tuple(int(k) for k in np.unique(self.kind[ranks])), \
            float(self.nic_Gbps(ranks).min())

    def slowest(self, ranks: np.ndarray, dtype: str) -> int:
        """The rank that sets the pace of `ranks`: the lowest effective peak for `dtype`
        (profile peak x compute factor), then the slowest NIC, then the lowest rank."""
        peaks = np.array([p.peak_flops_per_s(dtype) if p.has_dtype(dtype) else 0.0
                          for p in self.profiles])
        order = np.lexsort((ranks, self.nic_Gbps(ranks),
                            peaks[self.kind[ranks]] * self.compute[ranks]))
        return int(ranks[order[0]])

    def device(self, rank: int) -> dict[str, Any]:
        """What a report says of one device."""
        return {"device": rank, "node": rank // self.devices_per_node,
                "hardware": self.profiles[int(self.kind[rank])].name,
                "compute_factor": float(self.compute[rank]),
                "nic_factor": float(self.nic[rank])}

    def jittered(self, multipliers: np.ndarray) -> ClusterHardware:
        """The same cluster with every kernel time multiplied by `multipliers` (per device)."""
        return replace(self, compute=self.compute / multipliers)


def _kinds(scenario: Any, hw: HardwareProfile,
           load: Callable[[str], HardwareProfile]) -> tuple[tuple[HardwareProfile, ...],
                                                             np.ndarray]:
    """The profiles of the node types and the kind of every node."""
    c = scenario.cluster
    if c.node_types is None:
        return (hw,), np.zeros(c.nodes, dtype=np.int64)
    profiles: list[HardwareProfile] = []
    per_node: list[int] = []
    for i, t in enumerate(c.node_types):
        if t.hardware in (scenario.hardware, hw.name):
            prof = hw  # the scenario's profile, with its --set hardware. overrides
        else:
            try:
                prof = load(t.hardware)
            except InputError as err:
                raise InputError(scenario.source, f"cluster.node_types[{i}].hardware",
                                 err.message) from None
        names = [p.name for p in profiles]
        k = names.index(prof.name) if prof.name in names else len(profiles)
        if k == len(profiles):
            profiles.append(prof)
        per_node += [k] * t.nodes
    return tuple(profiles), np.array(per_node, dtype=np.int64)


def cluster_hardware(scenario: Any, hw: HardwareProfile,
                     load: Callable[[str], HardwareProfile] | None = None) -> ClusterHardware:
    """The per-device kinds and speeds of `scenario`'s cluster; `hw` is the scenario's own
    profile; `load` reads another profile by name (default: `hardware.load.load_profile`)."""
    from simulator.config.hardware.load import load_profile
    from simulator.config.scenario.rules import cluster_problems

    for key, message in cluster_problems(scenario):  # a scenario changed after validation
        raise InputError(scenario.source, key, message)
    c = scenario.cluster
    profiles, node_kind = _kinds(scenario, hw, load or load_profile)
    n, per = c.devices, c.devices_per_node
    compute, nic = np.ones(n), np.ones(n)
    for slow in c.slow:
        ranks = set(slow.devices)
        for node in slow.nodes:
            ranks.update(range(node * per, (node + 1) * per))
        idx = np.array(sorted(ranks), dtype=np.int64)
        compute[idx] *= slow.compute
        nic[idx] *= slow.nic
    return ClusterHardware(profiles, np.repeat(node_kind, per), compute, nic, per)


def jitter_multipliers(compute_cv: float, seed: int, samples: int, devices: int
                       ) -> np.ndarray:
    """(samples, devices) kernel-time multipliers, lognormal with mean 1 and coefficient of
    variation `compute_cv`: sigma^2 = ln(1 + cv^2), mu = -sigma^2 / 2."""
    sigma = float(np.sqrt(np.log1p(compute_cv ** 2)))
    rng = np.random.default_rng(seed)
    return rng.lognormal(-sigma ** 2 / 2, sigma, size=(samples, devices))


def with_nic(hw: HardwareProfile, nic_Gbps: float) -> HardwareProfile:
    """`hw` with each NIC at `nic_Gbps` (a slower link it shares a collective with)."""
    if nic_Gbps == hw.inter_node.nic_bandwidth_Gbps:
        return hw
    inter = hw.inter_node.model_copy(update={"nic_bandwidth_Gbps": nic_Gbps})
    return hw.model_copy(update={"inter_node": inter})
