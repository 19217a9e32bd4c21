"""Execute a sharding plan on virtual numpy devices: forward, backward, gradient reduction
and the optimizer step, with faults that mutation tests inject.

Backward runs on gradient layouts (`sharding.plan.grad_layouts`): along a mesh axis where
an op's output is split or Partial, its gradient is laid out in the dual (S(d) -> S(d),
P -> B) and its inputs' gradients come out dual (B -> P: each replica holds a summand);
along an axis where the output is broadcast (the op is replicated there, or combines an
internal label with its own collectives), every rank computes the whole gradient (Megatron's
`f` operator: the activation gradient is all-reduced where it enters the replicated region).
Every local VJP is linear in the incoming gradient, so running it on local blocks computes
the sharded transpose exactly; the redistributions of the backward pass are planned between
those layouts like any other, and `sharding.plan.backward_steps` lists the same steps
without running them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.graph.graph import Graph, OpNode
from simulator.graph.ops import KernelCtx
from simulator.numeric.dist import DistTensor, add, apply_step, distribute
from simulator.numeric.kept import dead_after, placeholder, shape_only
from simulator.numeric.local import forward_blocks, vjp_blocks
from simulator.numeric.stacked_saved import clear_saved
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, Partial
from simulator.sharding.plan import OpPlan, ShardingPlan, grad_layouts, group_ranks, keep_axes
from simulator.sharding.redistribute import RedistStep, plan_redistribution
from simulator.sharding.rules import Signature

__all__ = ["Faults", "Execution", "run_microbatch", "kernel_ctx", "Recompute", "rerun",
           "reduce_unless_skipped", "release"]


@dataclass(frozen=True)
class Faults:
    """Deliberate bugs for mutation tests: skip the n-th forward collective (its layout is
    relabelled without moving data), slice the wrong block, skip gradient reduction, or
    skip ZeRO-3's parameter all-gather."""

    drop_comm: int | None = None
    wrong_slice: bool = False
    skip_grad_reduction: bool = False
    # ZeRO-3: every device computes with its own parameter shard and zeros elsewhere
    skip_param_gather: bool = False
    # the same, only in the gathers a recompute pass runs again (Recompute.gathers)
    skip_recompute_gather: bool = False
    # what the backward reads from a recompute pass (`_rerun`): 'skip' zeros (the forward
    # was not run again: its freed buffers), 'corrupt' the re-run's tensors off by one
    recompute_fault: str | None = None
    # what comes back from the host of an offloaded tensor (`numeric.host_trips`): 'drop'
    # zeros, 'corrupt' off by one
    offload_fault: str | None = None


@dataclass
class Execution:
    """Mutable record of one run: values, local gradients, and the collectives it ran."""

    plan: ShardingPlan
    faults: Faults = field(default_factory=Faults)
    values: dict[str, DistTensor] = field(default_factory=dict)
    comm_log: list[RedistStep] = field(default_factory=list)
    recomputed_ops: int = 0  # op forwards run again for the backward (Recompute)
    forward_comms: int = 0
    batch_offset: int = 0
    vectorised: bool = True  # stacked kernels where a family has them (numeric.local)
    # round trips of offloaded saved tensors (`numeric.host_trips.HostTrips`), set by its
    # runner; None: everything stays on the device
    host: Any = None
    # free each op's output once its backward ran (`release`); False keeps every value
    # of the last micro-batch in `values` (tests read them)
    free: bool = False
    # called once per operator forward and once per operator backward the runner runs (not
    # for recompute's re-runs): how `verify` shows its progress; None: nothing is called
    tick: Callable[[], None] | None = None

    def move(self, t: DistTensor, target: Layout, forward: bool,
             keep: tuple[str, ...] = ()) -> DistTensor:
        """Move `t` to `target` by the planner's steps (touching no axis named in `keep`)."""
        steps = plan_redistribution(t.layout, target, t.shape, self.plan.mesh,
                                    self.plan.itemsize, cost=keep_axes(self.plan.mesh, keep),
                                    enable_alltoall=self.plan.enable_alltoall)
        for step in steps:
            t = self._step(t, step, forward)
        return t

    def _step(self, t: DistTensor, step: RedistStep, forward: bool) -> DistTensor:
        if step.is_comm:
            self.comm_log.append(step)
            if forward:
                index = self.forward_comms
                self.forward_comms += 1
                if self.faults.drop_comm == index:
                    return DistTensor(t.shape, step.dst, _relabel(t, step, self.plan))
        return apply_step(t, step, self.plan.mesh, self.faults.wrong_slice)


