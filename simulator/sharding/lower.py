"""One device's share of a planned graph, in the shared currency of `cost.specs`.

Each op becomes a ComputeSpec priced at its LOCAL shapes (FLOPs from the op family, bytes
read and written, GEMM problem shape for contractions), and each forward redistribution a
CommSpec on the mesh axis it runs along. This is the bridge from the sharding algebra to the
cost model: a test checks it against the closed-form Megatron program of the schedule.
"""

from __future__ import annotations

import math

from simulator.cost.specs import CommSpec, ComputeSpec
from simulator.graph.ops.einsum import gemm_mnk
from simulator.sharding.plan import OpPlan, ShardingPlan

__all__ = ["forward_specs", "backward_specs", "gradient_reductions", "local_shapes"]


def local_shapes(plan: ShardingPlan, p: OpPlan) -> tuple[list[tuple[int, ...]], tuple[int, ...]]:
    """Local input shapes and output shape of an op on one device."""
    g, mesh = plan.graph, plan.mesh
    ins = [p.sig.input_layout(i).local_shape(g.tensors[n].shape, mesh)
           for i, n in enumerate(p.op.inputs)]
    out = p.sig.output_layout.local_shape(g.tensors[p.op.output].shape, mesh)
    return ins, out


def _compute(plan: ShardingPlan, p: OpPlan, dtype: str) -> ComputeSpec:
    ins, out = local_shapes(plan, p)
    fam = p.op.family
    moved = (sum(math.prod(s) for s in ins) + math.prod(out)) * plan.itemsize
    mnk, batch = None, 1
    if p.op.type == "Einsum":
        batch, mnk = gemm_mnk(ins, p.op.attrs)
    return ComputeSpec(p.op.name, fam.kind if fam.kind != "gemm" or mnk else "elementwise",
                       fam.flops(ins, out, p.op.attrs), float(moved), dtype, "fwd", mnk, batch)


def forward_specs(plan: ShardingPlan, dtype: str, prefix: str = ""
                  ) -> tuple[ComputeSpec | CommSpec, ...]:
    """The forward pass of the ops whose names start with `prefix`, in execution order:
    each op's input redistributions (shared ones once), the op, its output re-layout."""
    steps: dict[str, list] = {}
    for name, step in plan.forward_steps():
        steps.setdefault(name, []).append(step)
    out: list[ComputeSpec | CommSpec] = []
    for p in plan.ops:
        if not p.op.name.startswith(prefix):
            continue
        for s in steps.get(p.op.name, []):
            if s.is_comm:
                out.append(CommSpec(f"{p.op.name}.{s.kind}", s.kind, s.bytes,
                                    plan.mesh.names[s.axis]))
        out.append(_compute(plan, p, dtype))
    return tuple(out)


_TRANSPOSE = {"all_gather": "reduce_scatter", "reduce_scatter": "all_gather",
              "all_reduce": "all_reduce", "all_to_all": "all_to_all"}


def backward_specs(forward: tuple[ComputeSpec | CommSpec, ...], plan: ShardingPlan
                   ) -> tuple[ComputeSpec | CommSpec, ...]:
    """The backward pass of `forward`, in reverse: each op's VJP at its family's backward
    FLOP factor (dgrad + wgrad for contractions), each collective transposed (the adjoint of
    an all-gather is a reduce-scatter of the same buffer, an all-reduce is its own)."""
    factors = {p.op.name: p.op.family.bwd_flops_factor for p in plan.ops}
    out: list[ComputeSpec | CommSpec] = []
    for op in reversed(forward):
        if isinstance(op, CommSpec):
            out.append(CommSpec(f"{op.name}.bwd", _TRANSPOSE[op.collective], op.bytes,
                                op.axis, "bwd"))
        else:
            f = factors.get(op.name, 1.0)
            out.append(ComputeSpec(f"{op.name}.bwd", op.kind, op.flops * f,
                                   op.bytes_accessed * f, op.dtype, "bwd", op.gemm_mnk,
                                   op.gemm_batch))
    return tuple(out)


def gradient_reductions(plan: ShardingPlan, skip_axes: tuple[str, ...] = ()
                        ) -> tuple[CommSpec, ...]:
    """Collectives that bring each parameter's gradient (laid out in the dual of the
    parameter's layout: Partial where the parameter is broadcast) back to the parameter's
    layout, except along `skip_axes` (reduced elsewhere, e.g. bucketed data parallel)."""
    from simulator.sharding.layout import Layout
    from simulator.sharding.redistribute import plan_redistribution

    out = []
    for t in plan.graph.of_kind("parameter"):
        kept = plan.layouts[t.name]
        # Skipped axes are reduced elsewhere on the whole buffer: plan only the others, so
        # the planner cannot shrink them by a reduce_scatter on a skipped axis.
        grad = Layout(tuple(k if name in skip_axes else d for name, d, k in
                            zip(plan.mesh.names, kept.dual().placements, kept.placements)))
        for step in plan_redistribution(grad, kept, t.shape, plan.mesh, plan.itemsize):
            axis = plan.mesh.names[step.axis]
            if step.is_comm and axis not in skip_axes:
                out.append(CommSpec(f"{t.name}.grad.{step.kind}", step.kind, step.bytes, axis,
                                    "bwd"))
    return tuple(out)
