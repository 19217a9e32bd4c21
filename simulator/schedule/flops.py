"""FLOPs of one iteration, the numerators of MFU and HFU.

Model FLOPs count the matrix multiplications of the model's own forward and backward for the
global batch, without recompute: Narayanan et al. 2021 Eq. 3 without its recompute term,
72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for a GPT with 4h FFN, the count Megatron-LM logs and
PaLM's MFU uses (Chowdhery et al. 2022, App. B). Hardware FLOPs add the recomputed forward.
Per-device GEMM FLOPs times t is the whole model's: Megatron shards every GEMM over t.
"""

from __future__ import annotations

from simulator.scenario.schema import Scenario
from simulator.schedule.program import TransformerProgram, total_flops

__all__ = ["iteration_flops"]


def _matrix(ops: tuple) -> float:
    """FLOPs of the matrix-unit kernels: GEMMs and fused attention (counted at its model
    FLOPs, QK^T and PV in full, as Megatron-LM's formula counts them)."""
    return total_flops(ops, "gemm") + total_flops(ops, "attention")


def iteration_flops(scenario: Scenario, prog: TransformerProgram) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one iteration over the global batch."""
    t = scenario.parallel.tensor
    layers = getattr(scenario.model, "layers", 1)
    replicas = scenario.grad_accum_steps * scenario.parallel.data  # micro-batches per step
    per_micro = layers * _matrix(prog.layer_fwd + prog.layer_bwd) + _matrix(
        prog.embed_fwd + prog.embed_bwd + prog.head_fwd + prog.head_bwd)
    recompute = layers * _matrix(prog.layer_recompute)
    model = t * replicas * per_micro
    return model, model + t * replicas * recompute
