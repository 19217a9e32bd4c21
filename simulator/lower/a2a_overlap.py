"""Megatron-Core's expert-parallel communication overlap (`parallel.overlap.moe_a2a`:
TransformerConfig.overlap_moe_expert_parallel_comm with delay_wgrad_compute; Megatron-Bridge
25.11's `moe_a2a_overlap`, scripts/performance/utils/overrides.py
`_set_moe_a2a_overlap_overrides`).

The schedule (megatron/core/pipeline_parallel/schedules.py): the steady state of 1F1B runs
the forward of micro-batch warm-up + j and the backward of micro-batch j as one combined
step (`combined_1f1b.combined_forward_backward_step`, called by
forward_backward_pipelining_with_interleaving's `forward_backward_helper_wrapper` and by
`combined_1f1b_schedule_for_no_pipelining`). To make the two independent the interleaved
schedule runs one more warm-up forward (`get_pp_rank_microbatches`: "we schedule one extra
micro-batch forward step before the 1f1b stages"); without a pipeline the first forward runs
alone, then forward i+1 with backward i, then the last backward alone. Warm-up forwards and
cool-down backwards are not paired. `paired_steps` turns a 1F1B step list into that order,
the pairs as DualPipe's overlapped kinds ('Fp' then 'BWp', `lower.dualpipe`): the forward's
output leaves when the pair ends, as Megatron sends it after the combined step
(`TransformerModelChunkSchedulePlan.run`: post_forward after the layers).

The price (`pair_exposed` in `lower.dualpipe`, one rule for both): inside the pair each
layer's dispatch and combine run on a communication stream beside the other micro-batch's
attention and expert computation (`TransformerLayerSchedulePlan.run`: "comm_stream:
combine_bwd | dispatch_fwd->dispatch_bwd | combine_fwd; comp_stream: pre_dispatch_fwd |
mlp_bwd->mlp_bwd_dw->mlp_fwd | pre_dispatch_bwd"), so the pair's all-to-alls are exposed
only beyond all of its other work: max(0, A2A_f + A2A_b - rest_f - rest_b), the rest being
the kernels and the collectives that stay on the compute stream (tensor-parallel ones).
Only the `ep` all-to-alls hide (`hidden_comm`); DualPipe hides all of a pair's collectives.
delay_wgrad_compute moves the experts' weight-gradient GEMMs (`mlp_bwd_dw`) between the
backward's dispatch and the forward's expert GEMMs, inside the same pair: the pair's compute
is the same sum, so the rule needs no split of the backward for it. Not modelled: the
per-layer order of the three windows, which can leave a layer's all-to-all exposed although
the pair as a whole has compute to spare (the rule is a lower bound there).
"""

from __future__ import annotations

from collections.abc import Callable

from simulator.lower.costs import CostModel, Priced

__all__ = ["paired_steps", "hidden_comm", "pair_slowdown"]

Step = tuple[str, int, int]  # as lower.pipeline.Step


def paired_steps(steps: list[Step]) -> list[Step]:
    """1F1B's (or interleaved 1F1B's) steps of one stage as Megatron-Core runs them with the
    all-to-all overlap: its warm-up forwards and one more, then each remaining forward
    paired with the oldest backward ('Fp', 'BWp'), then the backwards left (module doc)."""
    fwd = [s for s in steps if s[0] == "F"]
    bwd = [s for s in steps if s[0] == "B"]
    assert len(fwd) == len(bwd) == len(steps) // 2, "a 1F1B schedule of F and B steps"
    # 1F1B's steady state starts with a forward, so its first backward follows warm-up + 1
    # forwards: the warm-up with the extra forward
    warm = next(i for i, s in enumerate(steps) if s[0] == "B")
    out: list[Step] = list(fwd[:warm])
    for f, b in zip(fwd[warm:], bwd):
        out += [("Fp",) + f[1:], ("BWp",) + b[1:]]
    return out + list(bwd[len(fwd) - warm:])


def hidden_comm(moe_a2a: bool) -> Callable[[Priced], float]:
    """The communication seconds of a piece that an overlapped pair hides: its expert
    all-to-alls with `moe_a2a`, else (DualPipe) all of its collectives."""
    if moe_a2a:
        return _a2a
    return _all


def _a2a(p: Priced) -> float:
    return p.a2a_s


def _all(p: Priced) -> float:
    return p.comm_s


def pair_slowdown(moe_a2a: bool, costs: CostModel) -> float:
    """How much slower a pair's other work runs while its hidden collectives run: with
    `moe_a2a` the profile's `efficiency.overlap_compute_slowdown`, the figure the engine
    slows every compute kernel by while a collective runs beside it (`engine.core`; the
    all-to-all kernels take SMs as NCCL's do); 0 under DualPipe, whose pairs were priced
    without it (`lower.dualpipe`)."""
    return costs.overlap_slowdown if moe_a2a else 0.0
