"""The program `run` times of a transformer, derived from the planned operator graph that
`verify` executes (an operator graph's: `program.graph_program`).

    scenario --planned_transformer--> graph + mesh --build_plan--> plan
             --sharding.lower (kernels, collectives, saved tensors)--> Program

The Megatron plan of `models.transformer_plan` on a GPT graph of the scenario's own
dimensions with up to three layers (the middle one stands for every layer: its neighbours
are layers on both sides); its Blocks are the embedding (ops before the first layer), the
layer (repeated L times) and the head (the ops after the last layer: final norm, LM head,
cross-entropy and the loss).

What the training stack (the framework profile's `Software`) adds on top of the plan are cost
annotations, each cited where it is made: fused attention (`model.attention`), the fp32
main-gradient add of unfused stacks, fp32 gradient reduction of bf16 models, TP-comm
overlap, and with `dtype: fp8` the framework's FP8 recipe (`program.fp8`: the recipe's
GEMMs in FP8 with their casts, everything else in bf16). Data-parallel gradient reductions
(mesh axis `dp`) are left to the lowering, which buckets and overlaps them; reductions on
the other axes run once per iteration before the optimizer, coalesced per collective
(Megatron's finalize_model_grads all-reduces the sequence-parallel norm gradients as one
flat buffer).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from simulator.config.hardware.schema import Software
from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.graph.decoder import GptDims
from simulator.graph.ops.loss import CE_FWD_FLOPS
from simulator.models.layers import LayerPlan, layer_kinds, layer_plan
from simulator.models.optimizer_threshold import kept_whole, optimizer_threshold
from simulator.models.params import (
    embed_op,
    expert_params,
    head_op,
)
from simulator.models.ps_params import worker_elements
from simulator.models.recompute import recomputed_ops
from simulator.models.transformer import transformer_model
from simulator.models.transformer_plan import gpt_dims, planned_transformer, uses_flash
from simulator.program import comm_options
from simulator.program.a2a_sort import expert_extras
from simulator.program.block_select import (
    SelectedBlock,
    gathered_params,
    group_blocks,
    head_elements,
    small_params,
    sync_steps,
)
from simulator.program.deepep import fp8_dispatch
from simulator.program.fp8 import Fp8Recipe, apply_fp8, fp8_saved
from simulator.program.layer_recompute import ATTENTION_CORE, layer_recompute
from simulator.program.moe_saved import fp8_cached, probs_in_activation, weights_in_activation
from simulator.program.program import Block, Op, Program, coalesce
from simulator.program.program_key import program_key
from simulator.program.replicated import tp_replicated_kernels
from simulator.program.stack_ops import (
    dense_embedding_grad,
    fused_cross_entropy,
    gathered_head_input,
    grouped_gemms,
    imbalanced,
    main_grad,
    p2p_blocking,
    slot_fill,
    tp_overlap,
    weight_casts,
    with_impl,
)
from simulator.program.unfused import unfused_ops, unfused_saved_bytes
from simulator.program.yarn_rope import yarn_rope
from simulator.sharding.lower import (
    Saved,
    backward_specs,
    forward_specs,
    gradient_steps,
    saved,
)
from simulator.sharding.plan import ShardingPlan

__all__ = ["recomputed_ops", "transformer_program", "gpt_dims", "uses_flash",
           "ATTENTION_CORE", "memoised_programs", "active_store"]

def _planned(scenario: Scenario, fused_attention: bool, e: int
             ) -> tuple[ShardingPlan, GptDims, LayerPlan]:
    """The planned GPT graph a transformer's program is derived from (the representative
    layers of its layer plan, `models.layers`), its dimensions and the layer plan."""
    p, m = scenario.parallel, transformer_model(scenario.model)
    lp = layer_plan(layer_kinds(m))
    dims = gpt_dims(scenario, uses_flash(scenario, fused_attention), lp.graph)
    nd = tuple(p.tensor_nd) if p.tensor_nd else None
    graph, mesh = planned_transformer(dims, p.data, p.tensor, p.sequence_parallel, p.expert_axis,
                                      nd)
    return comm_options.plan(scenario, graph, mesh, e), dims, lp


_MEMO: list[dict[Any, Program]] = []  # the active store (innermost last)
MEMO_SIZE = 256  # programs kept at most, the store emptied when full (0: not memoised)


@contextmanager
def memoised_programs(store: dict[Any, Program]) -> Iterator[None]:
    """Within the block, `transformer_program` returns the program it derived before for
    the same inputs from `store` (programs are frozen: sharing one is safe) and adds the
    ones it derives. A sweep keeps one store per worker process (`planner.sweep`)."""
    _MEMO.append(store)
    try:
        yield
    finally:
        _MEMO.pop()


def active_store() -> dict[Any, Program]:
    """The store of the innermost `memoised_programs` block, or a new one outside any."""
    return _MEMO[-1] if _MEMO else {}


def transformer_program(scenario: Scenario, software: Software | None = None,
                        compute_units: int = 132, fp8: Fp8Recipe | None = None
                        ) -> Program:
    """`_derive`, or inside `memoised_programs` the stored program of the same inputs."""
    software = software or Software()
    if not _MEMO or MEMO_SIZE <= 0:
        return _derive(scenario, software, compute_units, fp8)
    store = _MEMO[-1]
    key = program_key(scenario, software, compute_units, fp8)
    prog = store.get(key)
    if prog is None:
        prog = _derive(scenario, software, compute_units, fp8)
        if len(store) >= MEMO_SIZE:
            store.clear()
        store[key] = prog
    return prog


def _stack_ops(scenario: Scenario, software: Software, plan: ShardingPlan,
               recipe: Fp8Recipe | None, sv: Saved, dtype: str, blocks: dict[str, SelectedBlock]
               ) -> tuple[dict[str, tuple[Op, ...]], dict[str, tuple[Op, ...]], float, float]:
    """(forward and backward ops of each block by name: the layer groups', the embedding's
    and the head's; the head's saved bytes, the logits per device) as the stack runs them:
    the plan's kernels and collectives with the FP8 recipe's GEMMs, the attention kernel, a
    fused cross-entropy, the busiest expert rank's load, the stack's unfused kernels, the
    fp32 main-gradient add and the weight casts of a stored parameter dtype."""
    m, e = transformer_model(scenario.model), DTYPE_BYTES[dtype]
    graph = plan.graph
    embed, head = blocks["embed"], blocks["head"]
    layers = [k for k in blocks if k not in ("embed", "head")]
    fwd = {k: forward_specs(plan, dtype, b.select, e, sv) for k, b in blocks.items()}
    bwd = {k: backward_specs(plan, dtype, b.select, e) for k, b in blocks.items()}
    if recipe is not None:
        fwd = {k: apply_fp8(v, recipe) for k, v in fwd.items()}
        bwd = {k: apply_fp8(v, recipe) for k, v in bwd.items()}
        if recipe.dtype == "fp8" and scenario.parallel.expert_dispatcher == "deepep":
            fwd, bwd = fp8_dispatch(fwd, bwd)
    impl = m.attention if m.attention not in ("auto", "standard", "flash") else \
        software.attention_impl
    if impl:
        fwd = {k: with_impl(v, impl) for k, v in fwd.items()}
        bwd = {k: with_impl(v, impl) for k, v in bwd.items()}
    head_saved = sv.total(head.select)
    if software.tp_saved_input == "gathered" and scenario.parallel.sequence_parallel:
        fwd["head"], more_saved = gathered_head_input(fwd["head"], e, scenario.parallel.tensor)
        head_saved += more_saved
    # the logits of one micro-batch on this device (vocabulary-parallel share)
    logits = sum(op.flops / CE_FWD_FLOPS for op in fwd["head"]
                 if isinstance(op, ComputeSpec) and op.name == "cross_entropy")
    if software.fused_cross_entropy or scenario.training.compiled_loss:
        passes = (1.0, 2.0) if scenario.training.compiled_loss else software.ce_fused_passes
        fwd["head"] = fused_cross_entropy(fwd["head"], e, passes)
        bwd["head"] = fused_cross_entropy(bwd["head"], e, passes)
        # it keeps the model-dtype logits for its backward, not the fp32 softmax
        head_saved -= (4.0 - e) * logits
    imbalance = m.moe.imbalance if m.moe else 1.0
    more = unfused_ops(scenario, software.unfused_passes, dtype)  # the stack's unfused kernels
    moe_extra = expert_extras(scenario, dtype)  # GPT-OSS's clamps, the all-to-all's sort
    rope = yarn_rope(scenario, software, dtype)  # a YaRN rotation as the stack's eager ops
    for k in layers:
        fwd[k], bwd[k] = rope(fwd[k], bwd[k])
        if _has_experts(fwd[k]):  # in each MoE layer, where the stack runs them
            fwd[k], bwd[k] = moe_extra(fwd[k], bwd[k])
        fwd[k] = grouped_gemms(imbalanced(fwd[k], imbalance)) + more[0]
        bwd[k] = grouped_gemms(imbalanced(bwd[k], imbalance)) + more[1]
    params = {k: blocks[k].params(plan, graph)[0] for k in layers}
    embed_params = embed.params(plan, graph)[0]
    head_params, output_params = head_elements(plan, head, embed)
    if not software.fused_grad_accumulation:
        cast = software.grad_accumulation_cast
        for k in layers:
            bwd[k] += main_grad(e, dtype, "main_grad_add", params[k], cast)
        bwd["embed"] += main_grad(e, dtype, "main_grad_add_embed", embed_params, cast)
        bwd["head"] += main_grad(e, dtype, "main_grad_add_head", head_params + output_params,
                                 cast)
    if software.dense_embedding_grad:  # one stage holds both ends only without a pipeline
        tied = output_params if scenario.parallel.pipeline == 1 else 0
        bwd["embed"] += dense_embedding_grad(e, dtype, embed_params, tied,
                                             software.fused_grad_accumulation)
    if m.param_dtype is not None and m.param_dtype != dtype:
        casts = [(k, "layer", params[k]) for k in layers]
        for block, name, n in casts + [("head", "head", head_params + output_params)]:
            cast_fwd, cast_bwd = weight_casts(f"weight_cast_{name}", n, dtype)
            fwd[block], bwd[block] = cast_fwd + fwd[block], bwd[block] + cast_bwd
    return fwd, bwd, head_saved, logits


def _has_experts(ops: tuple[Op, ...]) -> bool:
    """Whether a layer's ops hold expert GEMMs (an MoE layer)."""
    return any(isinstance(op, ComputeSpec) and op.kind == "gemm" and op.name.startswith("expert_")
               for op in ops)


