"""The hardware profile's links: the NVLink domain inside a node (with NVLink SHARP), the
scale-out network and its fat tree, and the NCCL tuning rows that price collectives on them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from simulator.config.hardware.schema_units import Closed as _Closed
from simulator.config.hardware.schema_units import (
    Fraction,
    GBps,
    Gbps,
    LatencyUs,
    Links,
    MessageBytes,
)


class Nvls(_Closed):
    """NVLink SHARP (NVLS): the NVSwitch reduces and multicasts in the switch (3rd-gen NVSwitch
    on H100/H200, 4th-gen on B200/GB200). `efficiency` is the share of the ring's effective
    NVLink bandwidth that NVLS transfers reach (NCCL's `nvlsEfficiency`); `latency_us` the
    fixed time of one NVLS operation (NCCL's NVLink NVLS latency). See
    `simulator.cost.algorithms` for how they price a collective."""

    efficiency: Fraction
    latency_us: LatencyUs

    @property
    def latency_s(self) -> float:
        return self.latency_us * 1e-6


class IntraNode(_Closed):
    """The fabric between the devices of one node (NVLink/NVSwitch, HCCS, UPI).

    `bandwidth_GBps` is per device per direction; `latency_us` is the per-step latency alpha
    of a collective step on this fabric (link, synchronisation and software). On a `mesh`,
    `bandwidth_GBps` is spread over `mesh_links` direct links (default: one to each other
    device of the node)."""

    bandwidth_GBps: GBps
    latency_us: LatencyUs
    topology: Literal["switch", "ring", "mesh"] = "switch"
    mesh_links: Links | None = None
    # Measured all_reduce bus bandwidth on the node's devices, [[message bytes, busbw GB/s],
    # ...] ascending (nccl-tests all_reduce_perf). Where given, rings inside the node take
    # their time from it (NCCL's chunk pipelining and channel ramp-up make mid-size messages
    # slower than alpha-beta predicts); outside its range the ends hold.
    allreduce_busbw_GBps: tuple[tuple[MessageBytes, GBps], ...] | None = None
    # in-switch reduction (NVLink SHARP); absent where the switch has none
    nvls: Nvls | None = None


# what `run` calls the uplinks of each tier of a fat tree whose tiers name themselves not
TIER_NAMES: tuple[str, ...] = ("leaf", "spine", "core")
Ratio = Annotated[StrictFloat, Field(ge=1, le=64, allow_inf_nan=False)]


class FabricTier(_Closed):
    """One tier of switches of the scale-out fat tree, bottom up (`inter_node.fat_tree`):
    every switch of the tier joins `nodes` nodes below it (a leaf: the nodes cabled to it;
    a spine group: the leaves of its pod), and its uplinks to the tier above carry
    1 / `oversubscription` of the bandwidth that comes up from below it."""

    nodes: Annotated[StrictInt, Field(
        ge=1, le=1_000_000,
        description="nodes below one switch of this tier (a leaf: the nodes cabled to it, "
                    "one rail of them where `rail_optimized`; a spine group: its pod); a "
                    "whole multiple of the tier below's")]
    oversubscription: Ratio = Field(
        1.0, description="bandwidth into one switch of this tier from below over the "
                         "bandwidth of its uplinks to the tier above (1.0: non-blocking)")
    name: Annotated[StrictStr, Field(min_length=1, max_length=32)] | None = Field(
        None, description="what `run` calls this tier's uplinks in "
                          "critical_path.contention_on_path_by_link_s (default: leaf, spine, "
                          "core, tier4, ... bottom up)")


class InterNode(_Closed):
    """The network between nodes: `nics_per_node` NICs of `nic_bandwidth_Gbps` each (per
    direction), shared by the devices of the node; `latency_us` is the per-step alpha.
    With fewer NICs than devices, nics_per_node divides the devices into equal sets that
    each share one NIC (a device uses its nearest NIC, as NCCL does without PXN)."""

    nics_per_node: Links
    nic_bandwidth_Gbps: Gbps
    latency_us: LatencyUs
    # how the transfers of one device that run at once share its link (engine.core): fifo,
    # one after another at the full rate; fair, all at once at 1/n each (NCCL channels and
    # RDMA queue pairs of concurrent collectives share the NIC)
    flow_sharing: Literal["fifo", "fair"] = "fifo"
    # the scale-out fabric: nodes that one leaf switch (one rail of a rail-optimised fabric,
    # or a non-blocking pod) joins at full bandwidth, and the ratio of the bandwidth below the
    # tier above it to the bandwidth up through it; a group spanning more nodes than a leaf
    # gets 1 / oversubscription of its network bandwidth. None / 1.0: non-blocking
    nodes_per_leaf: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    oversubscription: Ratio = 1.0
    # the fat tree's tiers bottom up, each with its oversubscription (the general form of
    # nodes_per_leaf + oversubscription, which are one tier: `tiers`)
    fat_tree: tuple[FabricTier, ...] | None = Field(
        None, min_length=1, max_length=8,
        description="the scale-out fat tree bottom up, one entry per tier of switches "
                    "({nodes, oversubscription, name}); nodes beyond the last tier's switch "
                    "are joined by a non-blocking tier above it. nodes_per_leaf + "
                    "oversubscription alone are a one-tier tree; given beside it they replace "
                    "its leaf tier's figures")
    # how the node's NICs meet the fabric, which decides what a device shares its NIC with
    # under `flow_sharing: fair` (engine.core, cost.links.nic_sharing): rail-optimised, NIC i
    # of every node on rail switch i and a device's traffic through its nearest NIC (NCCL
    # keeps a ring on one NIC per rail, NCCL_CROSS_NIC=0), shared only with the devices
    # nearest that NIC; else every NIC on one shared leaf and a device's channels on any of
    # them (NCCL_CROSS_NIC=1), the node's NICs one pool its devices share
    rail_optimized: StrictBool = False

    @field_validator("fat_tree")
    @classmethod
    def _tiers_nest(cls, tree: tuple[FabricTier, ...] | None) -> tuple[FabricTier, ...] | None:
        for i, (low, high) in enumerate(zip(tree or (), (tree or ())[1:])):
            if high.nodes <= low.nodes or high.nodes % low.nodes:
                raise ValueError(f"fat_tree[{i + 1}] joins {high.nodes} nodes, fat_tree[{i}] "
                                 f"{low.nodes}: each tier must join a whole multiple (> 1) "
                                 f"of the nodes of the tier below it")
        return tree

    @model_validator(mode="after")
    def _leaf_nests(self) -> InterNode:
        tiers = self.tiers
        if len(tiers) > 1 and (tiers[1].nodes <= tiers[0].nodes
                               or tiers[1].nodes % tiers[0].nodes):
            raise ValueError(f"nodes_per_leaf {tiers[0].nodes} must divide fat_tree[1]'s "
                             f"{tiers[1].nodes} nodes (and be fewer)")
        return self

    @property
    def tiers(self) -> tuple[FabricTier, ...]:
        """The fat tree's tiers bottom up: `fat_tree`, its leaf tier replaced by
        nodes_per_leaf and oversubscription where they are given (a what-if `--set` on a
        profile that states its tree), or those two alone as a one-tier tree; () where the
        profile states no tree (a non-blocking fabric)."""
        if self.fat_tree is None:
            if self.nodes_per_leaf is None:
                return ()
            return (FabricTier(nodes=self.nodes_per_leaf,
                               oversubscription=self.oversubscription, name=None),)
        leaf = self.fat_tree[0]
        update: dict[str, object] = {}
        if self.nodes_per_leaf is not None:
            update["nodes"] = self.nodes_per_leaf
        if "oversubscription" in self.model_fields_set:
            update["oversubscription"] = self.oversubscription
        return (leaf.model_copy(update=update),) + self.fat_tree[1:] if update \
            else self.fat_tree

    def tier_name(self, i: int) -> str:
        """What `run` calls the uplinks of tier i (0: the leaves)."""
        own = self.tiers[i].name if i < len(self.tiers) else None
        return own or (TIER_NAMES[i] if i < len(TIER_NAMES) else f"tier{i + 1}")


class Nccl(_Closed):
    """The NCCL tuning model prices this device's collectives (`simulator.cost.nccl_tuning`:
    NCCL's base and per-step latencies per algorithm and protocol, the LL and LL128
    bandwidth shares). `generation` selects NCCL's per-architecture rows (the LL ceiling
    inside a node); `cpu_vendor` the per-host rows (the LL ceiling across nodes, the network
    post overhead; NCCL treats every vendor but AMD as Intel). Absent: the profile's own
    step latencies price every protocol."""

    generation: Literal["volta", "ampere", "hopper", "blackwell"]
    cpu_vendor: Literal["intel", "amd", "arm"] = "intel"
    # NCCL's collective channels on this node (its log: "24 coll channels"): how many chunks
    # a tree's pipeline carries at once
    channels: Annotated[StrictInt, Field(ge=1, le=64)] = 24
    # a fixed time every collective takes beyond NCCL's model (kernel launch, proxy and
    # flag set-up), as nccl-tests measures it at the smallest sizes, and the further time a
    # collective across nodes takes (the network's own start-up: a TCP offload's, say);
    # fitted by `shardsim calibrate` from logs inside a node and across nodes; 0: NCCL's
    # model alone
    overhead_us: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)] = 0.0
    net_overhead_us: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)] = 0.0
