"""The costs of torchtitan's op-level selective recompute (`every_second_mm`; which ops each
policy re-runs, and the sources, are `models.recompute`): the ops run again and the bytes
kept. Every other op runs again but the matmuls counted 1, 3, 5, ... in forward order and
the fused attention: in a Llama block the matmuls run wq, wk, wv, wo, w1, w3, w2
(w2(silu(w1(x)) * w3(x))), so wk, wo and w3 are recomputed; with a two-matrix MLP (wq, wk,
wv, wo, w1, w2), wk, wo and w2.
"""

from __future__ import annotations

import math
from dataclasses import replace

from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.models.recompute import Select, saved_mms
from simulator.program.program import Op
from simulator.sharding.plan import ShardingPlan

__all__ = ["sac_recompute", "sac_cached_bytes"]

_MM_KERNEL = {"proj": "proj", "fc3_mm": "fc_up", "fc2": "fc2"}


def sac_cached_bytes(plan: ShardingPlan, extra: dict[str, float], select: Select,
                     recomputed: Select, itemsize: float) -> float:
    """Bytes one device keeps per layer under `every_second_mm`: torch's selective
    checkpointing (torch/utils/checkpoint.py, create_selective_checkpoint_contexts) caches
    the outputs of the ops its policy marks MUST_SAVE and stores nothing else of the block
    (the non-reentrant checkpoint drops every saved tensor and replays the forward in the
    backward), so the layer keeps the outputs of its kept ops (with their extra saved
    state, `extra`: the attention's statistics), not the inputs they save for their own
    backward (a norm's output feeding a kept matmul is made again). The block's input,
    which the checkpoint keeps, is added by the caller."""
    g, mesh = plan.graph, plan.mesh
    out = 0.0
    for p in plan.ops:
        name = p.op.name
        if select(name) and not recomputed(name):
            t = g.tensors[p.op.output]
            out += itemsize * math.prod(plan.layouts[t.name].local_shape(t.shape, mesh))
            out += extra.get(name, 0.0)
    return out


def sac_recompute(fwd: tuple[Op, ...], gated: bool, heads: int, kv_heads: int
                  ) -> tuple[Op, ...]:
    """The kernels `every_second_mm` runs again, in forward order: every layer kernel but
    the kept matmuls' and the fused attention's, and of the fused qkv kernel the key
    projection's share, kv_heads / (heads + 2 kv_heads) of its FLOPs and output columns."""
    kept_mms = saved_mms(gated)
    redone = {k for r, k in _MM_KERNEL.items() if r not in kept_mms and (gated or r != "fc3_mm")}
    gemm_kernels = {"qkv", "proj", "fc_gate", "fc_up", "fc1", "fc2"}
    out: list[Op] = []
    for op in fwd:
        if isinstance(op, CommSpec):
            # the policy keeps reduce-scatter outputs (`reduce_scatter_tensor` is in its save
            # list); the sequence-parallel all-gathers feed the recomputed matmuls again
            if op.collective == "all_gather":
                out.append(replace(op, phase="recompute"))
            continue
        assert isinstance(op, ComputeSpec)
        if op.name == "qkv":
            share = kv_heads / (heads + 2 * kv_heads)
            mnk = op.gemm_mnk and (op.gemm_mnk[0], max(1, math.ceil(op.gemm_mnk[1] * share)),
                                   op.gemm_mnk[2])
            op = replace(op, name="qkv.k", flops=op.flops * share,
                         bytes_accessed=op.bytes_accessed * share, gemm_mnk=mnk)
        elif op.kind == "attention" or (op.name in gemm_kernels and op.name not in redone):
            continue
        out.append(replace(op, phase="recompute", saved_bytes=0.0))
    return tuple(out)