def _ce_transient(software: Software, tensor: int, compiled: float = 0.0) -> float:
    """Bytes per logit the loss's backward allocates beyond its saved set: `compiled` (the
    model dtype's bytes) where the loss runs under torch.compile (`training.compiled_loss`:
    Inductor's backward is one fused kernel writing the logits' gradient in their dtype,
    the nll_loss_backward scatter made pointwise by torch/_inductor/fx_passes/post_grad.py
    `scatter_upon_const_tensor`, so no fp32 buffer the size of the logits); else the
    stack's vocabulary-parallel figure when the logits are split over tensor ranks and it
    states one, else its plain figure (`CrossEntropy` of the framework profile)."""
    if compiled:
        return compiled
    vp = software.ce_vp_backward_transient_bytes_per_logit
    return vp if tensor > 1 and vp else software.ce_backward_transient_bytes_per_logit


def _derive(scenario: Scenario, software: Software, compute_units: int,
            fp8: Fp8Recipe | None) -> Program:
    """One device's work for one micro-batch of `scenario` (a transformer model), derived
    from its planned graph. `software` is the framework profile's stack: it
    resolves `model.attention: auto`, says whether gradient accumulation into fp32 runs
    inside the wgrad GEMMs, whether bf16 gradients are kept and reduced in fp32, and whether
    TP collectives overlap their GEMMs (`compute_units`: the device's SMs / AI cores).
    `fp8`: the framework's FP8 recipe for a `dtype: fp8` model, or its FP4 recipe for a bf16
    one (`training.fp4_recipe`): the model is bf16 except the recipe's GEMMs (without one, a
    `dtype: fp8` model runs every op in fp8)."""
    p, m = scenario.parallel, transformer_model(scenario.model)
    recipe = fp8 if fp8 is not None and (m.dtype == "fp8" or fp8.dtype == "fp4") else None
    tpo = tp_overlap(scenario, software, compute_units)
    if recipe is not None and recipe.dtype == "fp8" and not recipe.dynamic and tpo is not None:
        # Transformer Engine (delayed scaling) with its userbuffers TP overlap gathers the
        # GEMM operands in FP8 (program.fp8)
        recipe = replace(recipe, gather_tp=p.tensor)
    dtype = "bf16" if recipe is not None else m.dtype
    e = DTYPE_BYTES[dtype]
    plan, dims, lp = _planned(scenario, software.fused_attention, e)
    graph = plan.graph
    groups = group_blocks(lp)
    embed, head = SelectedBlock(embed_op), SelectedBlock(head_op)
    sv: Saved = saved(plan, e)
    if recipe is not None and recipe.saves_fp8:
        sv = fp8_saved(sv, plan, recipe, e)
    if m.moe is not None and weights_in_activation(m.moe.probs_in_activation,
                                                   software.moe_probs_in_activation):
        sv = probs_in_activation(sv, plan)
    if recipe is not None and scenario.training.fp8_saved_activations:
        sv = fp8_cached(sv, plan, tuple(scenario.training.fp8_saved_activations), e)
    fwd, bwd, head_saved, logits = _stack_ops(scenario, software, plan, recipe, sv, dtype,
                                              {**groups, "embed": embed, "head": head})
    embed_params = embed.params(plan, graph)[0]
    head_params, output_params = head_elements(plan, head, embed)
    steps = gradient_steps(plan, ("dp",))
    bwd, steps = gathered_params(plan, {**{k: (b.select, None) for k, b in groups.items()},
                                         "embed": (embed.select, None),
                                         "head": (head.select, embed.select)}, bwd, steps)
    threshold, pe = optimizer_threshold(scenario)
    small = kept_whole(plan, threshold, pe)
    worker = worker_elements(scenario, plan)
    imbalance = m.moe.imbalance if m.moe else 1.0
    layer_blocks = [_group(scenario, software, plan, dims, sv, e, name, b, fwd[name],
                           bwd[name], steps, (small, worker), lp.unit,
                           recipe.kernels if recipe is not None and recipe.saves_fp8
                           else frozenset())
                    for name, b in groups.items()]
    return Program(
        blocks=(
            Block("embed", fwd["embed"], bwd["embed"], pinned="first", layers=0,
                  params=embed_params, unsharded=small_params(plan, embed.select, small),
                  worker_params=small_params(plan, embed.select, worker),
                  grad_sync=coalesce(sync_steps(plan, steps, embed.select), "grad_sync"),
                  saved_bytes=sv.total(embed.select),
                  tp_replicated=tp_replicated_kernels(plan, embed.select)),
            *(replace(layer_blocks[i], repeat=n) for i, n in lp.runs),
            Block("head", fwd["head"], bwd["head"], pinned="last", layers=0,
                  params=head_params, tied_params=output_params,
                  unsharded=small_params(plan, head.select, small, embed.select),
                  worker_params=small_params(plan, head.select, worker, embed.select),
                  grad_sync=coalesce(sync_steps(plan, steps, head.select, embed.select),
                                      "grad_sync"),
                  saved_bytes=head_saved,
                  transient_bytes=_ce_transient(
                      software, p.tensor,
                      float(e) if scenario.training.compiled_loss else 0.0)
                  * logits,
                  tp_replicated=tp_replicated_kernels(plan, head.select))),
        dtype=dtype,
        grad_elem_bytes=4.0 if software.bf16_grads_fp32 and dtype == "bf16" else None,
        tp_overlap=tpo, expert_slot_fill=slot_fill(dims), expert_load=imbalance,
        p2p_blocking=p2p_blocking(software, p.schedule),
        state_layout=software.state_layout,
        grad_buffer_passes=software.grad_buffer_passes,
    )


