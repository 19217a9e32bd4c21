"""The priced work of each virtual pipeline stage for one micro-batch.

Each virtual stage holds `parallel.pipeline_layers[vs]` layers, or by default an even split
whose remainder goes, layer by layer, to the stage with the least priced work so far (the
embedding joins the first virtual stage and the LM head with its loss the last, as in
Megatron-LM, so those two take extra layers last).

Multi-copy (`overlap.copies = c`, MindSpore's multi-copy parallel) splits each micro-batch
into c slices whose tensor-parallel collectives run under the other slices' kernels: each
op sequence is priced by an event simulation of the c interleaved copies
(`simulator.lower.multicopy`), which replaces the chunked TP-comm overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import CommSpec, ComputeSpec, GroupSpec
from simulator.lower.costs import CostModel, Priced, price_ops
from simulator.lower.cuda_graphs import graphs_for
from simulator.lower.host import host_costs
from simulator.lower.layout import RankMesh
from simulator.lower.moe_host import is_moe_layer, moe_host, price_synced, price_unsynced
from simulator.lower.moe_pair_host import pair_segment_s
from simulator.lower.multicopy import multi_copy
from simulator.models.split import StageSplit, stage_layers, unit_split
from simulator.program.program import Block, Op, Program, coalesce, runs

__all__ = ["StageWork", "stage_work", "split_for", "split_backward"]


@dataclass(frozen=True)
class StageWork:
    """One virtual stage, one micro-batch, on one device.

    bwd: the whole backward; bwd_pieces: the same in execution order ([head], each layer,
    [embedding]);
    piece_params: parameters whose gradients are complete after each piece (for buckets).
    fwd_pieces: the forward in execution order ([embedding], each layer, [head]), whose
    parameters are piece_params reversed (for the overlapped parameter all-gather).
    activation_bytes: saved for backward per micro-batch; working_bytes: extra bytes alive
    while a recomputed micro-batch runs its backward (one layer's full saved set).
    grad_sync: the stage's gradient reductions on non-dp axes, once per iteration, each
    collective kind coalesced into one buffer.
    act_pieces / offloadable: activation_bytes split by forward piece, and which pieces are
    layers (the ones `parallel.offload.activations` moves to the host, `lower.offload`).
    """

    fwd: Priced
    fwd_pieces: tuple[Priced, ...]
    bwd: Priced
    bwd_pieces: tuple[Priced, ...]
    piece_params: tuple[int, ...]
    recompute: Priced
    params: int
    activation_bytes: float
    working_bytes: float
    layers: int
    grad_sync: Priced = Priced(0.0, 0.0, ())
    act_pieces: tuple[float, ...] = ()  # activation_bytes by fwd piece ([embed], layers, [head])
    offloadable: tuple[bool, ...] = ()  # per fwd piece: a layer (offload.activations moves it)
    unsharded: int = 0  # parameter elements the optimizer keeps whole (threshold)
    worker_params: int = 0  # elements the workers all-reduce beside parameter servers
    expert_params: int = 0  # parameter elements of experts (split on `ep`)
    # the same by backward piece (aligned with piece_params)
    piece_unsharded: tuple[int, ...] = ()
    piece_worker: tuple[int, ...] = ()
    # bytes per micro-batch sent to the next virtual stage (activations) and to the one
    # before (their gradients)
    send_fwd_bytes: float = 0.0
    send_bwd_bytes: float = 0.0
    recomputed: bool = False  # a recompute pass runs before each backward
    # bytes the first backward piece (the head's, on the last stage) allocates and frees:
    # the loss's gradient buffers beyond the saved set (program.head_transient_bytes)
    transient_bytes: float = 0.0
    # the data-parallel reduction waits for the whole backward, as for a model kept as one
    # block (an operator graph cut into units only for recompute or offload: its gradient
    # buckets are not followed unit by unit, as without those)
    whole_grads: bool = False
    # the backward split for a schedule that runs W passes (`lower.pipeline`, zb_h1; Qi
    # et al. 2023, Sec. 2): per bwd piece, its input-gradient part (B: every kernel but the
    # `weight_grad` ones) and its weight-gradient part (W), each priced as a sequence of its
    # own; the bytes W reads that outlive B (`split_backward`): the saved inputs X of its
    # GEMMs, which B leaves saved, and the output gradients dY, which B allocates
    input_pieces: tuple[Priced, ...] = ()
    weight_pieces: tuple[Priced, ...] = ()
    w_input_bytes: float = 0.0
    w_grad_bytes: float = 0.0
    # the program's blocks the stage runs, in forward order, and how many copies of the
    # cut sequence they include (the stage's share of a split)
    blocks: tuple[Block, ...] = ()
    copies: int = 0
    # per MoE layer of the stage, in forward order: its overlapped forward-backward pair's
    # host-bound segment less its forward's and backward's compute priced alone
    # (`lower.moe_pair_host`; moe_a2a with the dispatcher's sync only)
    pair_deltas: tuple[float, ...] = ()


def _sum(pieces: tuple[Priced, ...]) -> Priced:
    total = pieces[0]
    for piece in pieces[1:]:
        total = total + piece
    return total


_NONE = Priced(0.0, 0.0, ())


def split_backward(fwd: tuple[Op, ...], bwd: tuple[Op, ...]
                   ) -> tuple[tuple[Op, ...], tuple[Op, ...], float, float]:
    """(B ops, W ops, X bytes, dY bytes) of one backward: W the `weight_grad` kernels, B
    the rest in their order. What W reads that must outlive B: the inputs X its GEMMs'
    forward kernels (`fwd`, the same kernel name before the suffix) saved, as saved (under
    sequence parallelism the shard, re-gathered by W as Megatron's zero-bubble
    LinearWithGradAccumulation does), and the output gradients dY as its GEMMs read them
    (a GEMM (m, n, k) reads k(m + n) elements: dY is its forward's output)."""
    forward = {op.name: op for op in fwd if isinstance(op, ComputeSpec) and op.gemm_mnk}
    b_ops = tuple(op for op in bwd if not getattr(op, "weight_grad", False))
    w_ops = tuple(op for op in bwd if getattr(op, "weight_grad", False))
    x = dy = 0.0
    for op in w_ops:
        f = forward.get(op.name.rpartition(".")[0])
        if not isinstance(op, ComputeSpec) or op.gemm_mnk is None or f is None:
            continue
        m, n, k = op.gemm_mnk
        per = op.bytes_accessed / (op.gemm_batch * (m * k + k * n + m * n))  # bytes/element
        fm, fn, _ = f.gemm_mnk or (0, 0, 0)
        dy += per * min(f.gemm_batch * fm * fn, op.gemm_batch * k * (m + n))
        x += f.saved_bytes
    return b_ops, w_ops, x, dy


@dataclass(frozen=True)
class _Split:
    """One block's backward as B and W (`split_backward`), priced."""

    b: Priced
    w: Priced
    x: float
    dy: float


def _priced_split(fwd: tuple[Op, ...], bwd: tuple[Op, ...], price: Callable[[tuple], Priced]
                  ) -> _Split:
    b_ops, w_ops, x, dy = split_backward(fwd, bwd)
    return _Split(price(b_ops) if b_ops else _NONE, price(w_ops) if w_ops else _NONE, x, dy)


# (id(program), id(cost model), what else stage_work reads) -> (program, cost model, work):
# the entry holds both objects, so their ids cannot be reused while it is stored
_PRICED: dict[tuple, tuple[Program, CostModel, tuple[StageWork, ...]]] = {}
PRICED_SIZE = 64  # entries kept at most, emptied when full (0: not memoised)


def stage_work(scenario: Scenario, prog: Program, layout: RankMesh,
               costs: CostModel, layers: tuple[int, ...] | None = None
               ) -> tuple[StageWork, ...]:
    """Priced work of every virtual stage, indexed by virtual stage; `layers`: copies of
    the cut sequence on each virtual stage when already chosen (default: `_default_split`).

    Memoised on the program and cost model objects themselves (both frozen) and the
    scenario fields read here: a simulation lowers the same program with the same costs
    several times (shortened runs, runs that cut collapsed buckets), and a sweep's
    configurations share both where only buckets, overlaps or the schedule differ."""
    if PRICED_SIZE <= 0:
        return _price_stages(scenario, prog, layout, costs, layers)
    p = scenario.parallel
    g = scenario.training.cuda_graphs
    key = (id(prog), id(costs), layout, layers, p.overlap.copies, p.overlap.moe_a2a,
           None if p.pipeline_layers is None else tuple(p.pipeline_layers),
           g.impl, tuple(g.scope))
    hit = _PRICED.get(key)
    if hit is not None and hit[0] is prog and hit[1] is costs:
        return hit[2]
    work = _price_stages(scenario, prog, layout, costs, layers)
    if len(_PRICED) >= PRICED_SIZE:
        _PRICED.clear()
    _PRICED[key] = (prog, costs, work)
    return work


def _price_stages(scenario: Scenario, prog: Program, layout: RankMesh,
                  costs: CostModel, layers: tuple[int, ...] | None
                  ) -> tuple[StageWork, ...]:
    """`stage_work` derived."""
    groups: dict[str, GroupSpec] = layout.groups()
    c = scenario.parallel.overlap.copies
    costs = host_costs(costs, prog.host_kernels)  # operators on the host CPU (program.host)
    graphs = graphs_for(scenario.training.cuda_graphs, costs.graph_launch_s)
    if graphs is not None:  # the run's CUDA graphs (lower.cuda_graphs)
        costs = replace(costs, graphs=graphs)

    host = moe_host(scenario, costs) if c == 1 else None  # lower.moe_host

    def price(ops: tuple) -> Priced:
        if c > 1:
            return multi_copy(ops, costs, groups, c)
        if host is not None and is_moe_layer(ops):
            return price_unsynced(ops, costs, groups, host, prog.tp_overlap)
        return price_ops(ops, costs, groups, prog.tp_overlap)

    def price_fwd(ops: tuple) -> Priced:
        # an MoE layer's forward (and its re-run under recompute, `_stage`) waits for the
        # device at its dispatcher's sync
        if host is not None and host.sync and is_moe_layer(ops):
            return price_synced(ops, costs, groups, host, prog.tp_overlap)
        return price(ops)

    priced = {id(b): _Priced(price_fwd(b.fwd), price(b.bwd),
                             _priced_split(b.fwd, b.bwd, price))
              for b in prog.blocks}
    # moe_a2a pairs of host-bound MoE layers: one segment per layer pair (lower.moe_pair_host)
    deltas: dict[int, float] = {}
    if host is not None and host.sync and scenario.parallel.overlap.moe_a2a:
        for b in prog.blocks:
            seg = pair_segment_s(b.fwd, b.bwd, costs, groups, host) if b.layers == 1 else None
            if seg is not None:
                deltas[id(b)] = seg - priced[id(b)].fwd.compute_s - priced[id(b)].bwd.compute_s
    # DualPipe: the p stages of one direction, the reverse direction's the same again
    stages = layout.pipeline if layout.mirrored else layout.virtual_stages
    counts = layers[:stages] if layers else _default_split(scenario, prog, stages, priced)
    out, start = [], 0
    for vs, n in enumerate(counts):
        stop = start + n
        work = _stage(prog, layout, priced, price_fwd, start, stop, vs, stages,
                      lambda sync: price_ops(coalesce(sync, "grad_sync"), costs, groups),
                      scenario.parallel.optimizer_shard)
        out.append(replace(work, pair_deltas=tuple(
            deltas[id(b)] for b in work.blocks if id(b) in deltas)) if deltas else work)
        start = stop
    return tuple(out) * (2 if layout.mirrored else 1)


@dataclass(frozen=True)
class _Priced:
    """One block's forward and backward priced, and its backward split into B and W."""

    fwd: Priced
    bwd: Priced
    split: _Split


def _fold(runs: list[tuple[Block, int]], value: Callable[[Block], Priced]) -> Priced:
    """The runs' values added in order, a run of k copies its block's value scaled by k."""
    total = value(runs[0][0]).scaled(runs[0][1])
    for b, k in runs[1:]:
        total = total + value(b).scaled(k)
    return total


def _stage(prog: Program, layout: RankMesh, priced: dict[int, _Priced],
           price: Callable[[tuple], Priced], start: int, stop: int, vs: int, stages: int,
           price_sync: Callable[[tuple[CommSpec, ...]], Priced], shard: int = 0
           ) -> StageWork:
    """The StageWork of virtual stage vs: copies start..stop-1 of the cut sequence, with
    the blocks pinned to its end of the model."""
    first, last = vs == 0, vs == stages - 1
    blocks = prog.stage(start, stop, first, last)
    seq = prog.sequence()
    stage_runs = runs(blocks)
    back = blocks[::-1]
    # a tied table (a tied LM head's, or the embedding MTP modules share) is held again on
    # the last stage's device; not under DualPipe, whose devices each hold a first and a
    # last stage: "we deploy the shallowest layers (including the embedding layer) and
    # deepest layers (including the output head) of the model on the same PP rank. This
    # arrangement enables the physical sharing of parameters and gradients, of the shared
    # embedding and output head" (DeepSeek-V3, arXiv:2412.19437 Sec. 3.2.3)
    tied = layout.pipeline > 1 and not layout.mirrored
    params = tuple(b.params + (b.tied_params if tied else 0) for b in back)
    # ... though under ZeRO-2/3 the head's share of its gradient is reduced (and its
    # parameters gathered) with the head's micro-batches, as a copy's would be
    pieces_of = params if tied or layout.pipeline == 1 or shard < 2 else tuple(
        b.params + b.tied_params for b in back)
    # a stage's re-run is one pass: a run of one repeated block priced once and scaled,
    # distinct blocks' ops priced as one sequence
    again = [(b, k) for b, k in stage_runs if b.recompute]
    if not again:
        recompute = _NONE
    elif len(again) == 1:
        recompute = price(again[0][0].recompute).scaled(again[0][1])
    else:
        recompute = price(tuple(op for b, k in again for _ in range(k) for op in b.recompute))
    working = prog.working_bytes(start, stop)
    transient = max((b.transient_bytes for b in blocks), default=0.0)
    x = dy = 0.0
    for b, k in stage_runs:
        sp = priced[id(b)].split
        x += k * sp.x
        dy += k * sp.dy
    pieces = tuple(priced[id(b)].bwd for b in back)
    copies = seq[start:stop]
    return StageWork(
        fwd=_fold(stage_runs, lambda b: priced[id(b)].fwd),
        fwd_pieces=tuple(priced[id(b)].fwd for b in blocks),
        bwd=_sum(pieces), bwd_pieces=pieces, piece_params=pieces_of, recompute=recompute,
        params=sum(params), activation_bytes=prog.saved_bytes(start, stop, first, last),
        working_bytes=working,
        layers=sum(b.layers for b in copies),
        grad_sync=price_sync(tuple(c for b in copies for c in b.grad_sync)
                             + tuple(c for b in blocks if b.pinned for c in b.grad_sync)),
        act_pieces=prog.saved_by_block(start, stop, first, last),
        offloadable=tuple(b.pinned is None and not (vs == stages - 1 and i == len(blocks) - 1)
                          for i, b in enumerate(blocks)),
        unsharded=sum(b.unsharded for b in blocks),
        expert_params=sum(b.expert_params for b in blocks),
        piece_unsharded=tuple(b.unsharded for b in back),
        worker_params=sum(b.worker_params for b in blocks),
        piece_worker=tuple(b.worker_params for b in back),
        send_fwd_bytes=seq[stop - 1].send_fwd_bytes if vs < stages - 1 and stop else 0.0,
        send_bwd_bytes=seq[start - 1].send_bwd_bytes if vs > 0 and start else 0.0,
        recomputed=any(b.recomputes for b in blocks),
        transient_bytes=max(0.0, transient - working) if transient else 0.0,
        whole_grads=prog.whole_grads and stages == 1,
        input_pieces=tuple(priced[id(b)].split.b for b in back),
        weight_pieces=tuple(priced[id(b)].split.w for b in back),
        w_input_bytes=x, w_grad_bytes=dy, blocks=blocks, copies=stop - start)


def split_for(scenario: Scenario, prog: Program, layout: RankMesh, costs: CostModel
              ) -> StageSplit:
    """The StageSplit `run` lowers `prog` with: `parallel.pipeline_layers` or the
    operators' stages where given, else the balance priced on `costs`."""
    work = stage_work(scenario, prog, layout, costs)
    if layout.mirrored:  # one direction's stages (DualPipe): the copy holds the same
        work = work[:layout.pipeline]
    return StageSplit(tuple(w.copies for w in work), prog.sequence()[0].layers)


def _default_split(scenario: Scenario, prog: Program, stages: int,
                   priced: dict[int, _Priced]) -> tuple[int, ...]:
    """Copies of the cut sequence on each virtual stage when the scenario does not give
    them: a sequence of one repeated block split evenly (`stage_layers`), distinct blocks
    balanced on their priced seconds, the pinned blocks counted on the first and last
    (`models.split.unit_split`). Without a profile the
    split by count is `models.split.by_count`."""
    seq = prog.sequence()

    def seconds(bs: tuple[Block, ...]) -> float:
        return sum(priced[id(b)].fwd.compute_s + priced[id(b)].fwd.comm_s
                   + priced[id(b)].bwd.compute_s + priced[id(b)].bwd.comm_s for b in bs)

    if prog.fixed is None and seq and all(b is seq[0] for b in seq):
        return stage_layers(scenario, stages, len(seq), seconds(seq[:1]),
                            seconds(prog.pinned("first")), seconds(prog.pinned("last")),
                            seq[0].layers)
    weights = [seconds((b,)) for b in seq]
    if weights and prog.fixed is None:
        # the blocks pinned to the first and last stage weigh on them, as in stage_layers
        weights[0] += seconds(prog.pinned("first"))
        weights[-1] += seconds(prog.pinned("last"))
    return unit_split(scenario, len(seq), prog.fixed, prog.spans, stages, weights)
