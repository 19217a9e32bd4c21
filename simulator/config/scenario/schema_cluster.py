"""The scenario's cluster: nodes of devices, mixed device kinds, stragglers and jitter
(simulated by simulator/config/hardware/cluster.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StrictFloat, StrictInt, StrictStr

from simulator.config.scenario.schema_types import Degree, PerNode, Rank, Seed, Speed, _Closed

__all__ = ["NodeType", "SlowSpec", "JitterSpec", "ClusterSpec"]


class NodeType(_Closed):
    """`nodes` consecutive nodes of hardware profile `hardware` (a bundled name or a path)."""

    hardware: StrictStr = Field(
        description="Hardware profile of these nodes: a bundled name or a path.")
    nodes: Degree = Field(description="Number of consecutive nodes of this kind.")


class SlowSpec(_Closed):
    """Devices that run below their profile: `devices` (global ranks) and every device of
    `nodes` (node indices). `compute`: share of the profile's kernel throughput the device
    delivers (each kernel takes 1/compute as long); `nic`: share of its NIC bandwidth.
    A device named by several entries takes the product of their factors."""

    devices: tuple[Rank, ...] = Field(default=(), description="Global ranks of the slowed devices.")
    nodes: tuple[Rank, ...] = Field(
        default=(), description="Indices of the nodes whose every device is slowed.")
    compute: Speed = Field(default=1.0, description=(
        "Share of the profile's kernel throughput delivered, 0.001 to 1 (0.5: each kernel takes "
        "twice as long)."))
    nic: Speed = Field(
        default=1.0, description="Share of the profile's NIC bandwidth delivered, 0.001 to 1.")


class JitterSpec(_Closed):
    """Run-to-run variability: `samples` iterations, each drawing every device's kernel-time
    multiplier from a lognormal of mean 1 and coefficient of variation `compute_cv`, from
    numpy's generator seeded with `seed` (the same seed, the same distribution)."""

    compute_cv: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)] = Field(description=(
        "Coefficient of variation (0 to 1) of each device's lognormal kernel-time multiplier of "
        "mean 1."))
    seed: Seed = Field(
        default=0, description="Seed of the jitter draws (the same seed, the same distribution).")
    samples: Annotated[StrictInt, Field(ge=1, le=1000)] = Field(
        default=20, description="Iterations drawn.")


class ClusterSpec(_Closed):
    """`nodes` nodes of `devices_per_node` devices. Optional: `node_types` (mixed device
    kinds, in node order, default every node of the scenario's `hardware`), `slow`
    (stragglers) and `jitter` (a distribution of iteration times);
    see simulator/config/hardware/cluster.py for how they are simulated."""

    nodes: Degree = Field(default=1, description="Number of nodes.")
    devices_per_node: PerNode = Field(default=1, description="Devices (accelerators) per node.")
    node_types: tuple[NodeType, ...] | None = Field(default=None, description=(
        "Mixed device kinds: runs of consecutive nodes with a hardware profile of their own, in "
        "node order; null: every node of the scenario's hardware."))
    slow: tuple[SlowSpec, ...] = Field(default=(), description=(
        "Stragglers: devices or nodes that run below their profile's speed."))
    jitter: JitterSpec | None = Field(
        default=None, description="Run-to-run variability of kernel times; null: none.")

    @property
    def uniform(self) -> bool:
        """Every device alike: one kind, none slowed, no jitter."""
        return self.node_types is None and not self.slow and self.jitter is None

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node