def _group(scenario: Scenario, software: Software, plan: ShardingPlan, dims: GptDims,
           sv: Saved, e: int, name: str, block: SelectedBlock, fwd: tuple[Op, ...],
           bwd: tuple[Op, ...], steps: tuple[CommSpec, ...],
           kept: tuple[dict[str, int], dict[str, int]], unit: int,
           fp8_kernels: frozenset[str] = frozenset()) -> Block:
    """The Block of one group of the layer plan (`unit` layers), its repeat left at 1.
    `kept`: {parameter: local elements} the optimizer keeps whole, and those the workers
    all-reduce beside parameter servers."""
    small, worker = kept
    recompute, per_layer, boundary = layer_recompute(scenario, software, plan, dims, sv, e,
                                                      block.select, fwd, fp8_kernels)
    params, tensors = block.params(plan, plan.graph)
    rc = scenario.parallel.recompute != "none"
    return Block(name, fwd, bwd, recompute, layers=unit, params=params,
                 param_tensors=tensors, unsharded=small_params(plan, block.select, small),
                 worker_params=small_params(plan, block.select, worker),
                 expert_params=expert_params(plan, block.select),
                 grad_sync=coalesce(sync_steps(plan, steps, block.select), "grad_sync"),
                 saved_bytes=per_layer,
                 # one layer's full saved set is alive while a recomputed layer runs its
                 # backward: what the re-run makes beyond what it keeps
                 working_bytes=(sv.total(block.select)
                                + unfused_saved_bytes(scenario, software.unfused_passes)
                                - per_layer) if rc else 0.0,
                 recomputes=rc, send_fwd_bytes=float(boundary),
                 send_bwd_bytes=float(boundary),
                 tp_replicated=tp_replicated_kernels(plan, block.select))
