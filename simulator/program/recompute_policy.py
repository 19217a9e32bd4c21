"""Which ops of a transformer layer `parallel.recompute` drops after the forward and runs
again before the backward, by the stack's policy; `run` times and `verify` executes the
same set.

- `full`: every op of the layer (Megatron-LM --recompute-granularity full; PyTorch
  checkpoint_wrapper around each block).
- `selective`, policy `attention_core`: the attention core (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", Sec. 5; Megatron's
  --recompute-granularity selective).
- `selective`, policy `every_second_mm`: torchtitan's op-level selective checkpointing
  (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py, `_custom_policy`:
  "Saves output of all compute ops, except every second mm"): the outputs of the matmuls
  counted 1, 3, 5, ... in forward order and of the fused attention (SDPA) are kept; every
  other op (norms, element-wise, residual adds, the even-numbered matmuls) runs again. In a
  Llama block the matmuls run wq, wk, wv, wo, w1, w3, w2 (w2(silu(w1(x)) * w3(x))), so wk,
  wo and w3 are recomputed; with a two-matrix MLP (wq, wk, wv, wo, w1, w2), wk, wo and w2.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Literal

from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.program.program import Op

__all__ = ["recomputed_ops", "sac_recompute", "layer_role", "SelectivePolicy", "CORE_ROLES"]

Select = Callable[[str], bool]
SelectivePolicy = Literal["attention_core", "every_second_mm"]
CORE_ROLES = ("scores", "scale", "mask", "softmax", "attn_drop", "context", "attn")
# the layer's matmuls in forward order (the GPT graph's op roles); fc3_mm only when gated
_MM_ORDER = ("q_mm", "k_mm", "v_mm", "proj", "fc1_mm", "fc3_mm", "fc2")
# kernels (ComputeSpec names) of those matmuls; q, k and v share the fused `qkv` kernel
_MM_KERNEL = {"proj": "proj", "fc3_mm": "fc_up", "fc2": "fc2"}


def layer_role(name: str) -> str:
    """A name without its layer prefix (`l3.ln1.g` -> `ln1.g`)."""
    return re.sub(r"^l\d+\.", "", name)


def _saved_mms(gated: bool) -> frozenset[str]:
    order = [r for r in _MM_ORDER if gated or r != "fc3_mm"]
    return frozenset(r for i, r in enumerate(order) if i % 2 == 0)


def recomputed_ops(mode: str, policy: SelectivePolicy = "attention_core",
                   gated: bool = False) -> Select | None:
    """The GPT graph's ops (by name) recomputed under `mode` and the stack's selective
    `policy` (`gated`: the MLP has a gate matrix, SwiGLU); None for `none`."""
    def layer(n: str) -> bool:
        return re.match(r"l\d+\.", n) is not None

    if mode == "full":
        return layer
    if mode == "selective" and policy == "every_second_mm":
        kept = _saved_mms(gated) | {"attn"}
        return lambda n: layer(n) and layer_role(n) not in kept
    if mode == "selective":
        return lambda n: layer(n) and layer_role(n) in CORE_ROLES
    return None


def sac_recompute(fwd: tuple[Op, ...], gated: bool, heads: int, kv_heads: int
                  ) -> tuple[Op, ...]:
    """The kernels `every_second_mm` runs again, in forward order: every layer kernel but
    the kept matmuls' and the fused attention's, and of the fused qkv kernel the key
    projection's share, kv_heads / (heads + 2 kv_heads) of its FLOPs and output columns."""
    kept_mms = _saved_mms(gated)
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
