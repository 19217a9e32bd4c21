"""A YaRN rotary embedding as Megatron-Core runs it without its fused kernel: the eager ops of
`_apply_rotary_pos_emb_bshd`, once for the queries and once for the keys of every layer.

Why unfused (the framework profile's `fused_kernels.yarn_rope_unfused`, with its source):
Megatron-Bridge 25.11 turns `apply_rope_fusion` off for a YaRN model
(`GPTModelProvider.provide` -> `validate_rope_fusion_compatibility`: position_embedding_type
"yarn" is not "rope"), and its Megatron-LM (submodule 0d8e0714) would fall back anyway:
megatron/core/models/common/embeddings/rope_utils.py `apply_rotary_pos_emb` takes Transformer
Engine's fused kernel only for `mscale == 1.0`, and attention.py passes YaRN's concentration
factor, 0.1 ln(factor) + 1 (yarn_rotary_pos_embedding.py `_yarn_get_mscale`).

`_apply_rotary_pos_emb_bshd(t, freqs, mscale)` with the rotary width equal to the head size
(GPT-OSS: rotary_percent 1.0, so `t_pass = t[..., rot_dim:]` is empty) runs, per call on a
tensor t of N elements (e bytes each; freqs [s, 1, 1, d] fp32, computed once per step and
cached by `YarnRotaryEmbedding.forward`'s lru_cache):

forward, element accesses (reads + writes) per element of t
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)   3 kernels on s x d fp32 (tiny)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)   3 kernels on s x d fp32 (tiny)
    t * cos_                                         1 + 1
    _rotate_half: -x2 (a half), torch.cat((-x2, x1)) 0.5 + 0.5, then 1 + 1
    ... * sin_                                       1 + 1
    (t * cos_) + (...)                               2 + 1
    torch.cat((t, t_pass), dim=-1)                   1 + 1          = 12 accesses, 6 kernels

backward (autograd), per element of t
    grad * sin_ (MulBackward0)                       1 + 1
    -grad (NegBackward0, a half)                     0.5 + 0.5
    chunk's backward: cat of the halves' gradients   1 + 1
    grad * cos_ (MulBackward0)                       1 + 1
    the two gradients of t summed (InputBuffer add)  2 + 1
    t = input[..., :d]: SliceBackward0 (slice_backward: zeros, then copy_ into the slice)
                                                     1, then 1 + 1
    t_pass = input[..., d:]: SliceBackward0 of an empty gradient: zeros   1
    the two slices' gradients summed                 2 + 1          = 17 accesses, 9 kernels

(the cat and add backwards pass views: no kernel). Each is one memory-bound kernel, priced
like every element-wise kernel (`cost.compute`), on one device's share of one micro-batch:
N = micro_batch x seq / context x heads x head_dim / tensor for the queries, kv_heads for the
keys. They replace the layer's fused rotary kernels (`rope`, `rope.bwd`: 2 + 2 and 3 + 3
accesses on queries and keys together) in place; the host launches each (`lower.moe_host`,
`price_ops`). Nothing more is kept for the backward than the fused kernel keeps (the
multiplications keep the cached cos_ and sin_).
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.config.framework.schema import Software
from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.cost.specs import ComputeSpec
from simulator.models.transformer import transformer_model
from simulator.program.program import Op

__all__ = ["FWD", "BWD", "TABLE_FWD", "yarn_rope_ops", "unfused_rope", "applies", "yarn_rope"]

Ops = tuple[Op, ...]

# (kernel, element accesses per element of t) in launch order
FWD = (("mul_cos", 2.0), ("neg", 1.0), ("cat_rotate", 2.0), ("mul_sin", 2.0), ("add", 3.0),
       ("cat_pass", 2.0))
BWD = (("mul_sin.bwd", 2.0), ("neg.bwd", 1.0), ("split.bwd", 2.0), ("mul_cos.bwd", 2.0),
       ("sum_t", 3.0), ("slice.zeros", 1.0), ("slice.copy", 2.0), ("slice_pass.zeros", 1.0),
       ("sum_input", 3.0))
# the cos / sin tables: cos (or sin) reads and writes fp32 (4 + 4), * mscale (4 + 4), the cast
# to t.dtype (4 + e), per element of freqs [s, d]
TABLE_FWD = ("cos", "cos_scale", "cos_cast", "sin", "sin_scale", "sin_cast")


def applies(scenario: Scenario, software: Software) -> bool:
    """Whether the stack runs this model's rotary embedding unfused (YaRN, module doc)."""
    m = transformer_model(scenario.model)
    return software.yarn_rope_unfused and m.yarn_factor is not None and m.positions == "rope"


def yarn_rope_ops(scenario: Scenario, dtype: str) -> tuple[tuple[ComputeSpec, ...],
                                                            tuple[ComputeSpec, ...]]:
    """(forward, backward) kernels of one layer's unfused YaRN rotation, one micro-batch:
    the queries' call, then the keys' (module doc)."""
    m, p = transformer_model(scenario.model), scenario.parallel
    e = DTYPE_BYTES[dtype]
    seq = m.seq_length // p.context
    tokens = scenario.training.micro_batch_size * seq
    fwd: list[ComputeSpec] = []
    bwd: list[ComputeSpec] = []
    for name, heads in (("q", m.num_heads), ("k", m.kv_heads)):
        n = tokens * heads // p.tensor * m.head_size
        table = seq * m.head_size
        for k, step in enumerate(TABLE_FWD):
            written = e if step.endswith("_cast") else 4
            fwd.append(ComputeSpec(f"rope_{name}.{step}", "elementwise", table,
                                   table * (4 + written), "fp32" if k % 3 < 2 else dtype))
        fwd += [ComputeSpec(f"rope_{name}.{step}", "elementwise", n, n * acc * e, dtype)
                for step, acc in FWD]
        bwd += [ComputeSpec(f"rope_{name}.{step}", "elementwise", n, n * acc * e, dtype, "bwd")
                for step, acc in BWD]
    return tuple(fwd), tuple(bwd)


def unfused_rope(ops: tuple[Op, ...], kernels: tuple[ComputeSpec, ...], fused: str
                 ) -> tuple[Op, ...]:
    """`ops` with every fused rotary kernel named `fused` ('rope' forward, 'rope.bwd'
    backward) replaced in place by `kernels`."""
    out: list[Op] = []
    for op in ops:
        out.extend(kernels if isinstance(op, ComputeSpec) and op.name == fused else (op,))
    return tuple(out)


def yarn_rope(scenario: Scenario, software: Software, dtype: str
              ) -> Callable[[Ops, Ops], tuple[Ops, Ops]]:
    """What the stack makes of a layer's (forward, backward) ops: the fused rotary kernels
    replaced by the unfused YaRN rotation where it `applies`, the ops unchanged otherwise."""
    if not applies(scenario, software):
        return lambda fwd, bwd: (fwd, bwd)
    f, b = yarn_rope_ops(scenario, dtype)
    return lambda fwd, bwd: (unfused_rope(fwd, f, "rope"), unfused_rope(bwd, b, "rope.bwd"))
