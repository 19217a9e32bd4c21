"""What a training stack (the framework profile's `Software`) adds to the kernels and
collectives of a planned transformer: fp32 main-gradient adds, TP-comm overlap, blocking
pipeline sends, the fused-attention implementation, a fused cross-entropy, and the expert
load of a mixture of experts. Each annotation is cited where it is made."""

from __future__ import annotations

import math
from dataclasses import replace

from simulator.config.hardware.schema import Software
from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.graph.decoder import GptDims
from simulator.graph.ops.loss import CE_BWD_FLOPS, CE_FWD_FLOPS
from simulator.program.program import Op, TpOverlap

__all__ = ["main_grad", "dense_embedding_grad", "tp_overlap", "p2p_blocking", "with_impl",
           "fused_cross_entropy", "gathered_head_input", "imbalanced", "grouped_gemms",
           "slot_fill", "weight_casts"]


def main_grad(e: int, dtype: str, name: str, params: float, cast: bool = False
              ) -> tuple[Op, ...]:
    """Mixed precision keeps fp32 main gradients (Micikevicius et al. 2018, Sec. 3.1): after
    each micro-batch's backward the 16-bit weight gradients are added into them (Megatron-LM
    LocalDDP's main_grad.add_, PyTorch AMP's AccumulateGrad): read e, read 4, write 4 bytes
    per parameter. With `cast` the gradient is first cast to fp32 by a kernel of its own
    (DeepSpeed BF16_Optimizer update_hp_grads: hp_grad.add_(lp.grad.to(fp32))): read e,
    write 4, then the add reads 4 + 4 and writes 4. None in fp32 training, where the
    gradient is the main gradient. It reads the weight gradients: `weight_grad`."""
    if e >= 4 or params <= 0:
        return ()
    per = e + 16.0 if cast else e + 8.0
    return (ComputeSpec(name, "elementwise", float(params), per * params, dtype, "bwd",
                        weight_grad=True),)


def dense_embedding_grad(e: int, dtype: str, table: float, tied: float, fused: bool
                         ) -> tuple[Op, ...]:
    """The embedding's weight gradient as Megatron-Core makes it each micro-batch
    (`table` elements of the device's embedding tables, `tied` of them shared with an
    output layer on the same stage): the lookup's backward (torch F.embedding,
    aten/src/ATen/native/cuda/Embedding.cu embedding_dense_backward_cuda: at::zeros of the
    table, then the token rows added) writes e bytes per element; the fused output layer
    (core_r0.8.0 tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication
    .backward) returns a torch.zeros dummy of its weight's size where the weight is shared on
    one stage (language_module.py sets zero_out_wgrad), e more, and autograd sums the two
    (read 2e, write e); the reduction hook (distributed_data_parallel.py param_hook:
    main_grad.add_(param.grad), run for a shared weight because of zero_out_wgrad) adds it
    into the fp32 main gradient, e + 8 (counted by `main_grad` already where the stack's
    wgrad is not fused). Every op reads or writes the weight gradient: `weight_grad`."""
    if table <= 0:
        return ()
    ops: list[Op] = [ComputeSpec("embed_grad_zeros", "elementwise", 0.0, e * table, dtype,
                                 "bwd", weight_grad=True)]
    if tied > 0:
        ops += [ComputeSpec("tied_wgrad_zeros", "elementwise", 0.0, e * tied, dtype, "bwd",
                            weight_grad=True),
                ComputeSpec("tied_grad_sum", "elementwise", float(tied), 3.0 * e * tied,
                            dtype, "bwd", weight_grad=True)]
    if fused:
        ops += list(main_grad(e, dtype, "main_grad_add_embed", table))
    return tuple(ops)


