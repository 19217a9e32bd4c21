"""The hardware profile schema: one device type and the node it sits in.

YAML field names carry their units (`memory_GB`, `bandwidth_GBps`, `nic_bandwidth_Gbps`,
`latency_us`); the properties below convert them once to SI (bytes, bytes/s, FLOP/s, s) and
nothing else in shardsim reads the unit-suffixed fields. GB means 10^9 bytes and Gb 10^9 bits,
as datasheets use them.

Pydantic models, frozen, closed (unknown keys are errors) and strict (a boolean is not a
number). `efficiency` holds the physical parameters of the cost model (see `simulator.cost`);
they are per profile and never per run.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from simulator.config.framework.load import load_framework
from simulator.config.framework.schema import Software
from simulator.errors import InputError

__all__ = ["HardwareProfile", "Software", "PeakTflops", "IntraNode", "Nvls", "InterNode", "Host",
           "Efficiency", "Nccl", "DTYPES", "FabricTier", "TIER_NAMES"]

DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")

PosFloat = Annotated[StrictFloat, Field(gt=0)]  # strict floats accept integers, not booleans
PosInt = Annotated[StrictInt, Field(ge=1)]
Fraction = Annotated[StrictFloat, Field(gt=0, le=1, allow_inf_nan=False)]


# Physical bounds, wide enough for any device built or announced (B200: 4.5 PFLOP/s fp8, 8 TB/s
# HBM, 900 GB/s NVLink; a 1 Gb/s NIC; a laptop CPU) and narrow enough that a slipped exponent
# is refused instead of simulated (`bandwidth_GBps: 1e-300` would make one iteration 1e303 s).
# Every float is finite.
GBps = Annotated[StrictFloat, Field(ge=1e-3, le=1e5, allow_inf_nan=False)]
Gbps = Annotated[StrictFloat, Field(ge=1e-3, le=8e5, allow_inf_nan=False)]
Tflops = Annotated[StrictFloat, Field(ge=1e-6, le=1e6, allow_inf_nan=False)]
MemoryGB = Annotated[StrictFloat, Field(ge=1e-3, le=1e5, allow_inf_nan=False)]
HostGB = Annotated[StrictFloat, Field(ge=1e-3, le=1e7, allow_inf_nan=False)]
LatencyUs = Annotated[StrictFloat, Field(ge=1e-3, le=1e6, allow_inf_nan=False)]
LaunchUs = Annotated[StrictFloat, Field(ge=0, le=1e3, allow_inf_nan=False)]
MessageBytes = Annotated[StrictFloat, Field(ge=1, le=1e15, allow_inf_nan=False)]
Units = Annotated[StrictInt, Field(ge=1, le=1_000_000)]
Links = Annotated[StrictInt, Field(ge=1, le=1024)]
Tile = Annotated[StrictInt, Field(ge=1, le=65_536)]
KHalf = Annotated[StrictFloat, Field(ge=0, le=1e9, allow_inf_nan=False)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PeakTflops(_Closed):
    """Dense (not 2:4 sparse) peak of the matrix units per dtype, 10^12 FLOP/s.
    A dtype the device cannot run is left out."""

    fp32: Tflops | None = None
    tf32: Tflops | None = None
    bf16: Tflops | None = None
    fp16: Tflops | None = None
    fp8: Tflops | None = None
    fp4: Tflops | None = None  # NVFP4 / MXFP4 on Blackwell (issue 22)


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


class Host(_Closed):
    """The host side: `memory_GB` of host DRAM per node, `pcie_bandwidth_GBps` per device
    per direction between host and device memory; the node's local NVMe drives together
    (`nvme_GB` of capacity, sequential `nvme_read_GBps` / `nvme_write_GBps`, all of them
    at once: the drives striped as one volume), the third offload tier of ZeRO-Infinity
    (Rajbhandari et al. 2021, Sec. 5). A profile whose system's drives no public source
    states leaves the three out, and NVMe offload on it is refused."""

    memory_GB: HostGB
    pcie_bandwidth_GBps: GBps
    nvme_GB: HostGB | None = None
    nvme_read_GBps: GBps | None = None
    nvme_write_GBps: GBps | None = None


class AttentionKernel(_Closed):
    """What one fused-attention implementation reaches on this device: the fraction of the
    matrix peak, forward and backward, over the FLOPs the kernel executes (a causal kernel
    skips the masked half; its backward counts 2.5x the forward), as FlashAttention's
    benchmarks count them."""

    fwd: Fraction
    bwd: Fraction


class AttentionKernels(_Closed):
    """Fused attention by implementation (the framework profile's
    `attention.implementation`); one that is absent here runs at `attention_peak_fraction`.
    `te` is Transformer Engine's DotProductAttention, which picks its backend per device."""

    fa1: AttentionKernel | None = None
    fa2: AttentionKernel | None = None
    fa3: AttentionKernel | None = None
    cudnn: AttentionKernel | None = None
    te: AttentionKernel | None = None


