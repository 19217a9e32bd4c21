"""GPT-OSS's experts: the kernels a clamped, biased gated activation adds to an MoE layer.

What Megatron-Core runs (core_v0.15.0 as in Megatron-Bridge 25.11, submodule 92c8482e;
Megatron-Bridge `GPTOSSProvider`: `activation_func` quick_gelu, `glu_linear_offset` 1.0,
`activation_func_clamp_value` 7.0, `add_bias_linear`, `bias_activation_fusion`):

- **The clamps** (megatron/core/fusions/fused_bias_geglu.py `weighted_bias_quick_geglu_impl`,
  called by `TEGroupedMLP.forward`'s `bias_act_func`, megatron/core/transformer/moe/
  experts.py): before the fused activation, in eager PyTorch,
  `x_glu.clamp(max=v)`, `x_linear.clamp(min=-v, max=v)` and `torch.cat` of the two halves;
  the fused quick-GeGLU (with the fc1 bias, the `+ 1` offset and the routing weights) then
  runs as before. Per element of the fc1 output (N x 2f: N routed token rows, f the expert
  width): the two clamps read and write their half (1 + 1), the cat reads and writes all of
  it (1 + 1): 4 accesses forward. Backward (autograd): the cat's gradient is two slices
  (views); each clamp's backward reads its saved input and the gradient and writes the
  gradient (3 per half element); `chunk`'s backward concatenates the two halves' gradients
  (1 + 1): 5 accesses. Under `recompute_modules: [moe_act]` (`CheckpointWithoutOutput`)
  the backward re-runs the forward's 4.
- **The fc2 bias** (`TEGroupedMLP._apply_bias`): `torch.cat([t + b * p for each local
  expert's rows])`: per element of the expert output (N x h) `b * p` writes 1, `t + bp`
  reads 2 and writes 1, the cat reads and writes 1 + 1: 6 accesses forward, in the model
  dtype (the router's probabilities: `moe_router_dtype` unset). Backward: the cat's and
  the add's gradients pass through (slices, no kernel); `b * p` gives the bias gradient
  (grad * p, then a sum over rows: 1 + 1 + 1) and the probabilities' (grad * b, a sum over
  h: 1 + 1 + 1); the split of the fc2 output concatenates its gradient slices (1 + 1):
  8 accesses.

Each is one memory-bound kernel per direction on one device's share of one micro-batch,
priced like every element-wise kernel (`cost.compute`): N = micro_batch x seq / context x
top_k rows (the busiest rank's `imbalance` times that: `stack_ops.imbalanced`, as for the
expert GEMMs, by the `expert_` names), over tensor ranks when the experts are not
tensor-split (expert tensor 1: the tensor ranks hold different tokens), the width 2f over
the expert tensor degree otherwise.

The fc1 bias is read inside the fused activation (no kernel of its own); the attention's
output-projection bias and the router's are not priced (one h-wide and one expert-wide add).
"""

from __future__ import annotations

from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.cost.specs import ComputeSpec
from simulator.models.transformer import transformer_model
from simulator.program.program import Op

__all__ = ["CLAMP_FWD", "CLAMP_BWD", "BIAS_FWD", "BIAS_BWD", "LAUNCHES", "clamped_glu_ops",
           "expert_rows", "in_place"]

# element accesses (reads + writes) per element of the tensor each pass runs over
CLAMP_FWD = 4  # two half clamps (1 + 1) and the cat (1 + 1), per fc1-output element
CLAMP_BWD = 5  # two half clamp backwards (3 per half element: 1.5) and chunk's cat (1 + 1)
BIAS_FWD = 6   # b * p (1), t + bp (2 + 1), the cat (1 + 1), per fc2-output element
BIAS_BWD = 8   # grad * p and its row sum (3), grad * b and its h sum (3), split's cat (2)

# kernels the host launches for each op (`lower.moe_host.launches`): (per local expert,
# once). The clamps: two clamps and the cat (forward and its re-run), two clamp backwards
# and chunk's cat (backward). The fc2 bias: b * p and t + bp per local expert and the cat
# (forward); per local expert grad * p and its sum, grad * b and its sum, and the split's
# cat (backward)
LAUNCHES = {"expert_act_clamp": (0, 3), "expert_act_clamp.recompute": (0, 3),
            "expert_act_clamp.bwd": (0, 3), "expert_fc2_bias": (2, 1),
            "expert_fc2_bias.bwd": (4, 1)}

