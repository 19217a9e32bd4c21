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
    Field,
    StrictFloat,
    StrictStr,
)

from simulator.config.framework.load import load_framework
from simulator.config.framework.schema import Software
from simulator.config.hardware.schema_network import (
    TIER_NAMES,
    FabricTier,
    InterNode,
    IntraNode,
    Nccl,
    Nvls,
)
from simulator.config.hardware.schema_units import Closed as _Closed
from simulator.config.hardware.schema_units import (
    Fraction,
    GBps,
    HostGB,
    KHalf,
    LaunchUs,
    Links,
    MemoryGB,
    Tflops,
    Tile,
    Units,
)
from simulator.errors import InputError

__all__ = ["HardwareProfile", "Software", "PeakTflops", "IntraNode", "Nvls", "InterNode", "Host",
           "Efficiency", "Nccl", "DTYPES", "FabricTier", "TIER_NAMES"]

DTYPES: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")

class PeakTflops(_Closed):
    """Dense (not 2:4 sparse) peak of the matrix units per dtype, 10^12 FLOP/s.
    A dtype the device cannot run is left out."""

    fp32: Tflops | None = None
    tf32: Tflops | None = None
    bf16: Tflops | None = None
    fp16: Tflops | None = None
    fp8: Tflops | None = None
    fp4: Tflops | None = None  # NVFP4 / MXFP4 on Blackwell (issue 22)


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
    # how much longer this host takes than an x86 server host to launch one kernel eagerly
    # (the stacks' per-kernel figures are x86 measurements: framework profiles `launch`,
    # `moe_host`); a CUDA graph launch is not scaled (simulator/lower/costs.py
    # eager_launch_s); None: 1
    launch_cost_factor: Annotated[StrictFloat, Field(gt=0, le=100, allow_inf_nan=False)] | None = \
        Field(default=None, description=(
            "Host time to launch one kernel eagerly over an x86 server host's (the framework "
            "profiles' per-kernel figures are x86 measurements); null: 1."))


class AttentionHalf(_Closed):
    """The head width at which a fused attention kernel reaches half its wide-head rate,
    forward and backward: its fractions are quoted at head dim 128 and scale for a narrower
    head d by (1 + half / 128) / (1 + half / d) (`cost.compute`); 0: no dependence."""

    fwd: KHalf = 0.0
    bwd: KHalf = 0.0


class AttentionKernel(_Closed):
    """What one fused-attention implementation reaches on this device: the fraction of the
    matrix peak, forward and backward, over the FLOPs the kernel executes (a causal kernel
    skips the masked half; its backward counts 2.5x the forward), as FlashAttention's
    benchmarks count them; `head_dim_half`: how it slows on heads narrower than 128 (None:
    it does not)."""

    fwd: Fraction
    bwd: Fraction
    head_dim_half: AttentionHalf | None = None


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
