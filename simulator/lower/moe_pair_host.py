"""Host-bound MoE layers inside Megatron-Core's expert all-to-all overlap: one forward and
one backward layer share the host between two dispatcher syncs (`parallel.overlap.moe_a2a`
with the host rule of `lower.moe_host`).

What the stack's code does (Megatron-Core core_v0.15.0, and the same lines at 92c8482e, the
Megatron-LM commit Megatron-Bridge 00b7660b pins as 3rdparty/Megatron-LM): with
`overlap_moe_expert_parallel_comm` the schedule runs the forward of one micro-batch and the
backward of another layer by layer (`combined_1f1b.combined_forward_backward_step` ->
`TransformerModelChunkSchedulePlan.run` -> `TransformerLayerSchedulePlan.run`,
megatron/core/models/common/model_chunk_schedule_plan.py). The host issues each layer pair
in this order:

    b.combine.backward, f.attn.forward, f.post_attn.forward (router, dispatch_preprocess:
    the device-to-host copy of the token counts), b.mlp.backward (dgrad),
    f.moe_dispatch.forward  <- token_dispatch: _maybe_dtoh_and_synchronize(
                                "before_ep_alltoall"), d2h_event.synchronize()
    b.mlp.backward_dw (delay_wgrad_compute), b.moe_dispatch.backward, f.mlp.forward,
    f.moe_combine.forward, b.post_attn.backward, b.attn.backward, b.attn.backward_dw

and the dispatch and combine run on a communication stream (`get_comm_stream`). So the host
does not run ahead of the device across the forward's sync: every kernel of the pair, the
backward's included, is launched between two syncs. From one sync to the next the device
first runs the backward's expert dgrad the host queued before the sync, then every kernel in
the order above as the host launches it; the segment is the two-machine makespan of that
order (`moe_host.sync_segment_s`, Johnson 1954), the all-to-alls taking no time on the
compute stream (they run beside it: their exposure is `dualpipe.pair_exposed`'s). Before
the sync the host also launches the dispatcher's bookkeeping and the next backward's dgrad,
whose device time falls in the next segment.

Priced alone, a host-bound forward and backward each subtract their all-to-all from their
launch time (`moe_host.price_synced`, `price_unsynced`: what the host spends exceeds the
device's time), and the pair then hides the same all-to-alls again; the pair's segment
replaces both halves' compute. Not modelled: a layer pair across two different blocks (each
forward layer is paired with the segment of its own block), and blocks of several MoE
layers (priced as before).
"""

from __future__ import annotations

from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel
from simulator.lower.moe_host import MoeHost, captured, host_s, sync_segment_s
from simulator.program.program import Op

__all__ = ["pair_segment_s", "pair_order", "paired_layers_s"]


def _ep_a2a(op: Op) -> bool:
    return isinstance(op, CommSpec) and op.collective == "all_to_all" and op.axis == "ep"


def _wgrad(op: Op) -> bool:
    return isinstance(op, ComputeSpec) and op.weight_grad


def pair_order(fwd: tuple[Op, ...], bwd: tuple[Op, ...]
               ) -> tuple[tuple[Op, ...], tuple[Op, ...], tuple[Op, ...]] | None:
    """(the backward's expert dgrad, queued before the sync; the ops the host launches from
    the sync to the next, in Megatron-Core's order; the dgrad again, launched before the
    next sync) of one MoE layer's forward `fwd` and backward `bwd`, or None unless each
    has exactly its dispatch and combine all-to-all."""
    f = [i for i, op in enumerate(fwd) if _ep_a2a(op)]
    b = [i for i, op in enumerate(bwd) if _ep_a2a(op)]
    if len(f) != 2 or len(b) != 2:
        return None
    (d, c), (c1, d1) = f, b
    mlp_b, attn_b = bwd[c1 + 1:d1], bwd[d1 + 1:]
    dgrad = tuple(op for op in mlp_b if not _wgrad(op))
    seq = (fwd[d:d + 1]  # f.moe_dispatch (after the sync)
           + tuple(op for op in mlp_b if _wgrad(op))  # b.mlp.backward_dw
           + bwd[d1:d1 + 1]  # b.moe_dispatch.backward
           + fwd[d + 1:c] + fwd[c:]  # f.mlp, f.moe_combine and the residual
           + tuple(op for op in attn_b if not _wgrad(op))  # b.post_attn, b.attn backward
           + tuple(op for op in attn_b if _wgrad(op))  # b.attn.backward_dw
           + bwd[:c1 + 1]  # the next b.combine.backward
           + fwd[:d])  # the next f.attn, f.post_attn (up to the dispatch)
    return dgrad, seq, dgrad


def pair_segment_s(fwd: tuple[Op, ...], bwd: tuple[Op, ...], costs: CostModel,
                   groups: dict[str, GroupSpec], host: MoeHost) -> float | None:
    """Compute-stream seconds of one forward-backward layer pair from one dispatcher sync
    to the next (module doc), or None where `pair_order` finds no pair."""
    order = pair_order(fwd, bwd)
    if order is None:
        return None
    queued, seq, before_sync = order

    def gpu(op: Op) -> float:
        if _ep_a2a(op):
            return 0.0  # on the communication stream
        if isinstance(op, CommSpec):
            return costs.collective_s(op.collective, op.bytes, groups[op.axis])
        return costs.compute_s(op)

    names = captured(fwd, host) | captured(bwd, host)
    launched = ([0.0] * len(queued) + host_s(seq, host, names)
                + [host.before_sync * host.kernel_s] + host_s(before_sync, host, names))
    gpu_s = ([gpu(op) for op in queued] + [gpu(op) for op in seq] + [0.0]
             + [0.0] * len(before_sync))
    return sync_segment_s(launched, gpu_s)


def paired_layers_s(fwd_deltas: tuple[float, ...], bwd_deltas: tuple[float, ...]) -> float:
    """Seconds a pair of chunks adds to its halves' compute: Megatron-Core pairs forward
    layer i with backward layer n_b - 1 - i for i < min(n_f, n_b)
    (`TransformerModelChunkSchedulePlan.run`), each pair its forward layer's delta
    (`StageWork.pair_deltas`); the layers left over run alone."""
    return sum(fwd_deltas[:min(len(fwd_deltas), len(bwd_deltas))])
