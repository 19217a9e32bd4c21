"""The scenario's cluster: nodes of devices, mixed device kinds, stragglers and jitter
(simulated by simulator/config/hardware/cluster.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictFloat, StrictInt, StrictStr

from simulator.config.scenario.schema_types import Degree, PerNode, Rank, Seed, Speed, _Closed

__all__ = ["NodeType", "SlowSpec", "JitterSpec", "ClusterSpec"]


class NodeType(_Closed):
    """`nodes` consecutive nodes of hardware profile `hardware` (a bundled name or a path)."""

    hardware: StrictStr
    nodes: Degree


class SlowSpec(_Closed):
    """Devices that run below their profile: `devices` (global ranks) and every device of
    `nodes` (node indices). `compute`: share of the profile's kernel throughput the device
    delivers (each kernel takes 1/compute as long); `nic`: share of its NIC bandwidth.
    A device named by several entries takes the product of their factors."""

    devices: tuple[Rank, ...] = ()
    nodes: tuple[Rank, ...] = ()
    compute: Speed = 1.0
    nic: Speed = 1.0


class JitterSpec(_Closed):
    """Run-to-run variability: `samples` iterations, each drawing every device's kernel-time
    multiplier from a lognormal of mean 1 and coefficient of variation `compute_cv`, from
    numpy's generator seeded with `seed` (the same seed, the same distribution)."""

    compute_cv: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)]
    seed: Seed = 0
    samples: Annotated[StrictInt, Field(ge=1, le=1000)] = 20


class ClusterSpec(_Closed):
    """`nodes` nodes of `devices_per_node` devices. Optional: `node_types` (mixed device
    kinds, in node order, default every node of the scenario's `hardware`), `slow`
    (stragglers) and `jitter` (a distribution of iteration times);
    see simulator/config/hardware/cluster.py for how they are simulated."""

    nodes: Degree = 1
    devices_per_node: PerNode = 1
    node_types: tuple[NodeType, ...] | None = None
    slow: tuple[SlowSpec, ...] = ()
    jitter: JitterSpec | None = None

    @property
    def uniform(self) -> bool:
        """Every device alike: one kind, none slowed, no jitter."""
        return self.node_types is None and not self.slow and self.jitter is None

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node
