"""What one transformer layer re-runs and keeps under `parallel.recompute` (full, selective
with the stack's policy: Megatron's attention core or torchtitan's op-level SAC) or
`parallel.recompute_modules`, plus what the stack's unfused kernels keep
(`program.unfused.unfused_saved_bytes`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from simulator.config.hardware.schema import Software
from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.graph.decoder import GptDims
from simulator.models.recompute import discarding, recomputed_ops
from simulator.program import comm_options
from simulator.program.program import Op
from simulator.program.recompute_modules import discarding_saved, module_recompute
from simulator.program.recompute_policy import sac_cached_bytes, sac_recompute
from simulator.program.unfused import unfused_saved_bytes
from simulator.sharding.lower import Saved
from simulator.sharding.plan import ShardingPlan

__all__ = ["ATTENTION_CORE", "layer_recompute"]

ATTENTION_CORE = ("scores", "softmax", "attn_dropout", "context", "flash_attention")
Select = Callable[[str], bool]


def _recomputed(ops: tuple[Op, ...], keep: Select) -> tuple[Op, ...]:
    return tuple(replace(op, phase="recompute", saved_bytes=0.0) if isinstance(op, ComputeSpec)
                 else replace(op, phase="recompute") for op in ops if keep(op.name))


def _sliced(recompute: tuple[Op, ...], layer_fwd: tuple[Op, ...], kept: float, tensor: int
            ) -> tuple[tuple[Op, ...], float]:
    """`parallel.recompute_slice_activation` (MindSpore; Megatron-LM
    --distribute-saved-activations, tensor_parallel/random.py CheckpointFunction: the input
    saved split into 1-D chunks over the tensor ranks, gathered again before the re-run):
    1/tensor of the kept input, and an all-gather of it ahead of the recompute pass."""
    gather = CommSpec(f"{layer_fwd[0].name}.slice_gather", "all_gather", kept, "tp",
                      "recompute")
    return (gather, *recompute), kept / tensor


def layer_recompute(scenario: Scenario, software: Software, plan: ShardingPlan,
                    dims: GptDims, sv: Saved, e: int, select: Select,
                    layer_fwd: tuple[Op, ...], fp8_kernels: frozenset[str] = frozenset()
                    ) -> tuple[tuple[Op, ...], float, float]:
    """(the layer's recompute pass, the bytes it keeps per micro-batch, the bytes of its
    output: the boundary a pipeline sends) under `parallel.recompute` and the stack's
    selective policy, or `parallel.recompute_modules` (`program.recompute_modules`;
    `fp8_kernels`: the FP8 GEMMs that keep FP8 copies of their inputs)."""
    p, graph, mesh = scenario.parallel, plan.graph, plan.mesh
    policy = software.selective_recompute
    modules = p.recompute_modules if p.recompute == "selective" else None
    picked = recomputed_ops(p.recompute, policy, dims.swiglu, modules)
    region = None if picked is None else (lambda n: select(n) and picked(n))
    out_name = next(op.op.output for op in reversed(plan.ops) if select(op.op.name))
    boundary = e * math.prod(plan.layouts[out_name].local_shape(graph.tensors[out_name].shape,
                                                                mesh))
    if modules is not None and region is not None:
        discard = recomputed_ops(p.recompute, policy, dims.swiglu, discarding(modules)) \
            or (lambda n: False)
        # DeepSeek-V3's reading: no FP8 copy of a discarded output, its re-run cast again
        requant = bool(fp8_kernels) and scenario.training.fp8_requantize_recomputed
        recompute, kept = comm_options.recompute_comm_ops(
            scenario, module_recompute(layer_fwd, plan, select, region,
                                       discard if requant else None), mesh)
        return recompute, kept + discarding_saved(sv, plan, select, region, discard,
                                                  frozenset() if requant else fp8_kernels,
                                                  e), boundary
    if p.recompute == "selective" and policy == "every_second_mm":
        recompute = sac_recompute(layer_fwd, dims.swiglu, dims.heads, dims.kv_heads)
    else:
        recompute = () if region is None else _recomputed(
            layer_fwd, (lambda n: True) if p.recompute == "full" else
            (lambda n: n in ATTENTION_CORE))
    recompute, kept = comm_options.recompute_comm_ops(scenario, recompute, mesh)
    # what the stack's unfused kernels keep beyond the fused layer's set: all of it without
    # recompute or around a recomputed attention core; nothing under a full recompute or
    # torchtitan's op-level SAC (those kernels re-run)
    unfused = unfused_saved_bytes(scenario, software.unfused_passes)
    keeps_unfused = p.recompute == "none" or (p.recompute == "selective"
                                              and policy == "attention_core")
    layer_input = sv.total(select, region)
    if p.recompute_slice_activation:  # the rules allow it with recompute full, tensor > 1
        recompute, layer_input = _sliced(recompute, layer_fwd, layer_input, p.tensor)
    per_layer = layer_input + kept + (unfused if keeps_unfused else 0.0)
    if p.recompute == "selective" and policy == "every_second_mm" and region is not None:
        # the kept ops' cached outputs and the block's input (boundary: the previous
        # layer's output, the same shape), not the inputs the kept ops save
        per_layer = sac_cached_bytes(plan, sv.extra, select, region, e) + boundary + kept
    return recompute, per_layer, boundary
