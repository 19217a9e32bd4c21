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
from dataclasses import dataclass

from simulator.config.scenario.schema import Scenario
from simulator.cost.specs import CommSpec, GroupSpec
from simulator.lower.costs import CostModel, Priced, price_ops
from simulator.lower.host import host_costs
from simulator.lower.layout import RankMesh
from simulator.lower.multicopy import multi_copy
from simulator.models.registry import family
from simulator.program.graph_stages import split_units
from simulator.program.program import GraphStages, TransformerProgram

__all__ = ["StageWork", "stage_work", "stage_layers"]


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
    layers (the ones `parallel.offload.activations` moves to the host, `schedule.offload`).
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
    # bytes per micro-batch sent to the next virtual stage (activations) and to the one
    # before (their gradients)
    send_fwd_bytes: float = 0.0
    send_bwd_bytes: float = 0.0
    recomputed: bool = False  # a recompute pass runs before each backward
    # the data-parallel reduction waits for the whole backward, as for a model kept as one
    # block (an operator graph cut into units only for recompute or offload: its gradient
    # buckets are not followed unit by unit, as without those)
    whole_grads: bool = False


def _sum(pieces: tuple[Priced, ...]) -> Priced:
    total = pieces[0]
    for piece in pieces[1:]:
        total = total + piece
    return total


def _pieces(prog: TransformerProgram, layer: Priced, head: Priced, embed: Priced,
            n: int, first: bool, last: bool, head_params: int) -> tuple[tuple, tuple]:
    pieces, params = [], []
    if last:
        pieces.append(head)
        params.append(head_params)
    pieces += [layer] * n
    params += [prog.params_per_layer] * n
    if first:
        pieces.append(embed)
        params.append(prog.params_embedding)
    return tuple(pieces), tuple(params)


def _act_pieces(prog: TransformerProgram, n: int, first: bool, last: bool
                ) -> tuple[float, ...]:
    """Saved activation bytes of each forward piece."""
    return (((prog.embed_activation_bytes,) if first else ())
            + (prog.activation_bytes_per_layer,) * n
            + ((prog.head_activation_bytes,) if last else ()))


def _grad_sync(prog: TransformerProgram, n: int, first: bool, last: bool
               ) -> tuple[CommSpec, ...]:
    """The stage's non-dp gradient reductions, one buffer per (collective, axis)."""
    parts = (prog.grad_sync_layer * n + (prog.grad_sync_embed if first else ())
             + (prog.grad_sync_head if last else ()))
    return _merged(parts)


