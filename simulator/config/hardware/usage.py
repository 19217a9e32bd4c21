"""Every field of a hardware profile: where its value came from, what reads it, and where
another field takes its place (`shardsim profiles NAME`, and the notes `run` prints for a
`--set hardware.KEY=VALUE` that changes nothing).

`FIELD_USES` is checked against the schema by tests/test_overrides.py: a new field without
an entry here fails there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, get_args

from pydantic import BaseModel

from simulator.config.hardware.schema import HardwareProfile

__all__ = ["FIELD_USES", "leaf_fields", "field_value", "field_rows", "shadow_notes"]

# what reads each field (simulator/cost/*, simulator/config/framework/*), in a few words
FIELD_USES: dict[str, str] = {
    "name": "label in reports and messages (not a cost input)",
    "description": "label in `shardsim profiles` (not a cost input)",
    "device_type": "label (not a cost input)",
    "compute_units": "GEMM wave quantisation (cost.compute) and the program's tiling",
    "memory_GB": "memory capacity: fits / headroom",
    "memory_bandwidth_GBps": "memory-bound kernels (cost.compute roofline)",
    "peak_tflops.fp32": "GEMMs in fp32; the vector peak where vector_tflops is absent",
    "peak_tflops.tf32": "GEMMs in tf32",
    "peak_tflops.bf16": "GEMMs in bf16; MFU of bf16 models",
    "peak_tflops.fp16": "GEMMs in fp16; MFU of fp16 models",
    "peak_tflops.fp8": "GEMMs in fp8 (fp8 models, or an FP8 recipe)",
    "peak_tflops.fp4": "GEMMs in fp4 (training.fp4_recipe: NVFP4 / MXFP4)",
    "vector_tflops": "element-wise, norm and softmax kernels (cost.compute)",
    "l2_bandwidth_GBps": "GEMM operand-bandwidth bound (cost.compute)",
    "intra_node.bandwidth_GBps": "collectives and sends inside a node (cost.links)",
    "intra_node.latency_us": "per-step latency inside a node: sends, all_to_all, and every "
                             "collective of a profile without `nccl` (cost.algorithms)",
    "intra_node.topology": "bandwidth a group gets on a mesh fabric (cost.links)",
    "intra_node.mesh_links": "links per device on a mesh fabric (cost.links)",
    "intra_node.allreduce_busbw_GBps": "collectives inside a node, measured (cost.links)",
    "intra_node.nvls.efficiency": "NVLink SHARP collectives (cost.algorithms)",
    "intra_node.nvls.latency_us": "NVLink SHARP collectives (cost.algorithms)",
    "inter_node.nics_per_node": "network bandwidth per device (cost.links)",
    "inter_node.nic_bandwidth_Gbps": "collectives and sends across nodes (cost.links)",
    "inter_node.flow_sharing": "how concurrent transfers of a device share its link "
                               "(engine.core: fifo queue or fair share)",
    "inter_node.rail_optimized": "which devices share a NIC under flow_sharing fair "
                                 "(cost.links.nic_sharing, engine.core)",
    "inter_node.nodes_per_leaf": "groups spanning more nodes cross the oversubscribed tier "
                                 "(cost.links.fabric_share; a one-tier fat_tree: under "
                                 "flow_sharing fair, the leaf uplinks, cost.fabric)",
    "inter_node.oversubscription": "network bandwidth of groups that cross the leaf tier "
                                   "(cost.links.fabric_share; the leaf uplinks under "
                                   "flow_sharing fair, cost.fabric)",
    "inter_node.fat_tree": "the fat tree's tiers: a group's bandwidth across them "
                           "(cost.links.fabric_share) and, under flow_sharing fair, the "
                           "uplinks transfers share (cost.fabric, engine.core)",
    "inter_node.latency_us": "per-step latency across nodes: sends, all_to_all, PAT, and "
                             "every collective of a profile without `nccl` (cost.algorithms)",
    "nccl.generation": "NCCL's LL ceiling inside a node (cost.nccl_tuning)",
    "nccl.cpu_vendor": "NCCL's LL ceiling and post overhead across nodes (cost.nccl_tuning)",
    "nccl.channels": "NCCL's tree pipeline fill (cost.nccl_tuning)",
    "nccl.overhead_us": "a fixed time added to every collective NCCL's model prices "
                        "(cost.algorithms)",
    "nccl.net_overhead_us": "a fixed time added to every collective across nodes NCCL's "
                            "model prices (cost.algorithms)",
    "host.memory_GB": "host memory capacity: fits with offloaded optimizer states and parameters",
    "host.pcie_bandwidth_GBps": "host copies under offload.optimizer_states",
    "host.nvme_GB": "NVMe capacity: fits with offload.optimizer_states nvme",
    "host.nvme_read_GBps": "NVMe reads of the optimizer states under offload nvme (lower.nvme)",
    "host.nvme_write_GBps": "NVMe writes of the optimizer states under offload nvme (lower.nvme)",
    "host.launch_cost_factor": "the host time of each eagerly launched kernel: the stack's "
                               "launch floor and its MoE host rule (lower.costs)",
    "kernel_launch_us": "fixed time per kernel (cost.compute)",
    "devices_per_node_default": "`shardsim comm` without --devices-per-node; mesh links",
    "default_framework": "the training stack when the scenario names none",
    "efficiency.gemm_peak_fraction": "GEMM efficiency (cost.compute)",
    "efficiency.gemm_peak_fraction_fp8": "FP8 GEMM efficiency (cost.compute)",
    "efficiency.gemm_peak_fraction_fp4": "FP4 GEMM efficiency (cost.compute)",
    "efficiency.grouped_gemm_fraction": "expert GEMMs of a mixture of experts (cost.compute)",
    "efficiency.gemm_tile_mn": "GEMM tile quantisation (cost.compute)",
    "efficiency.gemm_k_half": "GEMM k-loop efficiency (cost.compute)",
    "efficiency.attention_peak_fraction": "fused attention kernels (cost.compute)",
    "efficiency.attention_seq_half": "fused attention by key length (cost.compute)",
    "efficiency.kernel_bandwidth_fractions.elementwise": "elementwise kernels (cost.compute)",
    "efficiency.kernel_bandwidth_fractions.reduction": "reduction kernels (cost.compute)",
    "efficiency.kernel_bandwidth_fractions.norm": "norm kernels (cost.compute)",
    "efficiency.kernel_bandwidth_fractions.softmax": "softmax kernels (cost.compute)",
    "efficiency.kernel_bandwidth_fractions.gather": "gather kernels (cost.compute)",
    "efficiency.kernel_bandwidth_fractions.optimizer": "optimizer kernels (cost.compute)",
    "efficiency.attention_kernels.fa1.fwd": "fwd attention of fa1 stacks (cost.compute)",
    "efficiency.attention_kernels.fa1.bwd": "bwd attention of fa1 stacks (cost.compute)",
    "efficiency.attention_kernels.fa2.fwd": "fwd attention of fa2 stacks (cost.compute)",
    "efficiency.attention_kernels.fa2.bwd": "bwd attention of fa2 stacks (cost.compute)",
    "efficiency.attention_kernels.fa3.fwd": "fwd attention of fa3 stacks (cost.compute)",
    "efficiency.attention_kernels.fa3.bwd": "bwd attention of fa3 stacks (cost.compute)",
    "efficiency.attention_kernels.cudnn.fwd": "fwd attention of cudnn stacks (cost.compute)",
    "efficiency.attention_kernels.cudnn.bwd": "bwd attention of cudnn stacks (cost.compute)",
    "efficiency.attention_kernels.te.fwd": "fwd attention of te stacks (cost.compute)",
    "efficiency.attention_kernels.te.bwd": "bwd attention of te stacks (cost.compute)",
    "efficiency.attention_kernels.fa1.head_dim_half.fwd": "narrow-head fa1 fwd (cost.compute)",
    "efficiency.attention_kernels.fa1.head_dim_half.bwd": "narrow-head fa1 bwd (cost.compute)",
    "efficiency.attention_kernels.fa2.head_dim_half.fwd": "narrow-head fa2 fwd (cost.compute)",
    "efficiency.attention_kernels.fa2.head_dim_half.bwd": "narrow-head fa2 bwd (cost.compute)",
    "efficiency.attention_kernels.fa3.head_dim_half.fwd": "narrow-head fa3 fwd (cost.compute)",
    "efficiency.attention_kernels.fa3.head_dim_half.bwd": "narrow-head fa3 bwd (cost.compute)",
    "efficiency.attention_kernels.cudnn.head_dim_half.fwd": "narrow-head cudnn fwd (cost.compute)",
    "efficiency.attention_kernels.cudnn.head_dim_half.bwd": "narrow-head cudnn bwd (cost.compute)",
    "efficiency.attention_kernels.te.head_dim_half.fwd": "narrow-head te fwd (cost.compute)",
    "efficiency.attention_kernels.te.head_dim_half.bwd": "narrow-head te bwd (cost.compute)",
    "efficiency.vector_peak_fraction": "element-wise kernels (cost.compute)",
    "efficiency.memory_bandwidth_fraction": "memory-bound kernels (cost.compute)",
    "efficiency.intra_node_bus_fraction": "collectives and sends inside a node",
    "efficiency.inter_node_bus_fraction": "collectives and sends across nodes",
    "efficiency.sustained_compute_fraction": "compute roofs under sustained load",
    "efficiency.overlap_compute_slowdown": "kernels beside a collective (engine)",
    "source": "the file the profile came from (not a cost input)",
}

_MEASURED_SHADOWS = ("intra_node.bandwidth_GBps", "intra_node.latency_us", "intra_node.topology",
                     "intra_node.mesh_links", "intra_node.nvls.efficiency",
                     "intra_node.nvls.latency_us", "efficiency.intra_node_bus_fraction")


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside `annotation` (`Nvls | None` -> Nvls), if any."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def leaf_fields(model: type[BaseModel] = HardwareProfile, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every leaf field of `model`, nested models expanded, in order."""
    for name, info in model.model_fields.items():
        sub = _model_of(info.annotation)
        if sub is None:
            yield prefix + name
        else:
            yield from leaf_fields(sub, f"{prefix}{name}.")


