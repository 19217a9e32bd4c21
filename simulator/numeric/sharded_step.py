"""The sharded optimizer step `verify` executes: gradients reduced to the layout each
optimizer level keeps them in (ZeRO stages 0-3, Rajbhandari et al. 2020: all-reduced, or
reduce-scattered to the owning shard), the update applied shard by shard
(`numeric.optimizer.update`), and the updated shards gathered back where the parameters
are kept whole."""

from __future__ import annotations

import numpy as np

from simulator.numeric.dist import DistTensor
from simulator.numeric.execution import Execution, reduce_unless_skipped
from simulator.numeric.optimizer import update
from simulator.sharding.placement import B, Broadcast, Partial, Shard
from simulator.sharding.plan import ShardingPlan

__all__ = ["_opt_layout", "_except_dp", "reduce_grad", "_reduce", "_step", "_gather", "_updated"]


def _opt_layout(plan: ShardingPlan, name: str, shard: bool):
    """Optimizer sharding (ZeRO / MindSpore optimizer parallel): the kept layout with the
    first evenly divisible dim that no other axis splits additionally split on `dp` where
    it was broadcast (a parameter without one, such as a bias split on tp, stays whole)."""
    layout, mesh = plan.layouts[name], plan.mesh
    if not shard or "dp" not in mesh.names:
        return layout
    a = mesh.axis_index("dp")
    if not isinstance(layout.placements[a], Broadcast):
        return layout
    shape = plan.graph.tensors[name].shape
    # only a dim no other axis splits: ZeRO shards each rank's own flat buffer, which on the
    # (dp, tp) mesh order is expressible only where tp leaves the dim whole
    for d in range(len(shape)):
        n = shape[d]
        if layout.split_factor(d, mesh) > 1:
            continue  # dp is the outer axis: splitting a split dim again re-nests its blocks
        if n % (layout.split_factor(d, mesh) * mesh.shape[a]) == 0:
            ps = list(layout.placements)
            ps[a] = Shard(d)
            return type(layout)(tuple(ps))
    return layout


def _except_dp(plan: ShardingPlan, src, target):
    """`target` with the dp axis left as in `src`."""
    if "dp" not in plan.mesh.names:
        return target
    a = plan.mesh.axis_index("dp")
    ps = list(target.placements)
    ps[a] = src.placements[a]
    return type(target)(tuple(ps))


def reduce_grad(ex: Execution, plan: ShardingPlan, g: DistTensor, target) -> DistTensor:
    """An accumulated gradient brought to its optimizer layout: the other axes first, on
    the whole gradient (Megatron's finalize_model_grads all-reduces the sequence-parallel
    norm gradients over tp on the full buffer), then data parallel."""
    whole = ex.move(g, _except_dp(plan, g.layout, target), forward=False, keep=("dp",))
    if ex.faults.skip_dp_reduction:  # the mutation: Partial on dp relabelled Broadcast
        whole = DistTensor(whole.shape, type(whole.layout)(tuple(
            B if isinstance(q, Partial) else q for q in whole.layout.placements)),
            whole.blocks)
    return ex.move(whole, target, forward=False)


def _reduce(ex: Execution, plan: ShardingPlan, name: str, g: DistTensor, level: int
            ) -> DistTensor:
    """A gradient brought to its optimizer layout; the mutation takes each device's own
    summand for the whole (Partial relabelled Broadcast) and only slices it there."""
    target = _opt_layout(plan, name, level >= 1)
    if ex.faults.skip_grad_reduction:
        return reduce_unless_skipped(ex, g, target)
    return reduce_grad(ex, plan, g, target)


def _step(ex: Execution, plan: ShardingPlan, params: dict[str, DistTensor],
          grads: dict[str, DistTensor], kind: str, lr: float, levels: dict[str, int]
          ) -> tuple[dict[str, DistTensor], dict[str, DistTensor]]:
    """Update each parameter at its optimizer layout. Below ZeRO-2 the accumulated gradient
    is reduced there first (ZeRO-2 and 3 reduced every micro-batch's already); below ZeRO-3
    the updated parameter is all-gathered back to its kept layout (ZeRO-3 keeps its shard).
    Returns (new parameters, reduced gradients)."""
    new, reduced = {}, {}
    for name, p in params.items():
        level = levels[name]
        target = _opt_layout(plan, name, level >= 1)
        g = grads[name] if level >= 2 else _reduce(ex, plan, name, grads[name], level)
        local = ex.move(p, target, forward=False)
        updated = DistTensor(p.shape, target, _updated(kind, local, g, lr))
        new[name] = updated if level >= 3 else _gathered_back(ex, plan, name, updated, p)
        reduced[name] = g
    return new, reduced


def _gathered_back(ex: Execution, plan: ShardingPlan, name: str, updated: DistTensor,
                   old: DistTensor) -> DistTensor:
    """Below ZeRO-3: the updated shards all-gathered back to the kept layout; the mutation
    leaves each device its own updated shard and the stale parameter elsewhere."""
    kept = plan.layouts[name]
    if not ex.faults.skip_update_gather or updated.layout == kept:
        return ex.move(updated, kept, forward=False)
    blocks = []
    for rank, (own, stale) in enumerate(zip(updated.blocks, old.blocks)):
        whole = np.zeros(old.shape, dtype=own.dtype)
        whole[kept.region(old.shape, plan.mesh, rank)] = stale
        whole[updated.layout.region(old.shape, plan.mesh, rank)] = own
        blocks.append(whole[kept.region(old.shape, plan.mesh, rank)])
    return DistTensor(old.shape, kept, tuple(blocks))


def _gather(ex: Execution, plan: ShardingPlan, name: str, shard: DistTensor,
            again: bool = False) -> DistTensor:
    """ZeRO-3: the parameter all-gathered from its shards before a micro-batch uses it (or
    `again`, for a recompute pass); the mutation leaves each device its own shard with
    zeros elsewhere."""
    kept = plan.layouts[name]
    if not (ex.faults.skip_param_gather or again and ex.faults.skip_recompute_gather):
        return ex.move(shard, kept, forward=False)
    blocks = []
    for rank, own in enumerate(shard.blocks):
        whole = np.zeros(shard.shape, dtype=own.dtype)
        whole[shard.layout.region(shard.shape, plan.mesh, rank)] = own
        blocks.append(whole[kept.region(shard.shape, plan.mesh, rank)])
    return DistTensor(shard.shape, kept, tuple(blocks))


def _updated(kind: str, param: DistTensor, grad: DistTensor, lr: float
             ) -> tuple[np.ndarray, ...]:
    """Each rank's updated block; ranks that hold the very same parameter and gradient
    arrays (replicas after an all-reduce) get the one result of that pure update."""
    done: dict[tuple[int, int], np.ndarray] = {}
    out = []
    for pb, gb in zip(param.blocks, grad.blocks):
        key = (id(pb), id(gb))
        if key not in done:
            done[key] = update(kind, pb, gb, lr)
        out.append(done[key])
    return tuple(out)