def stage_layers(scenario: Scenario, stages: int, layer_s: float, embed_s: float,
                 head_s: float, unit: int = 1) -> tuple[int, ...]:
    """Layer blocks of each virtual stage (a block: `unit` layers, the program's layer):
    as given, or an even split with the remainder placed one block at a time on the stage
    whose work (seconds per micro-batch: its blocks, plus the embedding on the first and the
    head on the last) is least, earliest on ties."""
    given = scenario.parallel.pipeline_layers
    if given is not None:
        return tuple(n // unit for n in given)
    total = getattr(scenario.model, "layers", 1) // unit
    if not family(scenario.model).layered:
        return (1,) * stages  # an operator graph's program is the whole model as one block
    counts = [total // stages] * stages
    extra = [0.0] * stages
    extra[0] += embed_s
    extra[-1] += head_s
    for _ in range(total % stages):
        k = min(range(stages), key=lambda i: (counts[i] * layer_s + extra[i], i))
        counts[k] += 1
    return tuple(counts)


# (id(program), id(cost model), what else stage_work reads) -> (program, cost model, work):
# the entry holds both objects, so their ids cannot be reused while it is stored
_PRICED: dict[tuple, tuple[TransformerProgram, CostModel, tuple[StageWork, ...]]] = {}
PRICED_SIZE = 64  # entries kept at most, emptied when full (0: not memoised)


def stage_work(scenario: Scenario, prog: TransformerProgram, layout: RankMesh,
               costs: CostModel, layers: tuple[int, ...] | None = None
               ) -> tuple[StageWork, ...]:
    """Priced work of every virtual stage, indexed by virtual stage; `layers`: the layers
    of each virtual stage when already chosen (default: `stage_layers`).

    Memoised on the program and cost model objects themselves (both frozen) and the
    scenario fields read here: a simulation lowers the same program with the same costs
    several times (shortened runs, runs that cut collapsed buckets), and a sweep's
    configurations share both where only buckets, overlaps or the schedule differ."""
    if PRICED_SIZE <= 0:
        return _price_stages(scenario, prog, layout, costs, layers)
    p, m = scenario.parallel, scenario.model
    key = (id(prog), id(costs), layout, layers, p.overlap.copies, p.recompute,
           None if p.pipeline_layers is None else tuple(p.pipeline_layers),
           family(m).layered, getattr(m, "layers", 1))
    hit = _PRICED.get(key)
    if hit is not None and hit[0] is prog and hit[1] is costs:
        return hit[2]
    work = _price_stages(scenario, prog, layout, costs, layers)
    if len(_PRICED) >= PRICED_SIZE:
        _PRICED.clear()
    _PRICED[key] = (prog, costs, work)
    return work


def _price_stages(scenario: Scenario, prog: TransformerProgram, layout: RankMesh,
                  costs: CostModel, layers: tuple[int, ...] | None
                  ) -> tuple[StageWork, ...]:
    """`stage_work` derived."""
    groups: dict[str, GroupSpec] = layout.groups()
    c = scenario.parallel.overlap.copies
    costs = host_costs(costs, prog.host_kernels)  # operators on the host CPU (schedule.host)

    def price(ops: tuple) -> Priced:
        if c > 1:
            return multi_copy(ops, costs, groups, c)
        return price_ops(ops, costs, groups, prog.tp_overlap)

    if prog.staged is not None:
        return _price_units(scenario, prog.staged, layout.virtual_stages, price, layers,
                            lambda sync: price_ops(_merged(sync), costs, groups))
    lf, lb, lr = price(prog.layer_fwd), price(prog.layer_bwd), price(prog.layer_recompute)
    ef, eb = price(prog.embed_fwd), price(prog.embed_bwd)
    hf, hb = price(prog.head_fwd), price(prog.head_bwd)
    seconds = lambda f, b: f.compute_s + f.comm_s + b.compute_s + b.comm_s  # noqa: E731
    split = layers or stage_layers(scenario, layout.virtual_stages, seconds(lf, lb),
                                   seconds(ef, eb), seconds(hf, hb), prog.layers_per_block)
    head_params = prog.params_head + (prog.params_output if layout.pipeline > 1 else 0)
    working = 0.0
    if scenario.parallel.recompute != "none":
        working = prog.layer_working_bytes - prog.activation_bytes_per_layer
    out = []
    for vs, n in enumerate(split):
        first, last = vs == 0, vs == layout.virtual_stages - 1
        fwd_pieces = ((ef,) if first else ()) + (lf,) * n + ((hf,) if last else ())
        fwd = lf.scaled(n)
        fwd = (ef + fwd) if first else fwd
        fwd = (fwd + hf) if last else fwd
        pieces, params = _pieces(prog, lb, hb, eb, n, first, last, head_params)
        act = n * prog.activation_bytes_per_layer
        act += (prog.embed_activation_bytes if first else 0.0)
        act += (prog.head_activation_bytes if last else 0.0)
        sync = price_ops(_grad_sync(prog, n, first, last), costs, groups)
        out.append(StageWork(fwd=fwd, fwd_pieces=fwd_pieces, bwd=_sum(pieces),
                             bwd_pieces=pieces, piece_params=params,
                             recompute=lr.scaled(n), params=sum(params),
                             activation_bytes=act, working_bytes=working,
                             layers=n * prog.layers_per_block,
                             grad_sync=sync, act_pieces=_act_pieces(prog, n, first, last),
                             offloadable=(False,) * first + (True,) * n + (False,) * last,
                             unsharded=n * prog.unsharded_per_layer
                             + (prog.unsharded_embedding if first else 0)
                             + (prog.unsharded_head if last else 0),
                             send_fwd_bytes=prog.boundary_bytes,
                             send_bwd_bytes=prog.boundary_bytes,
                             recomputed=scenario.parallel.recompute != "none"))
    return tuple(out)


def _price_units(scenario: Scenario, staged: GraphStages, stages: int,
                 price: Callable[[tuple], Priced], layers: tuple[int, ...] | None,
                 price_sync: Callable[[tuple[CommSpec, ...]], Priced]
                 ) -> tuple[StageWork, ...]:
    """The virtual stages of an operator graph cut into units (`schedule.graph_stages`):
    each unit a forward and a backward piece (the pieces `schedule.offload` copies to and
    from the host, as a transformer's layers), the stage's sends the bytes crossing its
    cuts."""
    fwd = [price(u.fwd) for u in staged.units]
    bwd = [price(u.bwd) for u in staged.units]
    seconds = [f.compute_s + f.comm_s + b.compute_s + b.comm_s for f, b in zip(fwd, bwd)]
    counts = layers or split_units(scenario, staged, stages, seconds)
    out, start = [], 0
    for vs, n in enumerate(counts):
        stop = start + n
        units = staged.units[start:stop]
        params = tuple(u.params for u in units)[::-1]  # backward order
        again = tuple(op for u in units for op in u.recompute)
        out.append(StageWork(
            fwd=_sum(tuple(fwd[start:stop])), fwd_pieces=tuple(fwd[start:stop]),
            bwd=_sum(tuple(bwd[start:stop][::-1])), bwd_pieces=tuple(bwd[start:stop][::-1]),
            piece_params=params, recompute=price(again) if again else Priced(0.0, 0.0, ()),
            params=sum(params), activation_bytes=staged.activation_bytes(start, stop),
            working_bytes=staged.working_bytes(start, stop), recomputed=bool(again),
            whole_grads=stages == 1,
            layers=n, grad_sync=price_sync(tuple(c for u in units for c in u.grad_sync)),
            act_pieces=staged.unit_activation_bytes(start, stop),
            # the last unit's activations are read by the backward right after its forward
            offloadable=(True,) * (n - 1) + (vs < stages - 1,),
            send_fwd_bytes=staged.cut_fwd_bytes[stop - 1] if vs < stages - 1 else 0.0,
            send_bwd_bytes=staged.cut_bwd_bytes[start - 1] if vs > 0 else 0.0))
        start = stop
    return tuple(out)


def _merged(specs: tuple[CommSpec, ...]) -> tuple[CommSpec, ...]:
    """One buffer per (collective, axis), as the whole graph's gradient reductions are."""
    out: dict[tuple[str, str], float] = {}
    for c in specs:
        out[(c.collective, c.axis)] = out.get((c.collective, c.axis), 0.0) + c.bytes
    return tuple(CommSpec(f"grad_sync.{k}", k, b, a, "bwd")  # type: ignore[arg-type]
                 for (k, a), b in out.items())
