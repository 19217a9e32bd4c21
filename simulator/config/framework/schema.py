"""The framework profile schema: what one training stack does, separate from the hardware.

A framework profile (`framework_profiles/NAME.yaml`) states, with a `source:` per block, which
kernels the stack fuses, how it buckets and reduces gradients, what overlaps with what, its
FP8 recipe and its memory overheads (field meanings: framework_profiles/README.md). Most
fields are cited prose; the fields the simulator reads are typed:

- `attention.fused_default`, `attention.implementation`, `fused_grad_accumulation.enabled`,
  `grad_reduction.fp32_for_bf16`, `overlap.tp_comm_enabled` / `overlap.tp_comm_sms`,
  `overlap.p2p_blocking`, `fused_kernels.unfused_passes` make the
  `Software` value the model program takes (`FrameworkProfile.software`);
- `grad_reduction.bucket_*` is the bucket rule of `parallel.comm_fusion.mode: auto`
  (`simulator.lower.buckets.auto_bucket_bytes`);
- `memory_overheads.*_bytes` is the `framework_overhead` share of the memory report;
- `fp8.gemm_roles` / `fp8.dynamic_scaling` / `fp8.weight_copy_bytes_per_param` /
  `fp8.saved_inputs` is the FP8 recipe of `dtype: fp8`.

Pydantic models, frozen, closed (unknown keys are errors) and strict, like the hardware and
scenario schemas.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from simulator.config.framework.schema_host import Closed, Launch, Moe, MoeHost

__all__ = ["FrameworkProfile", "Software", "Fp8", "MemoryOverheads", "GradReduction",
           "UnfusedPass", "Launch", "MoeHost", "Moe", "FP8_ROLES"]

PosInt = Annotated[StrictInt, Field(ge=1)]
NonNegInt = Annotated[StrictInt, Field(ge=0)]
NonNegFloat = Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)] | NonNegInt
# a count of passes over a buffer (an int or a float, one error path: `key`, not its branch)
Passes = Annotated[float, Field(ge=0, le=1e4, allow_inf_nan=False, strict=True)]
Text = StrictStr | None
# GEMM roles of the transformer layer and head (names of the planned GPT graph's kernels)
FP8_ROLES = ("qkv", "proj", "fc1", "fc2", "lm_head")


_Closed = Closed


class UnfusedPass(_Closed):
    """Memory traffic a stack adds to every transformer layer with kernels the simulator's
    layer does not have or has fused (a norm run in fp32 between two Casts, a rotary
    embedding as separate fp32 ops, layout transposes): `fwd_bytes` / `bwd_bytes` bytes read
    plus written per element of `tensor`, `count` tensors of that kind per layer, in the
    forward (re-run by a full recompute) and the backward. `tensor` is one device's share of
    one micro-batch: `hidden` tokens x hidden (over tensor parallel only with sequence
    parallel), `heads` tokens x heads x head_dim / tp, `kv_heads` tokens x kv_heads x
    head_dim / tp, `ffn` tokens x ffn_hidden / tp; tokens = micro_batch x seq / context."""

    name: StrictStr
    tensor: Literal["hidden", "heads", "kv_heads", "ffn"]
    count: PosInt = 1
    fwd_bytes: NonNegFloat
    bwd_bytes: NonNegFloat
    ops: StrictStr  # the kernels counted, for the reader
    # only for models with this FFN activation (a SiLU-then-Mul pass is a SwiGLU layer's); null: all
    activation: Literal["gelu", "swiglu"] | None = None
    # only for models with fewer key/value heads than query heads (grouped-query attention: a
    # copy that repeats the key/value heads is a no-op without it)
    grouped_query_only: StrictBool = False
    # bytes per element of `tensor` (each of `count`) the stack's kernels keep for the
    # backward beyond what the fused layer keeps (an fp32 copy of a norm's input, SiLU's
    # output kept by the Mul); negative where they keep less (key/value heads the attention
    # no longer keeps because it keeps their repeated copies)
    saved_bytes: Annotated[StrictFloat, Field(ge=-64, le=64, allow_inf_nan=False)] = 0.0


class Software(_Closed):
    """The kernels and overlaps of a training stack that the model program reads (made from
    a framework profile by `FrameworkProfile.software`)."""

    # host time the stack spends launching one kernel (framework dispatch + the driver's
    # launch call), microseconds: a device runs no faster than its host issues its kernels
    # (`Launch`; 0: not modelled)
    host_us_per_kernel: Annotated[StrictFloat, Field(ge=0, le=1e4, allow_inf_nan=False)] = 0.0

    # `model.attention: auto` runs attention as one fused (FlashAttention-style) kernel
    fused_attention: StrictBool = False
    # the wgrad GEMM accumulates into the fp32 main gradient (no separate add pass)
    fused_grad_accumulation: StrictBool = False
    # the separate add casts the 16-bit gradient to fp32 in a kernel of its own first
    grad_accumulation_cast: StrictBool = False
    # tensor-parallel collectives are chunked and pipelined against the GEMM that produces
    # or consumes them (`parallel.overlap.tp_comm: auto`), their kernels taking tp_comm_sms
    # of the compute units while they run
    tp_comm_overlap: StrictBool = False
    tp_comm_sms: PosInt = 16
    # bf16 gradients are accumulated and reduced in fp32 (a 4-byte gradient buffer)
    bf16_grads_fp32: StrictBool = False
    # the embedding's weight gradient is a dense table each micro-batch
    # (`FusedGradAccumulation.dense_embedding_grad`, program.stack_ops.dense_embedding_grad)
    dense_embedding_grad: StrictBool = False
    # element passes over the gradient buffer per iteration, and more with data
    # parallelism (`GradReduction.buffer_passes`, `.buffer_passes_dp`)
    grad_buffer_passes: tuple[Passes, Passes] = (0.0, 0.0)
    # how the states of `optimizer_shard: 3` are laid out (`Sharding.state_layout`)
    state_layout: Literal["zero", "fsdp2"] = "zero"
    # what the output layer keeps of its sequence-parallel input (`Sharding.tp_saved_input`)
    tp_saved_input: Literal["shard", "gathered"] = "shard"
    # the fused-attention implementation (`Attention.implementation`); "" = generic
    attention_impl: StrictStr = ""
    # pipeline sends block the compute stream (`Overlap.p2p_blocking`)
    p2p_blocking: Literal["always", "non_interleaved", "never"] = "never"
    # the grouped experts apply the routing weights in their activation, so the combine
    # keeps no copy of the experts' outputs (`Moe.probs_in_activation`; a scenario's
    # `model.moe.probs_in_activation` overrides it)
    moe_probs_in_activation: StrictBool = False
    # the loss is one fused kernel over the logits in the model dtype (`CrossEntropy.fused`)
    # instead of fp32 passes one by one
    fused_cross_entropy: StrictBool = False
    # its reads + writes of each logit, forward and backward (`CrossEntropy.fused_*_passes`)
    ce_fused_passes: tuple[Passes, Passes] = (1.0, 2.0)
    # bytes per logit the loss's backward allocates beyond what its forward saved
    # (`CrossEntropy.backward_transient_bytes_per_logit`; 0: not known)
    ce_backward_transient_bytes_per_logit: NonNegFloat = 0.0
    # the same when the logits are split over tensor-parallel ranks (vocabulary-parallel
    # loss; `CrossEntropy.vocab_parallel_backward_transient_bytes_per_logit`; 0: as above)
    ce_vp_backward_transient_bytes_per_logit: NonNegFloat = 0.0
    # what `parallel.recompute: selective` recomputes (`ActivationRecompute.selective`;
    # program.recompute_policy)
    selective_recompute: Literal["attention_core", "every_second_mm"] = "attention_core"
    # memory traffic of the stack's unfused kernels beyond what the layer's own kernels
    # move (`FusedKernels.unfused_passes`, priced by `schedule.unfused`)
    unfused_passes: tuple[UnfusedPass, ...] = ()
    # a YaRN rotary embedding runs as eager element-wise ops (`FusedKernels.yarn_rope_unfused`,
    # priced by `program.yarn_rope`)
    yarn_rope_unfused: StrictBool = False


class Attention(_Closed):
    fused_default: StrictBool
    kernel: StrictStr
    source: StrictStr
    # which fused-attention implementation the stack runs (priced by the hardware profile's
    # `efficiency.attention_kernels`); null: not one the profiles tell apart
    implementation: Literal["fa1", "fa2", "fa3", "cudnn", "te"] | None = None


class FusedKernels(_Closed):
    list: tuple[StrictStr, ...]
    source: StrictStr
    # traffic of kernels the stack leaves unfused (default none: the layer's kernels as the
    # simulator prices them, fused norm / activation and no separate rotary embedding)
    unfused_passes: tuple[UnfusedPass, ...] = ()
    # a YaRN rotary embedding (`model.yarn_factor`) runs as the stack's eager element-wise
    # ops, not its fused rotary kernel (program.yarn_rope); false: as plain RoPE
    yarn_rope_unfused: StrictBool = False
    yarn_rope_source: StrictStr = ""


class FusedGradAccumulation(_Closed):
    enabled: StrictBool | None  # null: not found in public code (taken as not fused)
    detail: StrictStr
    source: StrictStr
    # when not fused: the 16-bit gradient is cast to fp32 by a kernel of its own before the
    # add (DeepSpeed BF16_Optimizer: hp_grad.add_(lp.grad.to(fp32))); false: one add kernel
    # that reads the 16-bit gradient as it is (Megatron LocalDDP main_grad.add_)
    separate_cast: StrictBool = False
    # the embedding table's gradient is not fused: each micro-batch the lookup's backward
    # makes a dense table-sized 16-bit gradient (zeros, then the rows added), added into the
    # fp32 main gradient by the reduction hook; a tied output layer on the same stage adds
    # a zero-filled dummy of the same size that autograd sums with it (Megatron-Core)
    dense_embedding_grad: StrictBool = False
    dense_embedding_grad_source: StrictStr = ""


class GradReduction(_Closed):
    bucket_rule: StrictStr
    bucket_params: PosInt | None
    bucket_params_per_dp_rank: PosInt | None
    bucket_bytes: PosInt | None
    first_bucket_bytes: PosInt | None
    collective: StrictStr
    dtype: StrictStr
    # bf16 training keeps and reduces the gradients in fp32
    fp32_for_bf16: StrictBool
    source: StrictStr
    # element reads + writes over the whole gradient buffer each iteration besides the
    # backward's accumulation and the optimizer's read (Megatron-Core: the buffer's zero_
    # and each bucket's NaN-check norm); 0: none counted
    buffer_passes: Passes = 0.0
    # more of them where the gradients are reduced over more than one data-parallel rank
    # (Megatron-Core: each bucket's 1/dp pre-scale before its collective)
    buffer_passes_dp: Passes = 0.0
    buffer_passes_source: StrictStr = ""


class ParamGather(_Closed):
    rule: StrictStr
    dtype: Text
    source: StrictStr


class Sharding(_Closed):
    optimizer_states: StrictStr
    gradients: StrictStr
    parameters: StrictStr
    wrap_unit: Text
    reshard_after_forward: StrictBool | StrictStr | None
    source: StrictStr
    # how the stack lays out the states of `optimizer_shard: 3` (lower.state.STATE_LAYOUTS):
    # "zero" a 16-bit shard beside the optimizer's fp32 master copy, gradients held all
    # step; "fsdp2" (torch fully_shard) the fp32 shard is the master copy, each unit's
    # sharded gradient made by its reduce-scatter and freed after the step (set_to_none)
    state_layout: Literal["zero", "fsdp2"] = "zero"
    state_layout_source: StrictStr = ""
    # what a column-parallel linear outside activation checkpointing keeps of its
    # sequence-parallel input under tensor parallelism: the shard, gathered again in the
    # backward (Megatron-Core), or the gathered tensor it was given (torch's DTensor TP:
    # ColwiseParallel redistributes the input before F.linear, which saves it)
    tp_saved_input: Literal["shard", "gathered"] = "shard"
    tp_saved_input_source: StrictStr = ""
    # the last wrapped block is not resharded after its forward (its gathered parameters
    # stay until its backward; the allocation sequence, report.alloc_sequence)
    keep_last_block_unsharded: StrictBool = False


class Overlap(_Closed):
    grad_reduce: StrictBool | StrictStr
    param_gather: StrictBool | StrictStr
    tp_comm: StrictBool | StrictStr
    # what `parallel.overlap.tp_comm: auto` resolves to, and the SMs its kernels take
    tp_comm_enabled: StrictBool
    tp_comm_sms: PosInt = 16
    pipeline_p2p: Text
    # whether the compute stream waits for each pipeline send/receive (Megatron's
    # `_communicate`: batch_isend_irecv, req.wait(), torch.cuda.synchronize()): always,
    # only outside the interleaved schedule (whose sends overlap: overlap_p2p_comm), never
    p2p_blocking: Literal["always", "non_interleaved", "never"] = "never"
    fsdp_forward_prefetch_depth: NonNegInt | None
    fsdp_backward_prefetch_depth: NonNegInt | None
    limit_inflight_all_gathers: PosInt | None
    source: StrictStr


class Fp8(_Closed):
    supported: StrictBool
    recipe: Text
    format: Text
    amax_history_len: PosInt | None
    amax_compute_algo: Text
    scaling_granularity: Text
    fp8_gemms: tuple[StrictStr, ...]
    bf16_ops: tuple[StrictStr, ...]
    cast_costs: Text
    # the GEMMs `dtype: fp8` runs in FP8 (roles of FP8_ROLES); every other op stays bf16
    gemm_roles: tuple[Literal["qkv", "proj", "fc1", "fc2", "lm_head"], ...] = ()
    # current (dynamic) scaling: each tensor's amax from a separate pass, weights cast at
    # every use; false: delayed scaling (amax history, amax inside the cast kernel)
    dynamic_scaling: StrictBool = False
    # FP8 weight copies kept next to the bf16 weights, bytes per parameter of an FP8 GEMM
    # (the e4m3 weight and its transpose)
    weight_copy_bytes_per_param: NonNegInt = 0
    # what an FP8 GEMM keeps for its backward: its inputs cast to FP8 (Transformer Engine's
    # Linear saves the FP8 input for the weight gradient), or the model-dtype inputs it
    # casts again in the backward (torchao Float8Linear)
    saved_inputs: Literal["fp8", "high_precision"] = "fp8"
    saved_inputs_source: StrictStr = ""
    source: StrictStr


class MemoryOverheads(_Closed):
    cuda_context_bytes: NonNegInt | None
    cuda_context_source: StrictStr
    comm_buffer_bytes: NonNegInt | None
    comm_buffer_rule: StrictStr
    comm_buffer_source: StrictStr
    # buffers of comm_buffer_bytes one communicator holds (channels x connections)
    comm_buffers_per_communicator: NonNegInt
    allocator: StrictStr
    persistent_buffers: StrictStr
    workspace_bytes: NonNegInt | None
    workspace_source: StrictStr
    # the device allocator whose reserve `reserved_peak_bytes` models (report.allocator):
    # PyTorch's caching allocator, without or with expandable segments; null: another one
    caching_allocator: Literal["pytorch", "pytorch_expandable"] | None = None
    caching_allocator_source: StrictStr = ""
    # the order in which the stack allocates and frees a step's tensors, replayed through
    # the caching allocator for `reserved_peak_bytes` (report.alloc_sequence): "fsdp2"
    # (torch fully_shard, foreach AdamW, zero_grad(set_to_none)); null: no sequence, the
    # closed form of the tensors alive at the peak (report.allocator)
    allocation_sequence: Literal["fsdp2"] | None = None
    allocation_sequence_source: StrictStr = ""


class CrossEntropy(_Closed):
    implementation: StrictStr
    vocab_parallel: StrictBool
    logits_dtype: Text
    fused: StrictBool | None
    source: StrictStr
    # the fused loss's traffic: reads + writes of the logits in the model dtype per logit,
    # forward and backward (program.stack_ops.fused_cross_entropy; flash-attn's Triton
    # loss 1 and 2, Transformer Engine's 3 and 2)
    fused_fwd_passes: Passes = 1.0
    fused_bwd_passes: Passes = 2.0
    fused_passes_source: StrictStr = ""
    # the gradient buffers the loss's backward allocates on top of what its forward saved,
    # bytes per logit of the stage's micro-batch (null: not found in a public source)
    backward_transient_bytes_per_logit: NonNegFloat | None = None
    backward_transient_source: StrictStr = ""
    # the same for the vocabulary-parallel loss (logits split over tensor ranks), where the
    # stack runs another implementation (null: as the plain figure)
    vocab_parallel_backward_transient_bytes_per_logit: NonNegFloat | None = None
    vocab_parallel_backward_transient_source: StrictStr = ""


class ActivationRecompute(_Closed):
    options: tuple[StrictStr, ...]
    default_in_published_runs: Text
    source: StrictStr
    # what the stack's selective recompute re-runs: the attention core (Megatron) or every
    # op but the odd-numbered matmuls and the fused attention (torchtitan's op-level SAC)
    selective: Literal["attention_core", "every_second_mm"] = "attention_core"
    selective_source: StrictStr = ""


class FrameworkProfile(_Closed):
    """A validated framework profile. `source` is the file it came from (for messages)."""

    name: StrictStr
    description: StrictStr = ""
    basis: StrictStr = ""
    attention: Attention
    fused_kernels: FusedKernels
    fused_grad_accumulation: FusedGradAccumulation
    grad_reduction: GradReduction
    param_gather: ParamGather
    sharding: Sharding
    overlap: Overlap
    fp8: Fp8
    memory_overheads: MemoryOverheads
    cross_entropy: CrossEntropy
    activation_recompute: ActivationRecompute
    launch: Launch | None = None
    moe_host: MoeHost | None = None
    moe: Moe | None = None
    notes: tuple[StrictStr, ...] = ()
    source: StrictStr = "<framework>"

    @property
    def software(self) -> Software:
        """The Software value the model program takes."""
        return Software(
            fused_attention=self.attention.fused_default,
            fused_grad_accumulation=bool(self.fused_grad_accumulation.enabled),
            grad_accumulation_cast=self.fused_grad_accumulation.separate_cast,
            dense_embedding_grad=self.fused_grad_accumulation.dense_embedding_grad,
            tp_comm_overlap=self.overlap.tp_comm_enabled,
            tp_comm_sms=self.overlap.tp_comm_sms,
            bf16_grads_fp32=self.grad_reduction.fp32_for_bf16,
            grad_buffer_passes=(self.grad_reduction.buffer_passes,
                                self.grad_reduction.buffer_passes_dp),
            state_layout=self.sharding.state_layout,
            tp_saved_input=self.sharding.tp_saved_input,
            attention_impl=self.attention.implementation or "",
            p2p_blocking=self.overlap.p2p_blocking,
            moe_probs_in_activation=self.moe is not None and self.moe.probs_in_activation,
            fused_cross_entropy=bool(self.cross_entropy.fused),
            ce_fused_passes=(self.cross_entropy.fused_fwd_passes,
                             self.cross_entropy.fused_bwd_passes),
            ce_backward_transient_bytes_per_logit=(
                self.cross_entropy.backward_transient_bytes_per_logit or 0.0),
            ce_vp_backward_transient_bytes_per_logit=(
                self.cross_entropy.vocab_parallel_backward_transient_bytes_per_logit or 0.0),
            selective_recompute=self.activation_recompute.selective,
            unfused_passes=self.fused_kernels.unfused_passes,
            yarn_rope_unfused=self.fused_kernels.yarn_rope_unfused,
            host_us_per_kernel=self.launch.host_us_per_kernel if self.launch else 0.0)

    @property
    def moe_host_kernel_s(self) -> float:
        """Host seconds per kernel of an MoE layer whose dispatcher syncs (`moe_host`);
        0 where the stack's dispatcher does not."""
        m = self.moe_host
        return m.host_us_per_kernel * 1e-6 if m is not None and m.dispatcher_sync else 0.0

    @property
    def graph_launch_s(self) -> float:
        """Host seconds per CUDA graph launch (`launch.graph_launch_us`; 0 where not given)."""
        g = self.launch.graph_launch_us if self.launch is not None else None
        return (g or 0.0) * 1e-6

    @property
    def moe_host_costs(self) -> tuple[float, int, tuple[float | None, float | None]]:
        """(`moe_host_kernel_s`, the dispatcher's launches before each sync, the seconds of a
        GEMM and of another kernel a C++ loop launches: None where not given) for the cost
        model (`simulator.lower.costs.CostModel.from_hardware`)."""
        m = self.moe_host
        if m is None or not self.moe_host_kernel_s:
            return 0.0, 0, (None, None)
        loop = tuple(None if us is None else us * 1e-6
                     for us in (m.loop_us_per_gemm, m.loop_us_per_kernel))
        return self.moe_host_kernel_s, m.dispatcher_kernels, (loop[0], loop[1])

    def __str__(self) -> str:
        return f"{self.name} ({self.description})"
