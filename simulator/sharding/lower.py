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

__all__ = ["forward_specs", "local_shapes"]


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