def tp_overlap(scenario: Scenario, software: Software, compute_units: int
                ) -> TpOverlap | None:
    """`parallel.overlap.tp_comm` (auto: the software stack's): each TP collective in
    tensor-degree chunks (Transformer Engine's default ring-exchange method steps once per
    peer), its kernels on software.tp_comm_sms of the compute units. None under 2-D tensor
    parallel: the stacks' overlap (TE userbuffers) chunks 1-D's collectives only, so `auto`
    takes none (rules.py refuses `true`)."""
    mode = scenario.parallel.overlap.tp_comm
    on = software.tp_comm_overlap if mode == "auto" else mode
    t = scenario.parallel.tensor
    if not on or t <= 1 or scenario.parallel.tensor_nd:
        return None
    return TpOverlap(chunks=t, sm_fraction=min(0.5, software.tp_comm_sms / compute_units),
                     ring_sm_fraction=1.0 / compute_units)


def p2p_blocking(software: Software, schedule: str) -> bool:
    """Whether the stack's pipeline sends hold the compute stream: Megatron overlaps them
    only in the interleaved schedule (`--overlap-p2p-communication`, turned off for the
    others in megatron/training/arguments.py), DeepSpeed's PipelineEngine never."""
    mode = software.p2p_blocking
    return mode == "always" or (mode == "non_interleaved" and schedule != "interleaved_1f1b")


def with_impl(ops: tuple[Op, ...], impl: str) -> tuple[Op, ...]:
    """`ops` with their fused-attention kernels marked as the framework's implementation
    (`ComputeSpec.impl`: the hardware profile prices each implementation apart)."""
    return tuple(replace(op, impl=impl) if isinstance(op, ComputeSpec) and op.kind == "attention"
                 else op for op in ops)


def fused_cross_entropy(ops: tuple[Op, ...], e: int, passes: tuple[float, float] = (1.0, 2.0)
                        ) -> tuple[Op, ...]:
    """`ops` with the cross-entropy priced as one fused loss (framework `cross_entropy.fused`)
    that moves `passes` (forward, backward) reads + writes of each logit in the model dtype
    (`cross_entropy.fused_fwd_passes`, `.fused_bwd_passes`), where Megatron's fp32 passes
    (graph/ops/loss.py) move e + 36 and 12 + e bytes. flash-attn's Triton cross-entropy
    (Dao-AILab/flash-attention flash_attn/ops/triton/cross_entropy.py, the `fused_crossentropy`
    loss of llm-foundry; the default (1, 2)) reads each logit once and writes one fp32
    log-sum-exp per row, its backward reads the logits again and writes their gradient;
    Transformer Engine's (transformer_engine/pytorch/triton/cross_entropy.py, Megatron-Core's
    `cross_entropy_fusion_impl: te`; (3, 2)) reads them twice and writes their gradient in
    place in the forward, and scales it in place in the backward. FLOPs unchanged. What
    either keeps for the backward is e bytes per logit, not the fp32 softmax (the head
    block's saved set says the same, `model_program`)."""
    fwd, bwd = passes
    out: list[Op] = []
    for op in ops:
        if isinstance(op, ComputeSpec) and op.name == "cross_entropy":
            logits = op.flops / CE_FWD_FLOPS
            op = replace(op, bytes_accessed=fwd * e * logits,
                         saved_bytes=min(op.saved_bytes, e * logits))
        elif isinstance(op, ComputeSpec) and op.name == "cross_entropy.bwd":
            op = replace(op, bytes_accessed=bwd * e * op.flops / CE_BWD_FLOPS)
        out.append(op)
    return tuple(out)


