"""Operator families: shape inference, FLOP and byte counts, a numpy forward and its VJP, and
the dimension labels from which every sharding signature follows.

A family describes its iteration space with one label per tensor dim (einsum style). A label
split along a mesh axis splits every tensor that carries it; a split label the output lacks
makes the output Partial (only for `reducible` labels). Inputs in which the op is linear may
arrive Partial. `sharding.rules` turns this into the list of valid signatures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["LabelView", "KernelCtx", "OpFamily", "GroupKernel", "KernelCost", "register",
           "get_family", "families", "OpError"]

Shape = tuple[int, ...]
Labels = tuple[str | None, ...]


class OpError(ValueError):
    """An operator applied to inputs it cannot take (wrong arity, shapes, attrs)."""


@dataclass(frozen=True)
class LabelView:
    """Dimension labels of one op application; None marks a broadcast dim (never split)."""

    inputs: tuple[Labels, ...]
    output: Labels
    fixed: frozenset[str] = frozenset()
    reducible: frozenset[str] = frozenset()
    linear_inputs: frozenset[int] = frozenset()
    partial_all: bool = False
    internal: frozenset[str] = frozenset()


    def labels(self) -> list[str]:
        seen: list[str] = []
        for labs in (*self.inputs, self.output):
            for lab in labs:
                if lab is not None and lab not in seen:
                    seen.append(lab)
        return seen

    def splittable(self) -> list[str]:
        return [lab for lab in self.labels()
                if lab not in self.fixed and (lab in self.output or lab in self.reducible
                                              or lab in self.internal)]


@dataclass(frozen=True)
class KernelCtx:
    """What a local kernel may know beyond its local arrays: logical shapes and where its
    blocks start, so that masks, lookups and means come out as on one device.
    `batch_offset` is the first global sample of the current micro-batch."""

    in_shapes: tuple[Shape, ...]
    out_shape: Shape
    in_offsets: tuple[Shape, ...]
    out_offset: Shape
    out_local_shape: Shape
    batch_offset: int = 0

    @classmethod
    def whole(cls, in_shapes: Sequence[Shape], out_shape: Shape) -> KernelCtx:
        return cls(tuple(in_shapes), out_shape, tuple((0,) * len(s) for s in in_shapes),
                   (0,) * len(out_shape), out_shape)


Forward = Callable[[list[np.ndarray], dict[str, Any], KernelCtx], np.ndarray]
Vjp = Callable[[list[np.ndarray], np.ndarray, np.ndarray, dict[str, Any], KernelCtx],
               list[np.ndarray | None]]
# (local input shapes, local output shape, attrs, bytes per element, phase 'fwd' | 'bwd')
#   -> (FLOPs, bytes accessed, executed fraction of the FLOPs)
KernelCost = Callable[[list[Shape], Shape, dict[str, Any], float, str],
                      tuple[float, float, float]]


@dataclass(frozen=True)
class GroupKernel:
    """An op whose split `internal` label needs its own collectives (a label the output
    lacks but that cannot be summed away: Megatron's vocabulary-parallel cross-entropy
    all-reduces a max and two sums across the vocabulary shards).

    forward/vjp take every rank's local inputs at once and `groups`, the lists of ranks that
    hold the shards of one row (ranks differing only on the axes that split the label);
    `comm(local out shape)` lists the (collective, bytes) one device runs per split axis,
    forward only; `axis_comm(local out shape, axis size, bytes per element, phase 'fwd' |
    'bwd')` in its place for an op whose exchange depends on the axis size and runs in both
    passes (ring attention's key/value ring).
    """

    forward: Callable[..., list[np.ndarray]]
    vjp: Callable[..., list[list[np.ndarray | None]]]
    comm: Callable[[Shape], tuple[tuple[str, float], ...]] | None = None
    axis_comm: Callable[[Shape, int, float, str], tuple[tuple[str, float], ...]] | None = None
    # an exchange that depends on which label the axis splits and on the inputs' whole and
    # local shapes (a convolution's halo: `graph.ops.halo`): (label, global input shapes,
    # local input shapes, axis size, bytes per element, phase) -> (collective, bytes)
    label_comm: Callable[[str, list[Shape], list[Shape], int, float, str],
                         tuple[tuple[str, float], ...]] | None = None
    # `axis_comm` for an exchange that also depends on the op's attributes (a windowed
    # ring passes only the blocks inside the window): (..., phase, attrs) -> (coll, bytes)
    attrs_comm: Callable[[Shape, int, float, str, dict[str, Any]],
                         tuple[tuple[str, float], ...]] | None = None

    def steps(self, out_local: Shape, n: int, e: float, phase: str,
              attrs: dict[str, Any] | None = None) -> tuple[tuple[str, float], ...]:
        """The (collective, bytes) one device runs on a split axis of `n` devices."""
        if self.attrs_comm is not None:
            return self.attrs_comm(out_local, n, e, phase, attrs or {})
        if self.axis_comm is not None:
            return self.axis_comm(out_local, n, e, phase)
        if self.comm is None or phase != "fwd":
            return ()
        return self.comm(out_local)

    def label_steps(self, label: str, ins: list[Shape], ins_local: list[Shape],
                    out_local: Shape, n: int, e: float, phase: str,
                    attrs: dict[str, Any] | None = None) -> tuple[tuple[str, float], ...]:
        """`steps` for an axis that splits `label`, where the family's exchange needs it."""
        if self.label_comm is not None:
            return self.label_comm(label, ins, ins_local, n, e, phase)
        return self.steps(out_local, n, e, phase, attrs)


@dataclass(frozen=True)
class OpFamily:
    """One operator family. `flops`/`bwd_flops` count multiply-adds as 2 FLOPs; `kind` is the
    ComputeSpec kind the cost model prices it as."""

    name: str
    arity: tuple[int, int]
    infer_shape: Callable[[list[Shape], dict[str, Any]], Shape]
    labels: Callable[[list[Shape], dict[str, Any]], LabelView]
    forward: Forward
    vjp: Vjp
    flops: Callable[[list[Shape], Shape, dict[str, Any]], float]
    kind: str = "elementwise"
    bwd_flops_factor: float = 1.0
    differentiable: tuple[bool, ...] = field(default=())
    # What the backward reads, for activation memory: input indices, -1 for the output
    # (None: every input); `saved_extra(local ins, local out)` adds bytes kept beside them
    # (a dropout mask, a log-sum-exp per row).
    saves: tuple[int, ...] | None = None
    saved_extra: Callable[[list[Shape], Shape], float] | None = None
    cost: KernelCost | None = None  # kernel FLOPs and bytes when not the generic count
    group: GroupKernel | None = None  # collectives of a split internal label
    attrs: tuple[str, ...] = ()  # the attributes an operator of this family may carry
    # valid values for inputs a random normal draw cannot stand for (indices, routes), for
    # rule checks: (input shapes, attrs, rng) -> per input an array or None (draw normal)
    sample: Callable[[list[Shape], dict[str, Any], np.random.Generator],
                     list[np.ndarray | None]] | None = None

    def check_arity(self, n: int) -> None:
        lo, hi = self.arity
        if not lo <= n <= hi:
            want = str(lo) if lo == hi else f"{lo} to {hi}"
            raise OpError(f"{self.name} takes {want} inputs, got {n}")

    def grads_for(self, n: int) -> tuple[bool, ...]:
        return self.differentiable or (True,) * n


_REGISTRY: dict[str, OpFamily] = {}


def register(family: OpFamily, *aliases: str) -> OpFamily:
    for key in (family.name, *aliases):
        _REGISTRY[key.lower()] = family
    return family


def get_family(name: str) -> OpFamily:
    fam = _REGISTRY.get(name.lower())
    if fam is None:
        raise OpError(f"unknown operator type {name!r} (registered: {', '.join(families())})")
    return fam


def families() -> list[str]:
    return sorted({f.name for f in _REGISTRY.values()})


def numel(shape: Shape) -> int:
    return math.prod(shape)
