"""Communication operators of the compiled training graph, and MindSpore's communication
subgraph extraction and reuse (`parallel.comm_subgraph`).

In graph mode every communication operator of the step's graph is compiled (its HCCL kernel
built, a stream assigned) before the first step. The graph holds each micro-batch's forward,
recompute and backward (MindSpore's PipelineCell and gradient accumulation call the network
once per micro-batch, unrolled in graph mode), and once per step the gradient reductions and
parameter gathers of the optimizer. Counted per device here, for the device of each
pipeline stage, from the program `run` times (`CommOp` instances).

Subgraph reuse (MindSpore docs, "Communication Subgraph Extraction and Reuse", r2.3:
operators of the same type, shape, dtype and group are grouped, each group becomes one
communication subgraph that the graph calls; `MS_COMM_COMPILER_OPT` caps the operators
replaced by calls, default 1000) leaves one compiled operator per class, plus the
operators over the cap. The graph-build time is distinct operators x
`parallel.comm_subgraph.build_ms_per_op`, an assumption (no public measurement of the
per-operator cost was found) to vary as a what-if. The step time is unchanged: the
document claims compile time and stream savings, not faster collectives.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, NamedTuple

from simulator.cost.specs import CommSpec

if TYPE_CHECKING:
    from simulator.lower.lowering import Lowering
    from simulator.program.program import Op

__all__ = ["CommOp", "stage_ops", "distinct_ops", "comm_subgraph_report", "extras"]


class CommOp(NamedTuple):
    """A class of communication operators: kind, group (mesh axis) and bytes (the buffer:
    shape x dtype)."""

    kind: str
    group: str
    nbytes: float

    def label(self) -> str:
        return f"{self.kind}[{self.group}] {self.nbytes:.0f} B"


def _comms(ops: tuple[Op, ...]) -> Iterator[CommOp]:
    for op in ops:
        if isinstance(op, CommSpec):
            yield CommOp(op.collective, op.axis, op.bytes)


def _micro_ops(low: Lowering, vs: int) -> Counter[CommOp]:
    """One micro-batch's collectives of virtual stage vs: its layers' forward, recompute and
    backward, the embedding's and head's, and the pipeline sends."""
    last = len(low.work) - 1
    out: Counter[CommOp] = Counter()
    for block in low.work[vs].blocks:
        out.update(_comms(block.fwd + block.recompute + block.bwd))
    w = low.work[vs]
    if vs < last:
        out[CommOp("send_recv", "pp", w.send_fwd_bytes)] += 1
    if vs > 0:
        out[CommOp("send_recv", "pp", w.send_bwd_bytes)] += 1
    return out


def _buckets(low: Lowering, vs: int, kind: str, gather: bool = False) -> Counter[CommOp]:
    """The gradient buckets of vs as `kind` operators, or (`gather`) the parameter
    all-gather's buckets at parameter bytes."""
    buckets = low.dp.gather_buckets(vs) if gather else low.dp.buckets[vs]
    scale = low.pe / low.ge if gather else 1.0
    out: Counter[CommOp] = Counter()
    for b in buckets:
        out[CommOp(kind, "dp", b.nbytes * scale)] += b.count
    return out


def _replicated(low: Lowering, vs: int, micro: int) -> Counter[CommOp]:
    """Stage 0 (and stage 1/2's reduce-scatter): the last micro-batch's buckets."""
    return _buckets(low, vs, low.dp.collective)


def _sharded(low: Lowering, vs: int, micro: int) -> Counter[CommOp]:
    """Stages 1/2: the buckets, the parameter all-gather (per bucket when overlapped, else
    one), and stage 2's reduce-scatter of every earlier micro-batch."""
    out = _buckets(low, vs, low.dp.collective)
    params = low.work[vs].params
    if low.par.overlap.param_gather and not low.par.offload.optimizer_states:
        out.update(_buckets(low, vs, "all_gather", gather=True))
    else:
        out[CommOp("all_gather", "dp", params * low.pe)] += 1
    if low.par.optimizer_shard == 2:
        out[CommOp("reduce_scatter", "dp", params * low.ge)] += micro - 1
    return out


