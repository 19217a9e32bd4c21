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

import numpy as np

from simulator.graph.graph import Graph, OpNode
from simulator.graph.ops import KernelCtx
from simulator.numeric.dist import DistTensor, apply_step, distribute
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import OpPlan, ShardingPlan, grad_layouts, group_ranks, keep_axes
from simulator.sharding.redistribute import RedistStep, plan_redistribution
from simulator.sharding.rules import Signature

__all__ = ["Faults", "Execution", "run_microbatch", "kernel_ctx"]


@dataclass(frozen=True)
class Faults:
    """Deliberate bugs for mutation tests: skip the n-th forward collective (its layout is
    relabelled without moving data), slice the wrong block, or skip gradient reduction."""

    drop_comm: int | None = None
    wrong_slice: bool = False
    skip_grad_reduction: bool = False


@dataclass
class Execution:
    """Mutable record of one run: values, local gradients, and the collectives it ran."""

    plan: ShardingPlan
    faults: Faults = field(default_factory=Faults)
    values: dict[str, DistTensor] = field(default_factory=dict)
    comm_log: list[RedistStep] = field(default_factory=list)
    forward_comms: int = 0
    batch_offset: int = 0

    def move(self, t: DistTensor, target: Layout, forward: bool,
             keep: tuple[str, ...] = ()) -> DistTensor:
        """Move `t` to `target` by the planner's steps (touching no axis named in `keep`)."""
        steps = plan_redistribution(t.layout, target, t.shape, self.plan.mesh,
                                    self.plan.itemsize, cost=keep_axes(self.plan.mesh, keep))
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


def _ctx(p: OpPlan, plan: ShardingPlan, rank: int, batch_offset: int = 0) -> KernelCtx:
    return kernel_ctx(plan.graph, p.op, p.sig, plan.mesh, rank, batch_offset)


def _forward_op(ex: Execution, p: OpPlan, cache: dict) -> list[DistTensor]:
    ins = []
    for i, name in enumerate(p.op.inputs):
        key = (name, p.sig.input_layout(i))
        if key not in cache:
            cache[key] = ex.move(ex.values[name], p.sig.input_layout(i), forward=True)
        ins.append(cache[key])
    fam, mesh = p.op.family, ex.plan.mesh
    ctxs = [_ctx(p, ex.plan, r, ex.batch_offset) for r in range(mesh.size)]
    local = [[t.blocks[r] for t in ins] for r in range(mesh.size)]
    groups = group_ranks(p, ex.plan.graph, ex.plan.mesh)
    if groups is not None and fam.group is not None:
        ex.comm_log += ex.plan.internal_steps(p)
        blocks = tuple(fam.group.forward(local, p.op.attrs, ctxs, groups))
    else:
        blocks = tuple(fam.forward(local[r], p.op.attrs, ctxs[r]) for r in range(mesh.size))
    out = DistTensor(ex.plan.graph.tensors[p.op.output].shape, p.sig.output_layout, blocks)
    ex.values[p.op.output] = ex.move(out, p.out_layout, forward=True)
    return ins


def _add(a: DistTensor | None, b: DistTensor) -> DistTensor:
    if a is None:
        return b
    assert a.layout == b.layout, (a.layout, b.layout)
    return DistTensor(a.shape, a.layout, tuple(x + y for x, y in zip(a.blocks, b.blocks)))


def _backward_op(ex: Execution, p: OpPlan, ins: list[DistTensor], grads: dict) -> None:
    plan, mesh = ex.plan, ex.plan.mesh
    dy_layout, in_layouts = grad_layouts(p)
    dy = _collect(ex, p.op.output, grads, dy_layout)
    if dy is None:
        return
    y = ex.values[p.op.output]
    fam = p.op.family
    ctxs = [_ctx(p, plan, r, ex.batch_offset) for r in range(mesh.size)]
    local = [[t.blocks[r] for t in ins] for r in range(mesh.size)]
    groups = group_ranks(p, plan.graph, mesh)
    if groups is not None and fam.group is not None:
        ex.comm_log += plan.internal_steps(p, "bwd")
        per_rank = fam.group.vjp(local, list(y.blocks), list(dy.blocks), p.op.attrs, ctxs,
                                 groups)
    else:
        per_rank = [fam.vjp(local[r], y.blocks[r], dy.blocks[r], p.op.attrs, ctxs[r])
                    for r in range(mesh.size)]
    wants = fam.grads_for(len(ins))
    for i, name in enumerate(p.op.inputs):
        if not wants[i] or plan.graph.tensors[name].kind in ("input", "label"):
            continue
        g = DistTensor(ins[i].shape, in_layouts[i], _blocks(per_rank, i))
        slot = grads.setdefault(name, {})
        slot[in_layouts[i]] = _add(slot.get(in_layouts[i]), g)


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
        total = _add(total, ex.move(g, target, forward=False))
    return total


def run_microbatch(ex: Execution, params: dict[str, DistTensor], batch: dict[str, np.ndarray],
                   loss_scale: float, on_op: Callable[[str, DistTensor], None] | None = None,
                   batch_offset: int = 0) -> dict[str, DistTensor]:
    """Forward and backward of one micro-batch; returns local parameter gradients in the dual
    of each parameter's kept layout (not yet reduced)."""
    plan = ex.plan
    ex.values = dict(params)
    ex.batch_offset = batch_offset
    for name, full in batch.items():
        ex.values[name] = distribute(full, plan.layouts[name], plan.mesh)
    cache: dict = {}
    saved = []
    for p in plan.ops:
        saved.append(_forward_op(ex, p, cache))
        if on_op is not None:
            on_op(p.op.output, ex.values[p.op.output])
    loss = ex.values[plan.graph.loss]
    seed_layout = plan.loss_grad_layout()
    seed = distribute(np.full(loss.shape, loss_scale), seed_layout, plan.mesh)
    grads: dict = {plan.graph.loss: {seed_layout: seed}}
    for p, ins in zip(reversed(plan.ops), reversed(saved)):
        _backward_op(ex, p, ins, grads)
    out: dict[str, DistTensor] = {}
    for name in params:
        total = _collect(ex, name, grads, None) if name in grads else None
        if total is not None:
            out[name] = total
    return out
