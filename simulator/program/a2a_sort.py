"""The all-to-all token dispatcher's second permutation: tokens received from the expert
ranks sorted by local expert before the experts, and put back in rank order after them.

What Megatron-Core runs (`MoEAlltoAllTokenDispatcher`, megatron/core/transformer/moe/
token_dispatcher.py at 92c8482e, the 3rdparty/Megatron-LM submodule of Megatron-Bridge
@00b7660b, the 25.11 recipes' stack; the same at core_v0.15.0):
the all-to-all delivers each rank's tokens grouped by source rank, then by expert; with more
than one local expert `dispatch_postprocess` ("Permutation 2: Sort tokens by local expert")
reorders them expert-major and `combine_preprocess` ("Unpermutation 2") restores the rank
order before the combine's all-to-all. Dropless, `sort_chunks_by_idxs` with
`moe_permute_fusion` is Transformer Engine's `moe_sort_chunks_by_index_with_probs`
(transformer_engine/pytorch/permutation.py `_moe_chunk_sort`, v2.9: the Triton
`make_chunk_sort_map` then `sort_chunks_by_map`, which moves the tokens and their routing
probabilities; its backward one `sort_chunks_by_map` with the inverse map); with a capacity
factor (`drop_and_pad`) a `transpose(0, 1).contiguous()` copy each way.

Per received row (one device's share of one micro-batch: micro_batch x seq / context x
top_k rows over the tensor ranks when the experts are not tensor-split, as
`clamped_glu.expert_rows`), the tokens' h elements are read and written once (2 x h x e
bytes) and the probabilities' (2 x 4 bytes, fp32) with them in the dispatch's sort; the
sort map reads the chunk sizes and writes one int32 per row. Forward: the sort before the
experts, the unsort after them; backward: the unsort's gradient before the experts'
backward, the sort's after it. Named `expert_` so the busiest rank's load scales them
(`stack_ops.imbalanced`) and the host rule counts them with the experts (`lower.moe_host`).

Only the all-to-all dispatcher (`parallel.expert_dispatcher: alltoall`) has it, and only with
more than one local expert (`if self.num_local_experts > 1` around both). The flex
dispatcher (`MoEFlexTokenDispatcher`, `deepep` / `hybridep`) has none: HybridEP's
`dispatch_with_permute` permutes for the experts inside its fused dispatch and its combine
unpermutes in the same kernel (`_HybridEPManager`, "permute tokens for experts in single
step"); DeepEP's manager runs one `permute` from the received tokens to expert-major order
(`_DeepepManager.get_permuted_hidden_states_by_experts`), the counterpart of the all-to-all
dispatcher's first permutation, not of this sort.
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.config.scenario.schema import DTYPE_BYTES, Scenario
from simulator.cost.specs import ComputeSpec
from simulator.models.transformer import transformer_model
from simulator.program.clamped_glu import clamped_glu_ops, expert_rows
from simulator.program.clamped_glu import in_place as glu_in_place
from simulator.program.program import Op

__all__ = ["sort_ops", "in_place", "expert_extras", "PROBS_BYTES"]

PROBS_BYTES = 4  # the routing probabilities moved with the tokens (fp32)

Pair = tuple[tuple[ComputeSpec, ...], tuple[ComputeSpec, ...]]


def sort_ops(scenario: Scenario, dtype: str) -> tuple[Pair, Pair]:
    """((sort, unsort) forward kernels, (unsort, sort) backward kernels) of one MoE layer's
    second permutation for one micro-batch (module doc); empty where there is none: no
    mixture of experts, another dispatcher than the all-to-all, one local expert."""
    m, p = transformer_model(scenario.model), scenario.parallel
    moe = m.moe
    if moe is None or p.expert_dispatcher != "alltoall" or moe.experts // p.expert <= 1:
        return ((), ()), ((), ())
    e = DTYPE_BYTES[dtype]
    rows, _, h = expert_rows(scenario)
    tokens, probs = rows * h * 2 * e, rows * 2 * PROBS_BYTES

    def kernel(name: str, nbytes: float, phase: str = "fwd") -> ComputeSpec:
        return ComputeSpec(name, "copy", 0.0, nbytes, dtype, phase)  # type: ignore[arg-type]

    sort: tuple[ComputeSpec, ...]
    unsort: tuple[ComputeSpec, ...]
    if moe.dropless:  # the Triton map, then the move
        sort = (kernel("expert_sort_map", rows * 4.0), kernel("expert_sort", tokens + probs))
        unsort = (kernel("expert_unsort_map", rows * 4.0), kernel("expert_unsort", tokens))
    else:  # transpose(0, 1).contiguous()
        sort = (kernel("expert_sort", tokens + probs),)
        unsort = (kernel("expert_unsort", tokens),)
    back = ((kernel("expert_unsort.bwd", tokens, "bwd"),),
            (kernel("expert_sort.bwd", tokens + probs, "bwd"),))
    return (sort, unsort), back


def in_place(ops: tuple[Op, ...], before: tuple[ComputeSpec, ...],
             after: tuple[ComputeSpec, ...]) -> tuple[Op, ...]:
    """`ops` with `before` inserted ahead of every run of consecutive expert kernels
    (`expert_` compute ops, the all-to-alls around them outside) and `after` behind it."""
    out: list[Op] = []
    inside = False
    for op in ops:
        expert = isinstance(op, ComputeSpec) and op.name.startswith("expert_")
        if expert and not inside:
            out.extend(before)
        if inside and not expert:
            out.extend(after)
        out.append(op)
        inside = expert
    return tuple(out) + (after if inside else ())


Ops = tuple[Op, ...]


def expert_extras(scenario: Scenario, dtype: str) -> Callable[[Ops, Ops], tuple[Ops, Ops]]:
    """Puts one MoE layer's extra kernels in its (forward, backward) ops: GPT-OSS's clamped
    GLU (`clamped_glu`) and the all-to-all dispatcher's sort by local expert (`sort_ops`)."""
    glu, srt = clamped_glu_ops(scenario, dtype), sort_ops(scenario, dtype)

    def apply(fwd: Ops, bwd: Ops) -> tuple[Ops, Ops]:
        fwd, bwd = glu_in_place(fwd, glu[0]), glu_in_place(bwd, glu[1])
        return in_place(fwd, *srt[0]), in_place(bwd, *srt[1])
    return apply
