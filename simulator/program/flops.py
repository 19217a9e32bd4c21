"""FLOPs of one iteration, the numerators of MFU and HFU.

Model FLOPs count the matrix multiplications of the model's own forward and backward for the
global batch, without recompute: Narayanan et al. 2021 Eq. 3 without its recompute term,
72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for a GPT with 4h FFN, the count Megatron-LM logs and
PaLM's MFU uses (Chowdhery et al. 2022, App. B). Hardware FLOPs add the recomputed forward.
Per-device GEMM FLOPs times t is the whole model's: Megatron shards every GEMM over t (and
over the context-parallel ranks, each holding 1/cp of the tokens).
A mixture of experts counts each token's top_k experts in the model FLOPs (the slots the
capacity factor pads, `expert_slot_fill`, only in the hardware FLOPs); with expert
parallelism each device runs experts/ep experts on ep times the tokens, the same FLOPs.
"""

from __future__ import annotations

from simulator.config.scenario.schema import Scenario
from simulator.program.program import Block, Program, compute_ops, total_flops

__all__ = ["iteration_flops"]


def _matrix(ops: tuple, expert_fill: float = 1.0) -> float:
    """FLOPs of the matrix-unit kernels: GEMMs and fused attention (counted at its model
    FLOPs, QK^T and PV in full, as Megatron-LM's formula counts them); the expert GEMMs
    times `expert_fill`."""
    total = total_flops(ops, "gemm") + total_flops(ops, "attention")
    experts = sum(op.flops for op in compute_ops(ops)
                  if op.kind == "gemm" and op.name.startswith("expert_"))
    return total - (1.0 - expert_fill) * experts


def _replicated(block: Block) -> float:
    """FLOPs of the block's kernels every tensor-parallel rank runs whole (forward and
    backward: `Block.tp_replicated`)."""
    return sum(op.flops for op in compute_ops(block.fwd + block.bwd)
               if op.kind == "gemm" and op.name.split(".")[0] in block.tp_replicated)


def iteration_flops(scenario: Scenario, prog: Program) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one iteration over the global batch, of a
    transformer's program (its embedding, repeated layer and head). A kernel every
    tensor-parallel rank runs whole counts once in the model FLOPs, on every rank in the
    hardware FLOPs."""
    t = scenario.parallel.tensor * scenario.parallel.context  # cp splits every token
    once = 1.0 - 1.0 / scenario.parallel.tensor  # the share of t too many for those
    embed, head = prog.block("embed"), prog.block("head")
    replicas = scenario.grad_accum_steps * scenario.parallel.data  # micro-batches per step
    ends = _matrix(embed.fwd + embed.bwd + head.fwd + head.bwd)
    extra = once * (_replicated(embed) + _replicated(head))
    # the program's expert kernels are the busiest rank's, `expert_load` times the mean
    mean = 1.0 / prog.expert_load
    model = executed = 0.0
    for layer in prog.cut():
        ops = layer.fwd + layer.bwd
        model += layer.repeat * (_matrix(ops, prog.expert_slot_fill * mean)
                                 - once * _replicated(layer))
        executed += layer.repeat * _matrix(ops + layer.recompute, mean)
    return t * replicas * (model + ends - extra), t * replicas * (executed + ends)
