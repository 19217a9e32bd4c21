"""What `simulate` adds for a cluster whose devices differ (`cluster.node_types`, `slow`,
`jitter`; see simulator/config/hardware/cluster.py and simulator/lower/device_costs.py): the
per-device cost models, the device that set the pace, the distribution of iteration times
under jitter, and the cluster-wide figures (memory capacity per device, mean peak).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.config.hardware.cluster import ClusterHardware, cluster_hardware, jitter_multipliers
from simulator.config.scenario.schema import Scenario
from simulator.engine.core import run
from simulator.engine.tasks import Plan
from simulator.lower.costs import CostModel
from simulator.lower.device_costs import DeviceCosts
from simulator.lower.layout import rank_mesh
from simulator.report.critical import pace
from simulator.sharding.mesh import Mesh

__all__ = ["Cluster", "pace_report", "jitter_report"]


class Cluster:
    """The devices of `scenario`'s cluster and how the simulation prices them; `costs`
    (tests) replaces the cost model of every profile. `device_costs` is None where every
    device is alike (the lowering then prices all with one cost model)."""

    def __init__(self, scenario: Scenario, hw: Any, fidelity: str, mesh: Mesh | None,
                 costs: CostModel | None = None,
                 host_kernel_s: tuple[float, tuple[Any, ...], float] = (0.0, (0.0, 0), 0.0)
                 ) -> None:
        self.scenario, self.hw, self.fidelity, self.mesh = scenario, hw, fidelity, mesh
        self._base: Callable[[Any], CostModel] = (
            (lambda prof: costs) if costs is not None
            else lambda prof: CostModel.from_hardware(prof, *host_kernel_s))
        self.hardware: ClusterHardware | None = None
        self.costs: DeviceCosts | None = None
        if not scenario.cluster.uniform:
            self.hardware = cluster_hardware(scenario, hw)
            self.costs = self._device_costs(self.hardware)

    def _device_costs(self, hardware: ClusterHardware) -> DeviceCosts:
        return DeviceCosts(hardware, rank_mesh(self.scenario, self.mesh), self.fidelity,
                           self.scenario.model.dtype, self._base)

    @property
    def device_costs(self) -> Callable[[int], CostModel] | None:
        return self.costs.for_device if self.costs is not None else None

    def capacity_bytes(self, device: int) -> float:
        """Memory of simulated `device`: the smallest of the kinds it stands for."""
        if self.hardware is None or self.costs is None:
            return float(self.hw.memory_capacity_bytes)
        scope = self.costs.scope(device, None) if self.fidelity != "full" \
            else np.array([device])
        kinds = np.unique(self.hardware.kind[scope])
        return min(float(self.hardware.profiles[k].memory_capacity_bytes) for k in kinds)

    def mean_peak_flops_per_s(self, dtype: str) -> float:
        """The devices' mean dense peak for `dtype` (the MFU denominator)."""
        if self.hardware is None:
            return float(self.hw.peak_flops_per_s(dtype))
        counts = np.bincount(self.hardware.kind, minlength=len(self.hardware.profiles))
        peaks = [p.peak_flops_per_s(dtype) for p in self.hardware.profiles]
        return float(np.dot(counts, peaks) / counts.sum())


def pace_report(cluster: Cluster, plan: Plan, trace: Any) -> dict[str, Any]:
    """Who set the pace: the simulated device with the most kernel time on the critical
    path, the real device whose speed it ran at, and that device's kind and factors."""
    p = pace(plan, trace)
    stage = plan.stage_of[plan.devices.index(p.device)]
    if cluster.costs is not None and cluster.hardware is not None:
        who = cluster.hardware.device(cluster.costs.pacer(p.device))
    else:
        who = {"device": p.device, "node": p.device // cluster.scenario.cluster.devices_per_node,
               "hardware": cluster.hw.name, "compute_factor": 1.0, "nic_factor": 1.0}
    share = p.compute_s / p.length_s if p.length_s > 0 else 0.0
    out = {**who, "stage": stage, "simulated_device": p.device,
           "compute_on_path_s": p.compute_s, "comm_on_path_s": p.comm_s,
           "share_of_iteration": share}
    if p.contention_s > 0:  # transfers sharing a link (Plan.link_sharing 'fair') cost time
        out["contention_on_path_s"] = p.contention_s
        if p.contention_by_link:
            out["contention_on_path_by_link_s"] = dict(p.contention_by_link)
    return out


def jitter_report(cluster: Cluster, lower: Callable[[Callable[[int], CostModel]], Plan]
                  ) -> dict[str, Any] | None:
    """Iteration times of `cluster.jitter.samples` jittered steps (each lowered by
    `lower(device_costs)` and simulated): mean, p50, p99, min, max, and every sample."""
    spec = cluster.scenario.cluster.jitter
    if spec is None or cluster.hardware is None:
        return None
    draws = jitter_multipliers(spec.compute_cv, spec.seed, spec.samples,
                               cluster.hardware.devices)
    times = []
    for row in draws:
        costs = cluster._device_costs(cluster.hardware.jittered(row))
        plan = lower(costs.for_device)
        times.append(max(run(plan).end, default=0.0))
    t = np.array(times)
    return {"compute_cv": spec.compute_cv, "seed": spec.seed, "samples": spec.samples,
            "mean_s": float(t.mean()), "p50_s": float(np.percentile(t, 50)),
            "p99_s": float(np.percentile(t, 99)), "min_s": float(t.min()),
            "max_s": float(t.max()), "iteration_times_s": [float(x) for x in t]}