def _per_unit(low: Lowering, vs: int, micro: int) -> Counter[CommOp]:
    """Stage 3: every micro-batch gathers each unit before its forward and (without
    recompute) before its backward, or its chunk before the recompute pass (unless the
    forward's are kept), and reduce-scatters each unit's gradient."""
    out: Counter[CommOp] = Counter()
    units = [n for n in low.work[vs].piece_params if n > 0]
    for n in units:
        out[CommOp("all_gather", "dp", n * low.e)] += micro
        out[CommOp("reduce_scatter", "dp", n * low.ge)] += micro
        if low.par.recompute == "none":
            out[CommOp("all_gather", "dp", n * low.e)] += micro
    if low.par.recompute != "none" and low.par.recompute_comm.optimizer:
        out[CommOp("all_gather", "dp", low.work[vs].params * low.e)] += micro
    return out


def _server(low: Lowering, vs: int, micro: int) -> Counter[CommOp]:
    """Parameter server: the gradient pushes and the parameter pull."""
    out = _buckets(low, vs, "ps_push")
    out[CommOp("ps_pull", "dp", low.work[vs].params * low.e)] += 1
    return out


# by strategy class name (lower.reduction), most derived first in each MRO
_STRATEGY_OPS: dict[str, Callable[[Lowering, int, int], Counter[CommOp]]] = {
    "NoDataParallel": lambda low, vs, micro: Counter(),
    "ParameterServer": _server,
    "ShardedParameters": _per_unit,
    "ShardedStates": _sharded,
    "DataParallel": _replicated,
}


def _strategy_ops(low: Lowering, vs: int, micro: int) -> Counter[CommOp]:
    for cls in type(low.dp).__mro__:
        rule = _STRATEGY_OPS.get(cls.__name__)
        if rule is not None:
            return rule(low, vs, micro)
    raise KeyError(f"no communication-operator rule for {type(low.dp).__name__} "
                   f"(registered: {', '.join(_STRATEGY_OPS)})")


def stage_ops(low: Lowering, stage: int) -> Counter[CommOp]:
    """The communication operators (class: instances) of the compiled graph of a device of
    pipeline stage `stage`."""
    out: Counter[CommOp] = Counter()
    for vs in range(len(low.work)):
        if low.ranks.stage_of_virtual(vs) != stage:
            continue
        # the micro-batches through vs (all, or under DualPipe its direction's half)
        micro = low.sc.grad_accum_steps // (2 if low.ranks.mirrored else 1)
        for op, n in _micro_ops(low, vs).items():
            out[op] += n * micro
        out.update(_strategy_ops(low, vs, micro))
        # the gradient reductions on the other axes, one coalesced buffer per kind
        out.update(CommOp(kind, "model", nb) for kind, nb in low.work[vs].grad_sync.comm)
    return +out  # classes with no instance dropped


def distinct_ops(ops: Counter[CommOp], reuse: bool, cap: int) -> int:
    """Compiled communication operators: every instance, or with reuse one per class whose
    instances become calls of its subgraph (largest classes first, at most `cap`
    instances replaced in all), plus those left over."""
    if not reuse:
        return sum(ops.values())
    distinct, left = 0, cap
    for n in sorted(ops.values(), reverse=True):
        replaced = min(n, left) if n > 1 else 0
        left -= replaced
        distinct += (1 if replaced else 0) + n - replaced
    return distinct


def comm_subgraph_report(low: Lowering) -> dict[str, object]:
    """`run --json`'s `comm_subgraph`: the busiest stage's operator counts and build time."""
    spec = low.par.comm_subgraph
    per_stage = [stage_ops(low, s) for s in range(low.ranks.pipeline)]
    ops = max(per_stage, key=lambda c: (sum(c.values()), len(c)))
    distinct = distinct_ops(ops, spec.reuse, spec.max_reused_ops)
    return {"reuse": spec.reuse, "comm_ops": sum(ops.values()), "classes": len(ops),
            "distinct_ops": distinct, "build_ms_per_op": spec.build_ms_per_op,
            "build_s": distinct * spec.build_ms_per_op / 1e3}


def extras(low: Lowering) -> tuple[tuple[str, object], ...]:
    """The report as a plan extra, where the scenario gives `parallel.comm_subgraph`."""
    if "comm_subgraph" not in low.par.model_fields_set:
        return ()
    return (("comm_subgraph", comm_subgraph_report(low)),)
