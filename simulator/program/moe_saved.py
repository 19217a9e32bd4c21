"""What a MoE layer keeps for its backward under two training-recipe settings
(`model.moe.probs_in_activation`, `training.fp8_saved_activations`).

- Routing weights applied in the experts' activation: y = W2 (act(x W1) * p) instead of
  p * W2 act(x W1), the same function (W2 is linear). The combine's weighted sum then keeps
  nothing for its backward: the weights' gradient comes from the activation's backward
  (sum of dY_act * act), whose inputs are kept (or recomputed under `moe_act`); the
  combine no longer keeps the experts' outputs (k h elements a token). Megatron-Core
  >= 0.13 does this in its grouped experts ("moving the probs multiplication from
  unpermutation to activation function of GroupedMLP", megatron/core/transformer/moe/
  README.md, MCore v0.13; experts.py `activation_func_with_probs`). The gates stay kept
  (the activation's backward reads them), as they are by the combine.
- FP8-cached activations (DeepSeek-V3, arXiv:2412.19437 Sec. 3.3.3, "Low-Precision
  Storage"): `moe_act_input`, the inputs of the MoE SwiGLU (routed and shared experts),
  "stored in FP8 with our fine-grained quantization method" (1x128 tiles with an fp32
  scale: 1 + 4/128 bytes an element); `attention_output`, the input of the linear after
  the attention operator, kept by it and by the attention's backward, in DeepSeek's E5M6
  (12 bits) with power-of-two scales (an E8M0 byte a 128-element tile): 1.5 + 1/128 bytes.

The collectives, FLOPs and kernels are those `verify` proves; only the saved bytes change.
"""

from __future__ import annotations

from simulator.sharding.lower import Saved, kernel_of
from simulator.sharding.plan import ShardingPlan

__all__ = ["CACHED_BYTES", "probs_in_activation", "weights_in_activation", "fp8_cached"]

# bytes an element of each FP8-cached activation, and the kernels that make it
CACHED_BYTES = {"moe_act_input": 1 + 4 / 128, "attention_output": 1.5 + 1 / 128}
_MADE_BY = {"moe_act_input": ("expert_fc1", "shared_fc1"),
            "attention_output": ("flash_attention", "context")}


def weights_in_activation(scenario_says: bool | None, stack_does: bool) -> bool:
    """Whether the routing weights multiply inside the experts' activation: the scenario's
    `model.moe.probs_in_activation` where it states one, else what the framework profile's
    stack does (`Software.moe_probs_in_activation`: Megatron-Core >= 0.13 does, core_r0.8's
    `unpermute(..., probs=self.probs)` weights the combine instead)."""
    return stack_does if scenario_says is None else scenario_says


def probs_in_activation(sv: Saved, plan: ShardingPlan) -> Saved:
    """`sv` without the combine's copy of the experts' outputs (module doc)."""
    combine = {p.op.name for p in plan.ops if kernel_of(p) == "moe_combine"}
    down = {p.op.name for p in plan.ops if kernel_of(p) == "expert_fc2"}
    tensors = {}
    for name, (nbytes, producer, keepers) in sv.tensors.items():
        if producer in down:
            keepers = tuple(k for k in keepers if k not in combine)
            if not keepers:
                continue
        tensors[name] = (nbytes, producer, keepers)
    return Saved(tensors, dict(sv.extra))


def fp8_cached(sv: Saved, plan: ShardingPlan, which: tuple[str, ...], itemsize: float
               ) -> Saved:
    """`sv` with the activations named in `which` (`CACHED_BYTES`) kept at their cached
    width instead of `itemsize` bytes an element."""
    made = {p.op.name: kernel_of(p) for p in plan.ops}
    width = {k: CACHED_BYTES[w] for w in which for k in _MADE_BY[w]}
    tensors = {name: ((nbytes / itemsize * width[made[producer]])
                      if made.get(producer) in width else nbytes, producer, keepers)
               for name, (nbytes, producer, keepers) in sv.tensors.items()}
    return Saved(tensors, dict(sv.extra))