class KernelBandwidth(_Closed):
    """Measured fraction of HBM bandwidth by memory-bound kernel kind (`cost.compute`); a
    kind left out runs at `memory_bandwidth_fraction`."""

    elementwise: Fraction | None = None
    reduction: Fraction | None = None
    norm: Fraction | None = None
    softmax: Fraction | None = None
    gather: Fraction | None = None
    optimizer: Fraction | None = None


class Efficiency(_Closed):
    """Physical parameters of the cost model (docs in `simulator.cost.compute` and
    `simulator.cost.collectives`). Fractions are of the datasheet peak."""

    gemm_peak_fraction: Fraction
    # the same measurement for FP8 inputs where the profile has one (an FP8 matmul reaches a
    # lower share of its doubled peak); None: gemm_peak_fraction
    gemm_peak_fraction_fp8: Fraction | None = None
    # the same for FP4 inputs (NVFP4 / MXFP4 block-scaled GEMMs on Blackwell, issue 22);
    # None: gemm_peak_fraction
    gemm_peak_fraction_fp4: Fraction | None = None
    gemm_tile_mn: tuple[Tile, Tile] = (128, 128)
    gemm_k_half: KHalf = 0.0
    # a grouped GEMM (a mixture of experts' expert GEMMs run as one kernel over the experts'
    # token groups: CUTLASS grouped GEMM, Megatron-Core --moe-grouped-gemm) against one
    # dense GEMM of a group's shape; 1: the same rate
    grouped_gemm_fraction: Annotated[StrictFloat, Field(gt=0, le=2, allow_inf_nan=False)] = 1.0
    attention_peak_fraction: Fraction
    attention_kernels: AttentionKernels | None = None
    # the key length at which fused attention reaches half its long-sequence rate: the
    # attention fractions above are quoted at 2048 tokens and scale by
    # (s / (s + half)) / (2048 / (2048 + half)) (cost.compute); 0: no dependence
    attention_seq_half: KHalf = 0.0
    vector_peak_fraction: Fraction = 0.5
    memory_bandwidth_fraction: Fraction
    # measured fraction of HBM bandwidth by memory-bound kernel kind where it differs from
    # `memory_bandwidth_fraction` (a fused optimizer step or a softmax reaches less than a
    # copy); a kind absent here runs at memory_bandwidth_fraction
    kernel_bandwidth_fractions: KernelBandwidth | None = None
    intra_node_bus_fraction: Fraction
    inter_node_bus_fraction: Fraction
    # compute roofs (tensor and vector) under a sustained multi-GPU training load, as a
    # fraction of the short-microbenchmark figures above (power-limited clocks); memory
    # and link bandwidths are not scaled
    sustained_compute_fraction: Fraction = 1.0
    # a compute kernel runs this fraction slower while a collective of the same device runs
    # beside it (the communication kernels hold SMs and memory bandwidth; engine.core);
    # 0: overlap is free
    overlap_compute_slowdown: Annotated[StrictFloat, Field(ge=0, le=1, allow_inf_nan=False)
                                        ] = 0.0