def _relabel(t: DistTensor, step: RedistStep, plan: ShardingPlan) -> tuple[np.ndarray, ...]:
    """Blocks of the right local shape that skipped the data movement (a dropped collective)."""
    mesh = plan.mesh
    shape = step.dst.local_shape(t.shape, mesh)
    out = []
    for b in t.blocks:
        reps = [max(1, n // max(1, m)) for n, m in zip(shape, b.shape)]
        out.append(np.tile(b, reps)[tuple(slice(0, n) for n in shape)].copy())
    return tuple(out)


def kernel_ctx(graph: Graph, op: OpNode, sig: Signature, mesh: Mesh, rank: int,
               batch_offset: int = 0) -> KernelCtx:
    """What the local kernel of `op` on device `rank` knows under signature `sig`."""
    shapes = graph.shapes(op)
    out_shape = graph.tensors[op.output].shape
    out_layout = sig.output_layout
    return KernelCtx(tuple(shapes), out_shape,
                     tuple(sig.input_layout(i).offsets(s, mesh, rank)
                           for i, s in enumerate(shapes)),
                     out_layout.offsets(out_shape, mesh, rank),
                     out_layout.local_shape(out_shape, mesh), batch_offset)


def _forward_op(ex: Execution, p: OpPlan, cache: dict) -> list[DistTensor]:
    ins = []
    for i, name in enumerate(p.op.inputs):
        key = (name, p.sig.input_layout(i))
        if key not in cache:
            cache[key] = ex.move(ex.values[name], p.sig.input_layout(i), forward=True)
        ins.append(cache[key])
    if group_ranks(p, ex.plan.graph, ex.plan.mesh) is not None:
        ex.comm_log += ex.plan.internal_steps(p)
    blocks, stacks = forward_blocks(ex.plan, p, ins, ex.batch_offset, ex.vectorised)
    out = DistTensor(ex.plan.graph.tensors[p.op.output].shape, p.sig.output_layout, blocks,
                     stacks)
    ex.values[p.op.output] = ex.move(out, p.out_layout, forward=True)
    return ins


def _backward_op(ex: Execution, p: OpPlan, ins: list[DistTensor], grads: dict,
                 regathered: set | None = None) -> None:
    plan = ex.plan
    dy_layout, in_layouts = grad_layouts(p)
    dy = _collect(ex, p.op.output, grads, dy_layout)
    if dy is None:
        return
    if regathered is not None:
        ins = _regathered_params(ex, p, ins, regathered)
    y = ex.values[p.op.output]
    if group_ranks(p, plan.graph, plan.mesh) is not None:
        ex.comm_log += plan.internal_steps(p, "bwd")
    per_input = vjp_blocks(plan, p, ins, y, dy, ex.batch_offset, ex.vectorised)
    wants = p.op.family.grads_for(len(ins))
    for i, name in enumerate(p.op.inputs):
        if not wants[i] or plan.graph.tensors[name].kind in ("input", "label"):
            continue
        got = per_input[i]
        assert got is not None, "a VJP returned no gradient for a differentiable input"
        g = DistTensor(ins[i].shape, in_layouts[i], *got)
        slot = grads.setdefault(name, {})
        slot[in_layouts[i]] = add(slot.get(in_layouts[i]), g)


def _kept(p: OpPlan, ins: list[DistTensor]) -> list[DistTensor]:
    """What op p keeps of its inputs for its backward: those it reads only the shape of
    as placeholders (`numeric.kept`)."""
    out = list(ins)
    for i, t in enumerate(ins):
        if shape_only(p, i):
            out[i] = placeholder(t) or t
    return out


def _drop(ex: Execution, name: str, cache: dict) -> None:
    """A forward value nothing reads any more replaced by its placeholder."""
    t = placeholder(ex.values[name])
    if t is not None:
        ex.values[name] = t
        for key in [key for key in cache if key[0] == name]:
            del cache[key]


def release(ex: Execution, p: OpPlan, saved: Any, k: int) -> None:
    """Op k's backward done: what it kept (`saved[k]`, its moved inputs) and its output are
    read by no later step of the backward (its consumers come after it in the forward, so
    their backward ran before; a recompute re-runs only ops before the one it precedes), so
    they are freed now, as a framework's autograd frees each node's saved tensors after its
    backward, rather than at the end of the micro-batch (the output where `ex.free`)."""
    saved[k] = None
    if ex.free:
        ex.values.pop(p.op.output, None)


def _regathered_params(ex: Execution, p: OpPlan, ins: list[DistTensor], done: set
                       ) -> list[DistTensor]:
    """`ins` with the parameters kept split on an axis (`TensorDef.gathered`) all-gathered
    again from their kept shards for the backward (the forward's gathered copies are not
    kept: ZeRO-3's and 3-D tensor parallel's weights stay sharded), once per parameter and
    layout in the backward pass, as `sharding.lower.param_gathers` times them."""
    out = list(ins)
    graph = ex.plan.graph
    for i, name in enumerate(p.op.inputs):
        key = (name, p.sig.input_layout(i))
        if graph.tensors[name].gathered and key not in done:
            done.add(key)
            out[i] = ex.move(ex.values[name], key[1], forward=False)
    return out


def reduce_unless_skipped(ex: Execution, g: DistTensor, target: Layout,
                          keep: tuple[str, ...] = ()) -> DistTensor:
    """A gradient moved to `target` (touching no axis in `keep`); under the
    `skip_grad_reduction` mutation each device takes its own summand for the whole
    (Partial relabelled Broadcast) and only slices it there."""
    if ex.faults.skip_grad_reduction:
        g = DistTensor(g.shape, Layout(tuple(B if isinstance(q, Partial) else q
                                             for q in g.layout.placements)), g.blocks)
    return ex.move(g, target, forward=False, keep=keep)


def _reduce_gathered(ex: Execution, name: str, g: DistTensor) -> DistTensor:
    """A parameter kept split on `gathered` axes: its micro-batch gradient reduce-scattered
    there to the kept split, the other axes left as they are (Colossal-AI's 3-D linear
    reduce-scatters its weight gradient in its backward, colossalai/legacy/nn/layer/
    parallel_3d/_operation.py)."""
    axes = ex.plan.graph.tensors[name].gathered
    if not axes:
        return g
    mesh, kept = ex.plan.mesh, ex.plan.layouts[name]
    on = {mesh.axis_index(a) for a in axes}
    target = Layout(tuple(kept.placements[a] if a in on else q
                          for a, q in enumerate(g.layout.placements)))
    return reduce_unless_skipped(ex, g, target,
                                 tuple(n for n in mesh.names if n not in axes))


def _blocks(per_rank: list, i: int) -> tuple[np.ndarray, ...]:
    """Input i's gradient block of every rank (a family returns None only for inputs
    that take no gradient, which are skipped before)."""
    out = []
    for grads in per_rank:
        g = grads[i]
        assert g is not None, "a VJP returned no gradient for a differentiable input"
        out.append(g)
    return tuple(out)


def _collect(ex: Execution, name: str, grads: dict, target: Layout | None) -> DistTensor | None:
    """Sum a tensor's gradient contributions, each moved once to `target` (None: to the
    layout of the first contribution, as a parameter's gradient is kept)."""
    total = None
    for layout, g in grads.pop(name, {}).items():
        target = target or layout
        total = add(total, ex.move(g, target, forward=False))
    return total


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
        saved[j] = _forward_op(ex, plan.ops[j], again)
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


def _segments(plan: ShardingPlan, rc: Recompute) -> dict[int, list[int]]:
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


def _regather(ex: Execution, ops: list[OpPlan], gather: Callable[[str], DistTensor | None],
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
        moved = _forward_op(ex, p, cache)
        saved.append(_kept(p, moved) if early else moved)
        if ex.tick is not None:
            ex.tick()
        if on_op is not None:
            on_op(p.op.output, ex.values[p.op.output])
        for name in dead[k] if early else ():
            _drop(ex, name, cache)
    if not backward:
        clear_saved()
        return {}
    segments = _segments(plan, recompute) if recompute is not None else {}
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
                again = _regather(ex, [plan.ops[j] for j in segments[k]], gather, again)
            assert recompute is not None
            rerun(ex, recompute, k, segments[k], saved, again)
        ins = saved[k]
        assert ins is not None
        _backward_op(ex, plan.ops[k], ins, grads, regathered)
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
    total = _collect(ex, name, grads, None) if name in grads else None
    if total is None:
        return
    g = _reduce_gathered(ex, name, total)
    if on_grad is None:
        out[name] = g
    else:
        on_grad(name, g)