Pair = tuple[tuple[ComputeSpec, ...], tuple[ComputeSpec, ...]]


def expert_rows(scenario: Scenario) -> tuple[float, int, int]:
    """(routed token rows, fc1-output width, fc2-output width) of one device's share of one
    micro-batch's expert layer (see the module doc)."""
    m, p = transformer_model(scenario.model), scenario.parallel
    assert m.moe is not None
    tokens = scenario.training.micro_batch_size * m.seq_length / p.context
    etp = p.tensor if p.expert_tensor is None else p.expert_tensor
    rows = tokens * m.moe.top_k / (p.tensor // etp)
    return rows, 2 * m.moe.expert_ffn(m.ffn) // etp, m.hidden_size


def clamped_glu_ops(scenario: Scenario, dtype: str) -> Pair:
    """(forward, backward) element-wise kernels of one MoE layer's clamped activation and
    expert fc2 bias (module doc) for one micro-batch; empty for a model without them."""
    m = transformer_model(scenario.model)
    moe = m.moe
    if moe is None or (moe.activation_clamp is None and not moe.expert_bias):
        return (), ()
    e = DTYPE_BYTES[dtype]
    rows, fc1, fc2 = expert_rows(scenario)
    recompute = "moe_act" in (scenario.parallel.recompute_modules or ())
    fwd: list[ComputeSpec] = []
    bwd: list[ComputeSpec] = []
    if moe.activation_clamp is not None:
        n = rows * fc1
        clamp = ComputeSpec("expert_act_clamp", "elementwise", n, n * CLAMP_FWD * e, dtype)
        fwd.append(clamp)
        if recompute:
            bwd.append(ComputeSpec("expert_act_clamp.recompute", "elementwise", n,
                                   n * CLAMP_FWD * e, dtype, "bwd"))
        bwd.append(ComputeSpec("expert_act_clamp.bwd", "elementwise", n, n * CLAMP_BWD * e,
                               dtype, "bwd"))
    if moe.expert_bias:
        n = rows * fc2
        fwd.append(ComputeSpec("expert_fc2_bias", "elementwise", n, n * BIAS_FWD * e, dtype))
        bwd.append(ComputeSpec("expert_fc2_bias.bwd", "elementwise", n, n * BIAS_BWD * e,
                               dtype, "bwd"))
    return tuple(fwd), tuple(bwd)


# where each kernel runs in a layer's ops: (anchor op, before or after it, the kernels). The
# clamps run just before the fused activation (weighted_bias_quick_geglu_impl), the bias add
# just after fc2 (TEGroupedMLP._apply_bias); backward, the bias add's gradient and the
# recomputed clamps (CheckpointWithoutOutput's hook on fc2's output) before fc2's
# backward, the clamps' gradient after the activation's
_PLACES = (("expert_act", "before", ("expert_act_clamp",)),
           ("expert_fc2", "after", ("expert_fc2_bias",)),
           ("expert_fc2.dgrad", "before", ("expert_fc2_bias.bwd", "expert_act_clamp.recompute")),
           ("expert_act.bwd", "after", ("expert_act_clamp.bwd",)))


def in_place(ops: tuple[Op, ...], kernels: tuple[ComputeSpec, ...]) -> tuple[Op, ...]:
    """`ops` of a block with `kernels` (`clamped_glu_ops`, one MoE layer's) inserted where
    the stack runs them, once per MoE layer of the block (every anchor op); kernels with no
    anchor in `ops` are appended."""
    by_name = {k.name: k for k in kernels}
    placed: set[str] = set()
    out: list[Op] = []
    for op in ops:
        for anchor, where, names in _PLACES:
            if op.name != anchor:
                continue
            found = tuple(by_name[n] for n in names if n in by_name)
            placed.update(k.name for k in found)
            out.extend(found if where == "before" else ())
            out.append(op)
            out.extend(found if where == "after" else ())
            break
        else:
            out.append(op)
    return tuple(out) + tuple(k for k in kernels if k.name not in placed)
