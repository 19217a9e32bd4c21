"""What a framework profile changes in one simulated iteration, besides the Software value
the model program takes: the FP8 recipe of `dtype: fp8`, the bucket rule of
`comm_fusion.mode: auto`, and the memory the stack holds besides the model's tensors.
Pure functions of (scenario, profile, program, plan); `simulator.simulation.simulate` calls them.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from simulator.config.framework.schema import FrameworkProfile
from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.engine.tasks import Plan
from simulator.errors import InputError
from simulator.lower.buckets import auto_fusion
from simulator.lower.state import fp8_weight_copy_bytes, framework_overhead_bytes
from simulator.models.registry import family
from simulator.program.fp8 import Fp8Recipe
from simulator.program.program import Program
from simulator.sharding.mesh import Mesh

__all__ = ["fp8_recipe", "fp8_copy_bytes_per_param", "fp8_gather_bytes", "with_fp8_gather",
           "with_auto_fusion",
           "with_framework_memory", "communicators", "OVERHEAD"]

OVERHEAD = "framework_overhead"  # the memory category of the stack's own buffers


def fp8_recipe(scenario: Scenario, fw: FrameworkProfile, hw: Any = None
               ) -> Fp8Recipe | None:
    """The recipe of a `dtype: fp8` transformer under `fw` on the device `hw`, or of a bf16
    one with `training.fp4_recipe` (its GEMMs in FP4, program.fp8); None otherwise. An
    InputError when the framework has no low-precision recipe. On a device whose FP8 GEMMs
    take any layout (`fp8_gemm_any_layout`) a per-tensor recipe keeps no transposes."""
    m = scenario.model
    fp4 = scenario.training.fp4_recipe
    if not family(m).layered or (m.dtype != "fp8" and fp4 == "none"):
        return None
    if fp4 != "none":
        if not fw.fp8.supported or not fw.fp8.gemm_roles:
            raise InputError(scenario.source, "training.fp4_recipe",
                             f"{fp4} needs a framework whose recipe names the GEMMs it runs "
                             f"in low precision; '{fw.name}' ({fw.source}) has none; with "
                             f"one: megatron-core, nemo, torchtitan, llm-foundry")
        return Fp8Recipe.fp4(fw.fp8.gemm_roles, fp4, scenario.grad_accum_steps)
    if not fw.fp8.supported or not fw.fp8.gemm_roles:
        raise InputError(scenario.source, "model.dtype",
                         f"fp8 needs a framework with an FP8 recipe; '{fw.name}' "
                         f"({fw.source}) has none (fp8.supported: {str(fw.fp8.supported).lower()}"
                         f"); with one: megatron-core, nemo, torchtitan, llm-foundry")
    recipe = Fp8Recipe.of(fw.fp8.gemm_roles, fw.fp8.dynamic_scaling,
                          scenario.grad_accum_steps, fw.fp8.saved_inputs == "fp8")
    mx = scenario.training.fp8_scaling == "mxfp8"
    any_layout = bool(hw is not None and hw.fp8_gemm_any_layout)
    return replace(recipe, mx=mx, transposes=mx or not any_layout)


def with_auto_fusion(scenario: Scenario, fw: FrameworkProfile, grad_bytes: float
                     ) -> Scenario:
    """`scenario` with `comm_fusion.mode: auto` replaced by the framework's rule (mode and
    bucket size, `lower.buckets.auto_fusion`); other modes unchanged."""
    p = scenario.parallel
    if p.comm_fusion.mode != "auto":
        return scenario
    mode, mb = auto_fusion(fw, p.data, grad_bytes, p.optimizer_shard, p.comm_fusion.bucket_mb)
    if mode == "size":
        mode = "auto"  # the lowering cuts 'auto' buckets by size, like 'size'
    fusion = p.comm_fusion.model_copy(update={"mode": mode, "bucket_mb": mb})
    return scenario.model_copy(update={"parallel": p.model_copy(
        update={"comm_fusion": fusion})})


def communicators(scenario: Scenario, mesh: Mesh | None = None) -> int:
    """Communicators a device is a member of: one per parallel axis of more than one
    device (data, tensor, pipeline; with expert parallelism the expert group and the
    experts' data-parallel group, Megatron-Core's expert-data-parallel group; an operator
    graph's own mesh axes and pipeline)."""
    p = scenario.parallel
    if mesh is not None:
        return sum(1 for _, n in mesh.axes if n > 1) + (1 if p.pipeline > 1 else 0)
    expert = (p.expert > 1) + (1 < p.expert < p.data)  # ep, and the experts' own dp
    return sum(1 for n in (p.data, p.tensor, p.pipeline) if n > 1) + expert


def _fp8_share(prog: Program, scenario: Scenario, fw: FrameworkProfile) -> float:
    """Share of a device's parameters that feed FP8 GEMMs: the layers' (and the LM head's
    when the recipe runs it in FP8), over all parameters of the model. A tied head's table
    counts again only where it is held again: on the last stage of a pipeline (not under
    DualPipe, `lower.stages.stage_work`); a tied table at one stage is the embedding's."""
    p = scenario.parallel
    again = p.pipeline > 1 and p.schedule != "dualpipe"
    head = next((b for b in prog.blocks if b.name == "head"), None)
    held = head.tied_params if head is not None and again else 0
    layers = sum(b.params * b.repeat for b in prog.cut())
    fp8_head = head.params + held if head is not None and "lm_head" in fw.fp8.gemm_roles \
        else 0
    total = sum(b.params * b.repeat for b in prog.blocks) + held
    return (layers + fp8_head) / total if total > 0 else 0.0


def fp8_gather_bytes(prog: Program, scenario: Scenario, fw: FrameworkProfile,
                     recipe: Fp8Recipe | None) -> float | None:
    """Mean bytes per parameter element the distributed optimizer's parameter all-gather
    carries with `training.fp8_params` under a per-tensor FP8 recipe: an FP8 GEMM's weight
    travels as its FP8 data, 1 byte (Megatron-Core core_v0.15.0
    distributed/distributed_data_parallel.py L159-167: a Float8Tensor's param buffer is
    torch.uint8; fp8_utils.py quantize_param_shard casts each updated fp32 shard into it),
    the others (norms, embedding, router, the head unless the recipe runs lm_head in FP8)
    at the model dtype: share x 1 + (1 - share) x e, `_fp8_share`. None (the dtype's
    bytes) otherwise; under MXFP8 too: with reuse_grad_buf_for_mxfp8_param_ag the gather
    runs in a bf16 view of the gradient buffer (param_and_grad_buffer.py L695-712;
    distrib_optimizer.py L2458-2480 copies the fp32 shards into it) and each rank casts the
    gathered bf16 weights to MXFP8 (distributed_data_parallel.py L503-516)."""
    if not (scenario.training.fp8_params and recipe is not None and recipe.dtype == "fp8"
            and not recipe.mx):
        return None
    e = float(DTYPE_BYTES.get(prog.dtype, 2))
    share = _fp8_share(prog, scenario, fw)
    return share * DTYPE_BYTES["fp8"] + (1 - share) * e


def with_fp8_gather(prog: Program, scenario: Scenario, fw: FrameworkProfile,
                    recipe: Fp8Recipe | None) -> Program:
    """`prog` with the parameter all-gather's bytes per element of `fp8_gather_bytes`
    (unchanged where that is None)."""
    nbytes = fp8_gather_bytes(prog, scenario, fw, recipe)
    return prog if nbytes is None else replace(prog, gather_elem_bytes=nbytes)


def fp8_copy_bytes_per_param(recipe: Fp8Recipe | None, fw: FrameworkProfile,
                             fp8_params: bool, weight_bytes: float) -> float:
    """Bytes a parameter of an FP8 (or FP4) GEMM keeps in quantized copies beside its weight
    under `recipe` (none without one): the framework's `weight_copy_bytes_per_param` scaled
    by the recipe's layouts (`Fp8Recipe.weight_copy_factor`); with `training.fp8_params` the
    copies take the 16-bit weight's place (`weight_bytes` fewer, never below 0)."""
    copies = float(fw.fp8.weight_copy_bytes_per_param) * recipe.weight_copy_factor \
        if recipe else 0.0
    if copies and fp8_params:
        copies = max(0.0, copies - weight_bytes)
    return copies


def with_framework_memory(plan: Plan, scenario: Scenario, fw: FrameworkProfile,
                          prog: Program, mesh: Mesh | None = None, hw: Any = None) -> Plan:
    """`plan` with the stack's constant memory added to every device's static memory: the
    `framework_overhead` category (context, collective buffers, workspaces), and with an
    FP8 recipe the FP8 weight copies (under `parameters`). With `training.fp8_params`
    (Transformer Engine fp8_model_init, NeMo `model.fp8_params`) an FP8 GEMM's weight is
    stored as its FP8 data and transpose alone: the copies take the 16-bit weight's place
    (`weight_copy_bytes_per_param` - 2 bytes more, none at 2)."""
    extra = framework_overhead_bytes(fw.memory_overheads, communicators(scenario, mesh))
    e = float(DTYPE_BYTES.get(prog.dtype, 2))
    copies = fp8_copy_bytes_per_param(fp8_recipe(scenario, fw, hw), fw,
                                      scenario.training.fp8_params, e)
    share = _fp8_share(prog, scenario, fw) if copies else 0.0
    static = []
    for alloc in plan.static_memory:
        add: list[tuple[str, Any]] = [(OVERHEAD, extra)]
        if copies:
            add.append(("parameters", fp8_weight_copy_bytes(alloc, copies, e, share)))
        static.append(tuple(alloc) + tuple(add))
    return replace(plan, static_memory=tuple(static))
