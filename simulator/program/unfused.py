"""Kernels a training stack leaves unfused: their memory traffic in every transformer layer.

The planned layer prices each operator as one kernel of the fused stacks (a bf16 norm that
reads and writes the hidden state once, SwiGLU as one pass, no separate rotary embedding:
Megatron's and Transformer Engine's fusions). A stack that runs, say, the norm in fp32
between two Casts or the rotary embedding as separate fp32 ops moves more bytes; its
framework profile states them as passes (`framework.schema.UnfusedPass`): bytes read plus
written per element of a tensor of the layer, counted op by op from the stack's code.

Each pass is one memory-bound kernel per direction on one device's share of one micro-batch
(a pass that names an FFN `activation` only for models with it, a `grouped_query_only` one
only for models with fewer key/value heads than query heads):

    elements = count x tokens x width,   tokens = micro_batch x seq / context
    hidden:   width = hidden (/ tp with sequence parallel: the norm runs on the sequence slice)
    heads:    width = heads x head_dim / tp;   kv_heads: kv_heads x head_dim / tp
    ffn:      width = ffn_hidden / tp
    bytes     = elements x fwd_bytes (forward) or x bwd_bytes (backward)

priced like every element-wise kernel, max(bytes / HBM, elements / vector) + launch
(`cost.compute`): at these intensities the HBM roof. Forward passes join the layer's
forward, so a full recompute runs them again, as it re-runs the stack's forward.

A pass's `saved_bytes` is what its kernels keep for the backward beyond the fused layer's
saved set, per element (`unfused_saved_bytes`: elements x saved_bytes summed over the passes):
torchtitan's fp32 RMSNorm keeps x.float() (4 bytes) beside its bf16 output, where a fused
norm keeps its bf16 input; an eager SwiGLU keeps SiLU's output for the Mul (2 bytes per FFN
element); repeat_kv hands the attention the repeated keys and values, which it keeps instead
of the key/value heads. Measured tensor by tensor on one layer by
`benchmarks/device/saved_tensors.py` (benchmarks/data/measured/h200-saved-tensors-2026-11-28.json).
"""

from __future__ import annotations

from simulator.config.framework.schema import UnfusedPass
from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import ComputeSpec
from simulator.models.transformer import transformer_model

__all__ = ["unfused_elements", "unfused_ops", "unfused_saved_bytes"]


def unfused_elements(scenario: Scenario, tensor: str) -> int:
    """Elements of one device's share of one micro-batch's `tensor` (see the module doc)."""
    m, p = transformer_model(scenario.model), scenario.parallel
    tokens = scenario.training.micro_batch_size * m.seq_length // p.context
    tp = p.tensor
    width = {"hidden": m.hidden_size // (tp if p.sequence_parallel else 1),
             "heads": m.num_heads * m.head_size // tp,
             "kv_heads": m.kv_heads * m.head_size // tp,
             "ffn": m.ffn // tp}[tensor]
    return tokens * width


def unfused_ops(scenario: Scenario, passes: tuple[UnfusedPass, ...], dtype: str
                ) -> tuple[tuple[ComputeSpec, ...], tuple[ComputeSpec, ...]]:
    """(forward, backward) element-wise kernels of `passes` for one layer, one micro-batch."""
    fwd: list[ComputeSpec] = []
    bwd: list[ComputeSpec] = []
    for ps in passes:
        if not _applies(scenario, ps):
            continue
        n = float(ps.count * unfused_elements(scenario, ps.tensor))
        if ps.fwd_bytes > 0:
            fwd.append(ComputeSpec(f"unfused.{ps.name}", "elementwise", n, n * ps.fwd_bytes,
                                   dtype, "fwd"))
        if ps.bwd_bytes > 0:
            bwd.append(ComputeSpec(f"unfused.{ps.name}.bwd", "elementwise", n,
                                   n * ps.bwd_bytes, dtype, "bwd"))
    return tuple(fwd), tuple(bwd)


def _applies(scenario: Scenario, ps: UnfusedPass) -> bool:
    m = transformer_model(scenario.model)
    if ps.activation is not None and getattr(m, "ffn_activation", None) != ps.activation:
        return False
    return not (ps.grouped_query_only and not m.kv_heads < m.num_heads)


def unfused_saved_bytes(scenario: Scenario, passes: tuple[UnfusedPass, ...]) -> float:
    """Bytes one layer keeps for its backward beyond the fused layer's saved set, one
    device's share of one micro-batch (see the module doc)."""
    return sum(ps.count * unfused_elements(scenario, ps.tensor) * ps.saved_bytes
               for ps in passes if ps.saved_bytes and _applies(scenario, ps))
