"""Activation recompute in the numeric run (Chen et al. 2016): which ops keep nothing after
the forward (`Recompute`), the runs of them (`recompute_runs`), and their forward run again before
the backward needs it (`rerun`, after `regather` where the parameters are gathered again)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from simulator.numeric.dist import DistTensor
from simulator.numeric.execution import Execution, forward_op
from simulator.sharding.plan import OpPlan, ShardingPlan

__all__ = ["Recompute", "rerun", "recompute_runs", "regather"]


@dataclass(frozen=True)
class Recompute:
    """Activation recompute in the numeric run: the ops `select` picks keep nothing after
    the forward; before the backward reaches the last op of a run of them, that run's
    forward is executed again (Chen et al. 2016). `collectives`: the recomputed forward
    redoes its redistributions (MindSpore `mp_comm_recompute: true`, Megatron's re-run of
    the sequence-parallel all-gather); False keeps their results. `gathers`: the optimizer-
    parallel all-gathers of the parameters the recomputed ops read run again (MindSpore
    `parallel_optimizer_comm_recompute: true`; `run_microbatch`'s `gather` runs them)."""

    select: Callable[[str], bool]
    collectives: bool = True
    gathers: bool = False
    # the checkpointed block an op belongs to (a run of selected ops never spans two)
    block: Callable[[str], str] = lambda name: name.split(".", 1)[0]
    # explicit runs (an operator graph's, `schedule.graph_recompute.verify_runs`): (index
    # of the op whose backward triggers the re-run, the run's op indices, the indices of
    # ops outside it whose saved inputs it refreshes); empty: the runs of `select`/`block`
    runs: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()


def _tampered(t: DistTensor, fault: str) -> DistTensor:
    """A recomputed tensor as a faulty recompute leaves it (`Faults.recompute_fault`)."""
    blocks = [np.zeros_like(b) if fault == "skip" else np.array(b, copy=True)
              for b in t.blocks]
    if fault == "corrupt" and blocks and blocks[0].size:
        blocks[0].flat[0] += 1.0
    return DistTensor(t.shape, t.layout, tuple(blocks))


def rerun(ex: Execution, rc: Recompute, k: int, run: list[int], saved, again: dict) -> None:
    """The forward of `run` executed again before op k's backward, its inputs saved anew;
    with explicit runs, the saved inputs of the ops outside it that read its outputs are
    refreshed from the new outputs."""
    plan, fault = ex.plan, ex.faults.recompute_fault
    for j in run:
        saved[j] = forward_op(ex, plan.ops[j], again)
        if fault:
            saved[j] = [_tampered(t, fault) for t in saved[j]]
    made = {plan.ops[j].op.output for j in run}
    for c in next((r for t, _, r in rc.runs if t == k), ()):
        p, ins = plan.ops[c], saved[c]
        for i, name in enumerate(p.op.inputs):
            if name in made and ins is not None:
                key = (name, p.sig.input_layout(i))
                if key not in again:
                    again[key] = ex.move(ex.values[name], key[1], forward=True)
                ins[i] = _tampered(again[key], fault) if fault else again[key]


def recompute_runs(plan: ShardingPlan, rc: Recompute) -> dict[int, list[int]]:
    """{index of the op that triggers a run: the run's op indices} for the runs of
    recomputed ops (by default the trigger is the run's last op)."""
    if rc.runs:
        return {k: list(run) for k, run, _ in rc.runs}
    out: dict[int, list[int]] = {}
    run: list[int] = []
    for k, p in enumerate(plan.ops):
        name = p.op.name
        if run and (not rc.select(name) or rc.block(name) != rc.block(plan.ops[run[-1]].op.name)):
            out[run[-1]] = run
            run = []
        if rc.select(name):
            run.append(k)
    if run:
        out[run[-1]] = run
    return out


def regather(ex: Execution, ops: list[OpPlan], gather: Callable[[str], DistTensor | None],
              cache: dict) -> dict:
    """The sharded parameters `ops` read, all-gathered again into `ex.values`; returns
    `cache` without their moved copies (so the recompute uses the new gathers)."""
    again = {}
    for name in {n for p in ops for n in p.op.inputs}:
        t = gather(name)
        if t is not None:
            again[name] = t
    ex.values.update(again)
    return {key: v for key, v in cache.items() if key[0] not in again}
