"""Execute a sharding plan on virtual numpy devices: one micro-batch's forward and backward
(`run_microbatch`), op by op (`numeric.execution`, which says how the backward runs on
gradient layouts), with activation recompute (`numeric.recompute`); the gradient reduction
and the optimizer step follow in `numeric.verify`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from simulator.numeric.dist import DistTensor, distribute
from simulator.numeric.execution import (
    Execution,
    backward_op,
    collect,
    drop,
    forward_op,
    kept_inputs,
    reduce_gathered,
    release,
)
from simulator.numeric.kept import dead_after
from simulator.numeric.recompute import Recompute, recompute_runs, regather, rerun
from simulator.numeric.stacked_saved import clear_saved
from simulator.sharding.plan import ShardingPlan

__all__ = ["run_microbatch"]


def run_microbatch(ex: Execution, params: dict[str, DistTensor], batch: dict[str, np.ndarray],
                   loss_scale: float, on_op: Callable[[str, DistTensor], None] | None = None,
                   batch_offset: int = 0, backward: bool = True,
                   recompute: Recompute | None = None,
                   gather: Callable[[str], DistTensor | None] | None = None,
                   on_grad: Callable[[str, DistTensor], None] | None = None
                   ) -> dict[str, DistTensor]:
    """Forward and backward of one micro-batch; returns local parameter gradients in the dual
    of each parameter's kept layout (not yet reduced). `backward=False`: the forward only
    (no gradients). `recompute`: drop and re-run the selected ops' forward (`Recompute`);
    `gather(name)`: a sharded parameter all-gathered again (None: kept whole).
    `on_grad(name, gradient)`: each parameter's gradient handed over as soon as the
    backward of its first reader has run (none is returned then)."""
    plan = ex.plan
    clear_saved()  # what a forward keeps for its backward is this micro-batch's only
    ex.values = dict(params)
    ex.batch_offset = batch_offset
    for name, full in batch.items():
        ex.values[name] = distribute(full, plan.layouts[name], plan.mesh)
    cache: dict = {}
    saved: list[list[DistTensor] | None] = []
    # values the backward reads only the shape of are freed as the forward goes
    # (`numeric.kept`); not where a recompute re-runs forwards or offload copies them
    early = ex.free and recompute is None and ex.host is None
    dead = dead_after(plan) if early else ()
    for k, p in enumerate(plan.ops):
        moved = forward_op(ex, p, cache)
        if ex.host is not None:
            ex.host.came_up(ex, p.op.name, p.op.output)
        saved.append(kept_inputs(p, moved) if early else moved)
        if ex.tick is not None:
            ex.tick()
        if on_op is not None:
            on_op(p.op.output, ex.values[p.op.output])
        for name in dead[k] if early else ():
            drop(ex, name, cache)
    if not backward:
        clear_saved()
        return {}
    segments = recompute_runs(plan, recompute) if recompute is not None else {}
    for run in segments.values():
        for k in run:  # nothing of a recomputed op is kept for the backward
            saved[k] = None
    ex.recomputed_ops += sum(len(run) for run in segments.values())
    if ex.host is not None:
        ex.host.saved(plan, saved)
    loss = ex.values[plan.graph.loss]
    seed_layout = plan.loss_grad_layout()
    seed = distribute(np.full(loss.shape, loss_scale), seed_layout, plan.mesh)
    grads: dict = {plan.graph.loss: {seed_layout: seed}}
    regathered: set = set()
    out: dict[str, DistTensor] = {}
    complete = _first_readers(plan, params) if on_grad is not None else {}
    if recompute is None or recompute.collectives:
        cache.clear()  # the backward reads the moved inputs through `saved` only
    for k in reversed(range(len(plan.ops))):
        if k in segments:
            again = {} if recompute is not None and recompute.collectives else cache
            if recompute is not None and recompute.gathers and gather is not None:
                again = regather(ex, [plan.ops[j] for j in segments[k]], gather, again)
            assert recompute is not None
            rerun(ex, recompute, k, segments[k], saved, again)
        ins = saved[k]
        assert ins is not None
        if ex.host is not None:
            ex.host.goes_down(ex, plan.ops[k].op.name, plan.ops[k].op.output, grads)
        backward_op(ex, plan.ops[k], ins, grads, regathered)
        release(ex, plan.ops[k], saved, k)
        if ex.tick is not None:
            ex.tick()
        for name in complete.get(k, ()):
            _hand_over(ex, name, grads, out, on_grad)
    clear_saved()
    for name in params:
        _hand_over(ex, name, grads, out, on_grad)
    return out


def _first_readers(plan: ShardingPlan, params: dict) -> dict[int, list[str]]:
    """{op index: the parameters it is the first reader of}: their gradients are complete
    once the backward reaches it."""
    first: dict[str, int] = {}
    for k, p in enumerate(plan.ops):
        for name in p.op.inputs:
            if name in params:
                first.setdefault(name, k)
    out: dict[int, list[str]] = {}
    for name, k in first.items():
        out.setdefault(k, []).append(name)
    return out


def _hand_over(ex: Execution, name: str, grads: dict, out: dict,
               on_grad: Callable[[str, DistTensor], None] | None) -> None:
    """A parameter's complete gradient, summed and reduced on its `gathered` axes, to
    `on_grad` (or into `out`)."""
    total = collect(ex, name, grads, None) if name in grads else None
    if total is None:
        return
    g = reduce_gathered(ex, name, total)
    if on_grad is None:
        out[name] = g
    else:
        on_grad(name, g)
