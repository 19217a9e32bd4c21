"""Check one operator signature against full-tensor ground truth (the DTensor habit).

Inputs are laid out under the signature, Partial ones as unequal random summands so a wrong
reduction cannot match by accident; the local kernels run on every device; the assembled
output must equal the single-device output, and the local VJPs, run under dual layouts, must
assemble to the single-device gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.graph.graph import Graph
from simulator.graph.ops import KernelCtx
from simulator.numeric.dist import DistTensor, assemble, distribute
from simulator.numeric.execution import gradient_blocks, kernel_ctx
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import OpPlan, grad_layouts, group_ranks
from simulator.sharding.rules import Signature

__all__ = ["RuleCheck", "check_signature", "random_inputs"]


@dataclass(frozen=True)
class RuleCheck:
    forward_error: float
    grad_errors: tuple[float, ...]

    @property
    def worst(self) -> float:
        return max((self.forward_error, *self.grad_errors))


def random_inputs(graph: Graph, rng: np.random.Generator) -> list[np.ndarray]:
    """Values for the single op's inputs: integer indices where the op reads indices."""
    op = graph.ops[0]
    out: list[np.ndarray] = []
    given = (op.family.sample(graph.shapes(op), op.attrs, rng) if op.family.sample
             else [None] * len(op.inputs))
    for i, name in enumerate(op.inputs):
        shape = graph.tensors[name].shape
        value = given[i]
        if value is not None:
            out.append(value)
        elif op.type == "Gather" and i == 1:
            out.append(rng.integers(0, graph.tensors[op.inputs[0]].shape[0], shape))
        elif op.type == "SoftmaxCrossEntropy" and i == 1:
            out.append(rng.integers(0, graph.tensors[op.inputs[0]].shape[-1], shape))
        else:
            out.append(rng.standard_normal(shape))
    return out


def check_signature(graph: Graph, mesh: Mesh, sig: Signature, seed: int = 0) -> RuleCheck:
    """Errors of the sharded forward and VJP of the graph's single op against one device."""
    rng = np.random.default_rng(seed)
    op, fam = graph.ops[0], graph.ops[0].family
    xs = random_inputs(graph, rng)
    out_shape = graph.tensors[op.output].shape
    whole = KernelCtx.whole(graph.shapes(op), out_shape)
    y = fam.forward(xs, op.attrs, whole)
    dy = rng.standard_normal(y.shape)
    want = fam.vjp(xs, y, dy, op.attrs, whole)
    ins = [distribute(x, sig.input_layout(i), mesh, rng) for i, x in enumerate(xs)]
    ctxs = [kernel_ctx(graph, op, sig, mesh, r) for r in range(mesh.size)]
    local = [[t.blocks[r] for t in ins] for r in range(mesh.size)]
    plan = OpPlan(op, sig, sig.output_layout)
    groups = group_ranks(plan, graph, mesh)
    group = fam.group if groups is not None else None
    ys = (group.forward(local, op.attrs, ctxs, groups) if group is not None else
          [fam.forward(local[r], op.attrs, ctxs[r]) for r in range(mesh.size)])
    fwd = float(np.max(np.abs(assemble(DistTensor(y.shape, sig.output_layout, tuple(ys)), mesh)
                              - y), initial=0.0))
    dy_layout, in_layouts = grad_layouts(plan)
    dyd = distribute(dy, dy_layout, mesh, rng)
    grads = (group.vjp(local, ys, list(dyd.blocks), op.attrs, ctxs, groups)
             if group is not None else
             [fam.vjp(local[r], ys[r], dyd.blocks[r], op.attrs, ctxs[r])
              for r in range(mesh.size)])
    errs = []
    for i, g in enumerate(want):
        if g is None:
            continue
        got = DistTensor(xs[i].shape, in_layouts[i], gradient_blocks(grads, i))
        errs.append(float(np.max(np.abs(assemble(got, mesh) - g), initial=0.0)))
    return RuleCheck(fwd, tuple(errs))
