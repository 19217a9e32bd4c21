"""One operator of a sharding plan on virtual numpy devices: the run's record (`Execution`,
with the faults that mutation tests inject), an op's forward and backward on its local
blocks, and the redistributions between them.

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
from simulator.numeric.block_fault import shifted
from simulator.numeric.dist import DistTensor, add, apply_step
from simulator.numeric.kept import placeholder, shape_only
from simulator.numeric.local import forward_blocks, vjp_blocks
from simulator.sharding.layout import Layout
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import B, Partial
from simulator.sharding.plan import OpPlan, ShardingPlan, grad_layouts, group_ranks, keep_axes
from simulator.sharding.redist_steps import RedistStep
from simulator.sharding.redistribute import plan_redistribution
from simulator.sharding.rules import Signature

__all__ = ["Faults", "Execution", "kernel_ctx", "forward_op", "backward_op", "kept_inputs",
           "drop", "release", "reduce_unless_skipped", "reduce_gathered", "gradient_blocks",
           "collect"]


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
    # multi-copy of an operator graph (`VerifyCase.slices`): 'repeat' runs the first slice
    # of each micro-batch in place of every slice
    copy_fault: str | None = None
    # data parallel (the mesh axis `dp`): the gradients reduced on every other axis but
    # not summed over the replicas (each keeps its own replica's summand)
    skip_dp_reduction: bool = False
    # optimizer sharding below ZeRO-3: the updated shards not all-gathered back (each
    # device keeps its own updated shard and the stale parameter elsewhere)
    skip_update_gather: bool = False
    # explicit blocks (a Gather's manual_split, `Shard.sizes`): every block but the first
    # read one row before its own start (`numeric.block_fault`)
    block_shift: bool = False


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


def forward_op(ex: Execution, p: OpPlan, cache: dict) -> list[DistTensor]:
    ins = []
    for i, name in enumerate(p.op.inputs):
        key = (name, p.sig.input_layout(i))
        if key not in cache:
            cache[key] = ex.move(ex.values[name], p.sig.input_layout(i), forward=True)
            if ex.faults.block_shift:
                cache[key] = shifted(cache[key], ex.plan.mesh)
        ins.append(cache[key])
    if group_ranks(p, ex.plan.graph, ex.plan.mesh) is not None:
        ex.comm_log += ex.plan.internal_steps(p)
    blocks, stacks = forward_blocks(ex.plan, p, ins, ex.batch_offset, ex.vectorised)
    out = DistTensor(ex.plan.graph.tensors[p.op.output].shape, p.sig.output_layout, blocks,
                     stacks)
    ex.values[p.op.output] = ex.move(out, p.out_layout, forward=True)
    return ins


def backward_op(ex: Execution, p: OpPlan, ins: list[DistTensor], grads: dict,
                 regathered: set | None = None) -> None:
    plan = ex.plan
    dy_layout, in_layouts = grad_layouts(p)
    dy = collect(ex, p.op.output, grads, dy_layout)
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


def kept_inputs(p: OpPlan, ins: list[DistTensor]) -> list[DistTensor]:
    """What op p keeps of its inputs for its backward: those it reads only the shape of
    as placeholders (`numeric.kept`)."""
    out = list(ins)
    for i, t in enumerate(ins):
        if shape_only(p, i):
            out[i] = placeholder(t) or t
    return out


def drop(ex: Execution, name: str, cache: dict) -> None:
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


def reduce_gathered(ex: Execution, name: str, g: DistTensor) -> DistTensor:
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


def gradient_blocks(per_rank: list, i: int) -> tuple[np.ndarray, ...]:
    """Input i's gradient block of every rank (a family returns None only for inputs
    that take no gradient, which are skipped before)."""
    out = []
    for grads in per_rank:
        g = grads[i]
        assert g is not None, "a VJP returned no gradient for a differentiable input"
        out.append(g)
    return tuple(out)


def collect(ex: Execution, name: str, grads: dict, target: Layout | None) -> DistTensor | None:
    """Sum a tensor's gradient contributions, each moved once to `target` (None: to the
    layout of the first contribution, as a parameter's gradient is kept)."""
    total = None
    for layout, g in grads.pop(name, {}).items():
        target = target or layout
        total = add(total, ex.move(g, target, forward=False))
    return total