def field_value(obj: Any, path: str) -> Any:
    """The value at dotted `path` of a profile (None where a parent is absent)."""
    for part in path.split("."):
        obj = getattr(obj, part, None) if obj is not None else None
    return obj


def _in(data: Any, path: str) -> bool:
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def field_rows(hw: HardwareProfile, raw: dict[str, Any], overridden: set[str]
               ) -> list[dict[str, Any]]:
    """One row per leaf field: value, source ('--set', the profile file, or 'default'),
    what reads it, and a note where another field takes its place."""
    shadows = dict(_shadows(hw))
    rows = []
    for path in leaf_fields():
        if path == "source":
            continue
        source = "--set" if path in overridden else hw.source if _in(raw, path) else "default"
        rows.append({"field": path, "value": _plain(field_value(hw, path)), "source": source,
                     "used_for": FIELD_USES.get(path, "?"), "note": shadows.get(path, "")})
    return rows


def _plain(value: Any) -> Any:
    """A field's value as YAML would give it (the tiers of a fat tree as mappings)."""
    if isinstance(value, tuple) and value and isinstance(value[0], BaseModel):
        return [v.model_dump(exclude_none=True) for v in value]
    return value


_SHADOW_RULES: tuple[tuple[tuple[str, ...], Callable[[HardwareProfile], bool], str], ...] = (
    (_MEASURED_SHADOWS, lambda hw: bool(hw.intra_node.allreduce_busbw_GBps),
     "inside a node, all_reduce / all_gather / reduce_scatter / broadcast take their time "
     "from the measured intra_node.allreduce_busbw_GBps, not from this field (it still "
     "prices sends, all_to_all and the NVLink hop of collectives across nodes); set "
     "hardware.intra_node.allreduce_busbw_GBps=null to price them from the datasheet"),
)


def _shadows(hw: HardwareProfile) -> Iterator[tuple[str, str]]:
    for fields, applies, text in _SHADOW_RULES:
        if applies(hw):
            yield from ((f, text) for f in fields)


def shadow_notes(hw: HardwareProfile, keys: list[str]) -> list[tuple[str, str]]:
    """(key, why) for each overridden key whose role another field of `hw` takes."""
    shadows = dict(_shadows(hw))
    return [(k, shadows[k]) for k in keys if k in shadows]