def imbalanced(ops: tuple[Op, ...], factor: float) -> tuple[Op, ...]:
    """The busiest expert-parallel rank's share under load imbalance `factor` (its tokens
    over the mean, model.moe.imbalance): its expert FFN kernels (`expert_*`) and its
    all-to-alls on `ep` (it receives, and sends back, `factor` times the balanced tokens)
    carry `factor` times the work; its own tokens' dispatch and combine do not change.
    An all-to-all, and the layer after it, end when their busiest member does: the load
    GShard bounds with the expert capacity (Lepikhin et al. 2021, Sec. 2.2), here taken
    as if the capacity did not bind (a dropless router, Megatron-Core's default)."""
    if factor == 1.0:
        return ops
    out: list[Op] = []
    for op in ops:
        if isinstance(op, CommSpec) and op.axis == "ep" and op.collective == "all_to_all":
            out.append(replace(op, bytes=op.bytes * factor))
        elif isinstance(op, ComputeSpec) and op.name.startswith("expert_"):
            mnk = op.gemm_mnk and (math.ceil(op.gemm_mnk[0] * factor),) + op.gemm_mnk[1:]
            out.append(replace(op, flops=op.flops * factor,
                               bytes_accessed=op.bytes_accessed * factor, gemm_mnk=mnk))
        else:
            out.append(op)
    return tuple(out)


def grouped_gemms(ops: tuple[Op, ...]) -> tuple[Op, ...]:
    """The expert FFN GEMMs (`expert_*`) marked as grouped GEMMs: Megatron-Core runs a
    mixture of experts' local experts as one grouped GEMM over their token groups
    (--moe-grouped-gemm, TEGroupedMLP / GroupedMLP), priced at the profile's
    `efficiency.grouped_gemm_fraction`."""
    return tuple(replace(op, grouped=True) if isinstance(op, ComputeSpec) and op.kind == "gemm"
                 and op.name.startswith("expert_") else op for op in ops)


def slot_fill(dims: GptDims) -> float:
    """Share of the expert slots a balanced routing fills: top_k * seq / (experts *
    capacity), the capacity factor's padding left out of the model FLOPs (1 without
    experts)."""
    if dims.experts == 0:
        return 1.0
    return dims.top_k * dims.seq / (dims.experts * dims.capacity)


def weight_casts(name: str, params: float, dtype: str) -> tuple[tuple[Op, ...], tuple[Op, ...]]:
    """(forward, backward) kernels of weights stored in another 16-bit dtype than the
    computation's (`model.param_dtype`): before its matmuls each weight is cast to the
    compute dtype (read 2, write 2 bytes per parameter: MindSpore's Dense casts its weight
    to compute_dtype on every call, mindformers configs with param_init_type float16 and
    compute_dtype bfloat16), and after the backward its gradient is cast back (2 + 2).
    Nothing without parameters."""
    if params <= 0:
        return (), ()
    n = float(params)
    return ((ComputeSpec(name, "elementwise", n, 4.0 * n, dtype, "fwd"),),
            (ComputeSpec(f"{name}.bwd", "elementwise", n, 4.0 * n, dtype, "bwd"),))


def gathered_head_input(ops: tuple[Op, ...], e: float, tensor: int
                        ) -> tuple[tuple[Op, ...], float]:
    """The head's ops with the output layer keeping its all-gathered input (m x k of its
    GEMM, the whole sequence) instead of its sequence-parallel shard (1 / `tensor` of it),
    and the bytes that adds: torch's tensor parallelism (torch/distributed/tensor/parallel/
    style.py ColwiseParallel._prepare_input_fn redistributes the Shard(1) input to
    Replicate() before F.linear, whose autograd saves that input; torchtitan's output layer
    is ColwiseParallel(input_layouts=Shard(1)), parallelize_llama.py apply_tp) where
    Megatron-Core keeps the shard and gathers it again in the backward."""
    out: list[Op] = []
    more = 0.0
    for op in ops:
        mnk = getattr(op, "gemm_mnk", None)
        if tensor > 1 and isinstance(op, ComputeSpec) and op.name == "lm_head" and mnk:
            extra = float(mnk[0] * mnk[2]) * e * (1.0 - 1.0 / tensor)
            op = replace(op, saved_bytes=op.saved_bytes + extra)
            more += extra
        out.append(op)
    return tuple(out), more
