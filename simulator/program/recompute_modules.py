"""Fine-grained selective recompute (`parallel.recompute_modules`, Megatron-Core's
--recompute-modules; the ops of each module are `models.recompute.MODULE_ROLES`): what a
layer keeps for its backward and what it runs again before it.

Megatron-Core checkpoints `core_attn` normally (the region's inputs are kept, what it makes
inside is not) and `layernorm`, `mla_up_proj` and `moe_act` by discarding their outputs
(`CheckpointWithoutOutput`, megatron/core/tensor_parallel/random.py: the output's storage is
released after the forward and refilled by re-running the module before the backward), so
for a tensor made by a recomputed op:

- kept by recomputed ops alone: not stored (as `Saved.total` with a region);
- kept by other ops too: its model-dtype copy is not stored; an FP8 GEMM among those ops
  still keeps its own FP8 copy of it (Transformer Engine's Linear saves the quantized input
  for its wgrad GEMM; `program.fp8`), one byte an element, where the recipe keeps FP8
  inputs -- unless `training.fp8_requantize_recomputed`: then nothing is kept, and the
  re-run casts its output to FP8 again for those GEMMs (their `.fp8_cast_input` kernels
  join the recompute). DeepSeek-V3 states the latter: it recomputes "all RMSNorm
  operations and MLA up-projections during back-propagation, thereby eliminating the need
  to persistently store their output activations" (arXiv:2412.19437 Sec. 3.2.3), and of
  the MoE SwiGLU "we cache the inputs of the SwiGLU operator and recompute its output in
  the backward pass" (Sec. 3.3.3): the outputs are not stored in any precision, though
  the linear layers after them cache their other inputs "in FP8 format" (Sec. 3.3.3);

and a tensor a recomputed op reads that is made outside the region is kept at its size (it
is the re-run's input), where no op keeps it already (the rotary embedding of MLA's shared
key, which its own backward does not need).

The re-run is the region's kernels of the layer's forward again (phase 'recompute'): its
FLOPs and bytes, FP8 casts of a recomputed GEMM's input included.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from simulator.cost.specs import ComputeSpec
from simulator.program.program import Op
from simulator.sharding.lower import Saved, kernel_of
from simulator.sharding.plan import ShardingPlan

__all__ = ["discarding_saved", "module_recompute"]

Select = Callable[[str], bool]


def _fp8_copy(nbytes: float, keepers: list[str], fp8_ops: set[str], itemsize: float) -> float:
    """Bytes of the FP8 copy the `keepers` (ops outside the region) store of a discarded
    tensor of `nbytes`: one byte an element where an FP8 GEMM is among them, else none."""
    return nbytes / itemsize if any(k in fp8_ops for k in keepers) else 0.0


def discarding_saved(sv: Saved, plan: ShardingPlan, select: Select, region: Select,
                     discard: Select, fp8_kernels: frozenset[str], itemsize: float) -> float:
    """Bytes the selected ops (one layer) keep for the backward when the ops of `region`
    are recomputed, those of `discard` by discarding their outputs, the others (core_attn)
    by normal checkpointing (module doc). `sv` as the program saves it (FP8 inputs already
    one byte where only FP8 GEMMs keep them); `fp8_kernels`: the recipe's FP8 GEMM kernels
    when it keeps FP8 inputs (empty otherwise); `itemsize`: bytes of a model-dtype
    element."""
    fp8_ops = {p.op.name for p in plan.ops if kernel_of(p) in fp8_kernels}
    out = 0.0
    for nbytes, producer, keepers in sv.tensors.values():
        mine = [k for k in keepers if select(k)]
        if not mine:
            continue
        outside = [k for k in mine if not region(k)]
        if not region(producer) or (outside and not discard(producer)):
            out += nbytes
            continue
        full = nbytes if not all(k in fp8_ops for k in keepers) else nbytes * itemsize
        out += _fp8_copy(full, outside, fp8_ops, itemsize) if outside else 0.0
    out += sum(b for op, b in sv.extra.items() if select(op) and not region(op))
    return out + _region_inputs(sv, plan, select, region, itemsize)


def _region_inputs(sv: Saved, plan: ShardingPlan, select: Select, region: Select,
                   itemsize: float) -> float:
    """Bytes of the activations recomputed ops read, made outside the region and kept by
    no op (the re-run's own inputs)."""
    g, mesh = plan.graph, plan.mesh
    made = {p.op.output: p.op.name for p in plan.ops}
    seen: set[str] = set()
    out = 0.0
    for p in plan.ops:
        if not (select(p.op.name) and region(p.op.name)):
            continue
        for name in p.op.inputs:
            if (name in seen or name in sv.tensors or g.tensors[name].kind != "activation"
                    or name not in made or region(made[name])):
                continue
            seen.add(name)
            out += itemsize * math.prod(plan.layouts[name].local_shape(g.tensors[name].shape,
                                                                      mesh))
    return out


def module_recompute(layer_fwd: tuple[Op, ...], plan: ShardingPlan, select: Select,
                     region: Select, requantize: Select | None = None) -> tuple[Op, ...]:
    """The re-run of the region's kernels (with their FP8 casts) from the layer's forward
    ops, as phase 'recompute' ops that keep nothing; with `requantize` (the discarding
    ops, under `training.fp8_requantize_recomputed`), also the input casts of the GEMMs
    outside the region that read what those ops make (module doc)."""
    mine = [p for p in plan.ops if select(p.op.name)]
    kernels = {kernel_of(p) for p in mine if region(p.op.name)}
    casts: set[str] = set()
    if requantize is not None:
        made = {p.op.output: p.op.name for p in mine}
        casts = {f"{kernel_of(p)}.fp8_cast_input" for p in mine if not region(p.op.name)
                 and any(i in made and requantize(made[i]) and region(made[i])
                         for i in p.op.inputs)}
    return tuple(replace(op, phase="recompute", saved_bytes=0.0) if isinstance(op, ComputeSpec)
                 else replace(op, phase="recompute") for op in layer_fwd
                 if isinstance(op, ComputeSpec)
                 and (op.name.split(".")[0] in kernels or op.name in casts))
