"""What the backward reads of each forward value, so that the rest is freed early.

An autograd framework keeps, per op, only what that op's backward needs (PyTorch's
`ctx.save_for_backward`): an addition's gradient needs neither operand, a dropout's its
mask (redrawn here from its seed), a softmax's its output but not its input. The sharded
and the reference runs of `verify` held every op output of a micro-batch until its
backward; here a value whose readers' backward needs only its shape becomes a shape-only
placeholder once its last reader's forward has run: every block a read-only stride-0 view
of one NaN, so a kernel that read it after all would spread NaN into what verify compares
and fail, never pass by accident.

`_SHAPE_ONLY` lists, per family, the inputs whose values its VJP (the family's and its
stacked kernel, `numeric.stacked*`) never reads, only their shapes and offsets;
`_NO_OUTPUT` the families whose VJP never reads the op's own output. A family not listed
keeps everything.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from simulator.numeric.dist import DistTensor
from simulator.sharding.plan import OpPlan, ShardingPlan

__all__ = ["placeholder", "shape_only", "dead_after"]

# input indices whose values the VJP never reads (graph.ops elementwise, shape, reduce,
# norm; numeric.stacked, stacked_offsets, stacked_saved)
_SHAPE_ONLY: dict[str, frozenset[int]] = {
    "Add": frozenset({0, 1}),  # unbroadcast(dy, x.shape)
    "Sub": frozenset({0, 1}),
    "Scale": frozenset({0}),  # dy * factor
    "Dropout": frozenset({0}),  # dy * mask(seed, offsets)
    "CausalMask": frozenset({0}),  # where(k > q, 0, dy)
    "Softmax": frozenset({0}),  # y * (dy - sum(dy * y))
    "Transpose": frozenset({0}),
    "Reshape": frozenset({0}),
    "ReduceSum": frozenset({0}),  # broadcast_to(dy, x.shape)
    "ReduceMean": frozenset({0}),
}
# families whose VJP never reads the op's output y
_NO_OUTPUT = frozenset({"Add", "Sub", "Mul", "Scale", "Dropout", "CausalMask", "Transpose",
                        "Reshape", "ReduceSum", "ReduceMean", "Einsum", "GeLU", "LayerNorm"})


def shape_only(p: OpPlan, i: int) -> bool:
    """Whether op `p`'s backward reads only the shape of its input i."""
    return i in _SHAPE_ONLY.get(p.op.family.name, frozenset())


@lru_cache(maxsize=64)
def dead_after(plan: ShardingPlan) -> tuple[tuple[str, ...], ...]:
    """Per op k: the op outputs whose values nothing reads after op k's forward (k is
    their last reader, whose backward, like every reader's, needs only their shape, and
    their producer's backward does not read them)."""
    made = {p.op.output: p for p in plan.ops}
    last: dict[str, int] = {}
    needed: set[str] = {plan.graph.loss}
    for k, p in enumerate(plan.ops):
        for i, name in enumerate(p.op.inputs):
            last[name] = k
            if not shape_only(p, i):
                needed.add(name)
    out: list[list[str]] = [[] for _ in plan.ops]
    for name, k in last.items():
        producer = made.get(name)
        if (producer is not None and name not in needed
                and producer.op.family.name in _NO_OUTPUT):
            out[k].append(name)
    return tuple(tuple(names) for names in out)


def placeholder(t: DistTensor) -> DistTensor | None:
    """`t` without its values: each block a stride-0 NaN view of its shape (one array per
    shape, so a stack of them is a stride-0 view too); None where its blocks are not
    floats (kept as they are)."""
    if not t.blocks:
        return None
    views: dict[tuple, np.ndarray] = {}

    def view(b: np.ndarray) -> np.ndarray:
        key = (b.shape, b.dtype)
        if key not in views:
            views[key] = np.broadcast_to(np.array(np.nan, dtype=b.dtype), b.shape)
        return views[key]

    if all(len(rs) and t.blocks[rs[0]].shape == arr.shape[1:] for rs, arr in t.stacks) \
            and sum(len(rs) for rs, _ in t.stacks) == len(t.blocks):
        blocks: list[np.ndarray] = list(t.blocks)  # every rank in one of the stacks
        for rs, arr in t.stacks:
            v = view(arr[0]) if arr.dtype.kind == "f" else None
            if v is None:
                return None
            for r in rs:
                blocks[r] = v
        return DistTensor(t.shape, t.layout, tuple(blocks))
    if any(b.dtype.kind != "f" for b in t.blocks):
        return None
    return DistTensor(t.shape, t.layout, tuple(view(b) for b in t.blocks))