class HardwareProfile(_Closed):
    """A validated hardware profile. `source` is the file it came from (for messages)."""

    name: StrictStr
    description: StrictStr = ""
    device_type: Literal["gpu", "npu", "cpu"] = "gpu"
    compute_units: Units
    memory_GB: MemoryGB
    memory_bandwidth_GBps: GBps
    peak_tflops: PeakTflops
    vector_tflops: Tflops | None = None
    l2_bandwidth_GBps: Annotated[StrictFloat, Field(ge=1e-3, le=1e6, allow_inf_nan=False)
                                 ] | None = None
    intra_node: IntraNode
    inter_node: InterNode
    host: Host
    nccl: Nccl | None = None
    kernel_launch_us: LaunchUs
    devices_per_node_default: Links
    # the training stack this profile's runs use when a scenario names none: a framework
    # profile (framework_profiles/NAME.yaml) or a path
    default_framework: StrictStr
    efficiency: Efficiency
    source: StrictStr = "<hardware>"

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense peak FLOP/s of the matrix units for `dtype`; InputError when the device has
        none (the message names the profile file and the dtypes it does have)."""
        value = getattr(self.peak_tflops, dtype, None) if dtype in DTYPES else None
        if value is None:
            have = [d for d in DTYPES if getattr(self.peak_tflops, d) is not None]
            raise InputError(self.source, f"peak_tflops.{dtype}",
                              f"device '{self.name}' has no peak for dtype '{dtype}'; "
                              f"it has: {', '.join(have)}")
        return value * 1e12

    @property
    def software(self) -> Software:
        """The kernels and overlaps of the default framework (`default_framework`)."""

        return load_framework(self.default_framework, where=self.source,
                              key="default_framework").software

    def has_dtype(self, dtype: str) -> bool:
        return dtype in DTYPES and getattr(self.peak_tflops, dtype) is not None

    @property
    def fp8_gemm_any_layout(self) -> bool:
        """Whether this device's FP8 GEMMs take their operands in any layout (NN, NT, TN),
        so an FP8 tensor needs no transposed copy: Blackwell data-centre parts (compute
        capability 10.x; Transformer Engine's nvte_is_non_tn_fp8_gemm_supported() is true
        for 10.0 <= cc < 12.0 and cc >= 13.0, transformer_engine/common/transformer_engine.cpp,
        and its quantizers then create no transpose, pytorch/csrc/quantizer.cpp
        `create_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()`);
        Hopper and Ada take only TN. Read from the profile's architecture (`nccl.generation`)."""
        return self.nccl is not None and self.nccl.generation == "blackwell"

    @property
    def vector_flops_per_s(self) -> float:
        """Peak of the vector (non-matrix) units, FLOP/s; defaults to the fp32 peak."""
        if self.vector_tflops is not None:
            return self.vector_tflops * 1e12
        return self.peak_flops_per_s("fp32")

    @property
    def memory_capacity_bytes(self) -> float:
        return self.memory_GB * 1e9

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_GBps * 1e9

    @property
    def intra_link_bandwidth_bytes_per_s(self) -> float:
        """Datasheet intra-node bandwidth per device per direction."""
        return self.intra_node.bandwidth_GBps * 1e9

    @property
    def intra_link_latency_s(self) -> float:
        return self.intra_node.latency_us * 1e-6

    @property
    def nic_bandwidth_bytes_per_s(self) -> float:
        """One NIC, one direction."""
        return self.inter_node.nic_bandwidth_Gbps * 1e9 / 8

    @property
    def node_network_bandwidth_bytes_per_s(self) -> float:
        """All NICs of one node together, one direction."""
        return self.nic_bandwidth_bytes_per_s * self.inter_node.nics_per_node

    def inter_link_bandwidth_bytes_per_s(self, devices_per_node: int | None = None) -> float:
        """Each device's fair share of its node's NICs, one direction (all devices of the
        node sending at once, as in data-parallel gradient reduction)."""
        per_node = devices_per_node or self.devices_per_node_default
        return self.node_network_bandwidth_bytes_per_s / per_node

    @property
    def inter_link_latency_s(self) -> float:
        return self.inter_node.latency_us * 1e-6

    @property
    def host_memory_bytes(self) -> float:
        """Host DRAM per node."""
        return self.host.memory_GB * 1e9

    @property
    def nvme_fields(self) -> tuple[str, ...]:
        """The `host.nvme_*` fields this profile leaves out (NVMe offload needs all three)."""
        return tuple(f"host.{k}" for k in ("nvme_GB", "nvme_read_GBps", "nvme_write_GBps")
                     if getattr(self.host, k) is None)

    @property
    def nvme_bytes(self) -> float:
        """NVMe capacity per node (0 where the profile gives none)."""
        return (self.host.nvme_GB or 0.0) * 1e9

    @property
    def nvme_read_bytes_per_s(self) -> float:
        """Sequential NVMe read bandwidth of a node, all its drives (0: none given)."""
        return (self.host.nvme_read_GBps or 0.0) * 1e9

    @property
    def nvme_write_bytes_per_s(self) -> float:
        """Sequential NVMe write bandwidth of a node, all its drives (0: none given)."""
        return (self.host.nvme_write_GBps or 0.0) * 1e9

    @property
    def pcie_bandwidth_bytes_per_s(self) -> float:
        """Host <-> device, per device per direction."""
        return self.host.pcie_bandwidth_GBps * 1e9

    @property
    def kernel_launch_s(self) -> float:
        return self.kernel_launch_us * 1e-6

    def __str__(self) -> str:
        return f"{self.name} ({self.memory_GB:g} GB, {self.memory_bandwidth_GBps:g} GB/s)"
