"""Pipeline stages on devices of their own in `verify`: those of an operator graph (mlp,
resnet, graph) and of a transformer (the embedding with the first stage's layers, the head
with the last's), given as {operator: virtual stage} (`simulation.verify.pipeline_split`
of the StageSplit `run` lowers with, `models.split`).

Each virtual stage runs its operators (the units of `models.split`) on an `Execution` of its own:
its own devices (the graph's mesh, once per stage), holding only its parameters and the
inputs its operators read. Between adjacent stages the tensors crossing the cut are sent
block by block, rank r of one stage to rank r of the next (the same mesh coordinates, as
the lowering pairs the ranks of adjacent stages): the activations forward, and back the
gradient contributions of the later stages' operators, each in the layout it was produced
in, summed by the receiving stage into its own. The sends of the first micro-batch are
recorded (what each stage received) for `verify` to check against the same sends of a
single-device run; `SendFaults` drops or corrupts one of them (mutation tests). A weight
read on two stages (a transformer's embedding tied to its LM head) has its later stage's
gradient sent to the earlier one and summed (`StagedRun._tied`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from simulator.numeric.dist import DistTensor, add, assemble, distribute
from simulator.numeric.execution import Execution, backward_op, collect, forward_op, release
from simulator.numeric.recompute import Recompute, recompute_runs, regather, rerun
from simulator.numeric.stacked_saved import clear_saved
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import ShardingPlan, build_plan

__all__ = ["SendFaults", "StagedRun", "SendKey", "PipelineSplit", "reference_sends",
           "transformer_stage_of", "layer_count"]

SendKey = tuple[str, int, int, str]  # (direction 'fwd' | 'bwd', from stage, to stage, tensor)


@dataclass(frozen=True)
class SendFaults:
    """Mutations of the sends between stages: `drop` (direction, sending stage) delivers
    zeros instead of that stage's sends; `corrupt` (direction, sending stage) adds 1 to the
    first element of each tensor it sends on its first rank."""

    drop: tuple[str, int] | None = None
    corrupt: tuple[str, int] | None = None


@dataclass(frozen=True)
class PipelineSplit:
    """Where a graph's operators run: `stage_of` (operator -> virtual stage), the
    pipeline's `stages` (groups of devices; virtual stage v runs on group v % stages), and
    the send mutations to inject."""

    stage_of: dict[str, int]
    stages: int
    faults: SendFaults = SendFaults()

    def note(self, per_stage: int, sends: int) -> str:
        counts = [list(self.stage_of.values()).count(v)
                  for v in range(max(self.stage_of.values()) + 1)]
        return (f"pipeline={self.stages}: each stage ran on its own {per_stage} devices "
                f"(operators per stage {'/'.join(map(str, counts))}); {sends} sends between "
                f"stages, those of the first micro-batch checked against the same sends on "
                f"one device per stage")


@dataclass
class StagedRun:
    """A callable with `run_microbatch`'s signature that runs the plan's operators stage by
    stage (`stage_of`: operator name -> virtual stage), each on an Execution of its own
    sharing the caller's fault settings and collective log."""

    plan: ShardingPlan
    stage_of: dict[str, int]
    faults: SendFaults = field(default_factory=SendFaults)
    # what each stage received in the first micro-batch, assembled (a backward tensor sent
    # in several layouts: their sum), and the sends of all micro-batches
    received: dict[SendKey, np.ndarray] = field(default_factory=dict)
    sends: int = 0
    _calls: int = 0
    # this micro-batch's recompute: the runs of ops re-run before their backward
    # ({last op: run}), the regather of sharded parameters, each stage's forward cache
    _runs: dict[int, list[int]] = field(default_factory=dict)
    _rerun: tuple = (None, None, [])

    @property
    def stages(self) -> int:
        return max(self.stage_of.values()) + 1

    def _ops(self, stage: int) -> list[int]:
        return [k for k, p in enumerate(self.plan.ops) if self.stage_of[p.op.name] == stage]

    def _send(self, t: DistTensor, key: SendKey) -> DistTensor:
        """`t` copied from the ranks of stage key[1] to those of stage key[2]."""
        direction, src = key[0], key[1]
        blocks = [np.array(b, copy=True) for b in t.blocks]
        if self.faults.drop == (direction, src):
            blocks = [np.zeros_like(b) for b in blocks]
        if self.faults.corrupt == (direction, src) and blocks and blocks[0].size:
            blocks[0].flat[0] += 1.0
        self.sends += 1
        out = DistTensor(t.shape, t.layout, tuple(blocks))
        if self._calls == 1:
            whole = assemble(out, self.plan.mesh)
            self.received[key] = self.received[key] + whole if key in self.received else whole
        return out

    def __call__(self, ex: Execution, params: dict[str, DistTensor],
                 batch: dict[str, np.ndarray], loss_scale: float, on_op=None,
                 batch_offset: int = 0, backward: bool = True,
                 recompute: Recompute | None = None,
                 gather: Callable[[str], DistTensor | None] | None = None
                 ) -> dict[str, DistTensor]:
        """`recompute` and `gather` as `run_microbatch`'s: a run of recomputed ops lies in
        one checkpointed block, which one stage holds."""
        clear_saved()  # what a forward keeps for its backward is this micro-batch's only
        self._calls += 1
        plan, n = self.plan, self.stages
        exs = [Execution(plan, ex.faults, comm_log=ex.comm_log, vectorised=ex.vectorised,
                         free=ex.free, tick=ex.tick)
               for _ in range(n)]
        reads = [{name for k in self._ops(s) for name in plan.ops[k].op.inputs}
                 for s in range(n)]
        for s, e in enumerate(exs):
            e.batch_offset = batch_offset
            e.values = {k: v for k, v in params.items() if k in reads[s]}
            for name, full in batch.items():
                if name in reads[s]:
                    e.values[name] = distribute(full, plan.layouts[name], plan.mesh)
        caches: list[dict] = [{} for _ in range(n)]
        saved = self._forward(exs, on_op, caches)
        self._runs = recompute_runs(plan, recompute) if recompute is not None and backward else {}
        for run in self._runs.values():
            assert len({self.stage_of[plan.ops[k].op.name] for k in run}) == 1
            for k in run:  # nothing of a recomputed op is kept for the backward
                saved[k] = None
        ex.recomputed_ops += sum(len(run) for run in self._runs.values())
        if ex.host is not None:
            ex.host.saved(plan, saved)
        if recompute is None or recompute.collectives:
            for cache in caches:  # the backward reads the moved inputs through `saved` only
                cache.clear()
        self._rerun = (recompute, gather, caches)
        out = self._backward(exs, saved, params, loss_scale) if backward else {}
        clear_saved()
        return out

    def _tied(self, ex: Execution, name: str, later: DistTensor, own: DistTensor,
              stages: tuple[int, int]) -> DistTensor:
        """A weight read on two stages (the LM head tied to the embedding): the later
        stage's gradient sent to the earlier and summed there, as Megatron-LM's
        `_allreduce_word_embedding_grads` all-reduces it over the embedding group
        (megatron/core/distributed/finalize_model_grads.py); both copies then take the same
        update. The sum is in the later stage's layout, as one device sums the two
        contributions (the head's first)."""
        got = self._send(later, ("bwd", stages[0], stages[1], name))
        return add(got, ex.move(own, got.layout, forward=False))

    def _again(self, ex: Execution, k: int, stage: int, saved: dict) -> None:
        """The run of recomputed ops ending at op `k` run forward again on its stage (its
        redistributions again, or their kept results; its parameters gathered again)."""
        rc, gather, caches = self._rerun
        again = {} if rc.collectives else caches[stage]
        if rc.gathers and gather is not None:
            again = regather(ex, [self.plan.ops[j] for j in self._runs[k]], gather, again)
        rerun(ex, rc, k, self._runs[k], saved, again)

    def _forward(self, exs: list[Execution], on_op, caches: list[dict]
                 ) -> dict[int, list[DistTensor] | None]:
        plan = self.plan
        saved: dict[int, list[DistTensor] | None] = {}
        made: dict[str, int] = {}
        for s, e in enumerate(exs):
            if s > 0:
                for name in made:  # produced up to stage s-1, read from s on
                    if any(self.stage_of[c.name] >= s for c in plan.graph.consumers(name)):
                        e.values[name] = self._send(exs[s - 1].values[name],
                                                    ("fwd", s - 1, s, name))
            cache = caches[s]
            for k in self._ops(s):
                p = plan.ops[k]
                saved[k] = forward_op(e, p, cache)
                made[p.op.output] = s
                if e.tick is not None:
                    e.tick()
                if on_op is not None:
                    on_op(p.op.output, e.values[p.op.output])
        return saved

    def _backward(self, exs: list[Execution], saved: dict[int, list[DistTensor] | None],
                  params: dict[str, DistTensor], loss_scale: float) -> dict[str, DistTensor]:
        plan, n = self.plan, self.stages
        loss = exs[-1].values[plan.graph.loss]
        layout = plan.loss_grad_layout()
        grads: list[dict] = [{} for _ in range(n)]
        grads[-1][plan.graph.loss] = {layout: distribute(np.full(loss.shape, loss_scale),
                                                         layout, plan.mesh)}
        out: dict[str, DistTensor] = {}
        held: dict[str, int] = {}  # the stage whose gradient `out` holds
        for s in reversed(range(n)):
            for k in reversed(self._ops(s)):
                if k in self._runs:
                    self._again(exs[s], k, s, saved)
                ins = saved[k]
                assert ins is not None
                backward_op(exs[s], plan.ops[k], ins, grads[s])
                release(exs[s], plan.ops[k], saved, k)
                tick = exs[s].tick
                if tick is not None:
                    tick()
            for name in [m for m in grads[s] if m in params]:
                total = collect(exs[s], name, grads[s], None)
                if total is None:
                    continue
                if name in out:  # a weight read on two stages: the tied embedding
                    total = self._tied(exs[s], name, out[name], total, (held[name], s))
                out[name], held[name] = total, s
            assert s > 0 or not grads[s], "gradients left for activations of no stage"
            for name, slots in grads[s].items():  # activations of earlier stages
                for lay, g in slots.items():
                    got = self._send(g, ("bwd", s, s - 1, name))
                    slot = grads[s - 1].setdefault(name, {})
                    slot[lay] = add(slot.get(lay), got)
        return out


def reference_sends(graph, stage_of: dict[str, int], params: dict[str, np.ndarray],
                    batch: dict[str, np.ndarray], loss_scale: float
                    ) -> dict[SendKey, np.ndarray]:
    """The sends of one micro-batch of `graph` (strategies dropped) on one device per
    stage: what each stage must receive."""

    plan = build_plan(graph, Mesh.of(single=1))
    run = StagedRun(plan, stage_of)
    dist = {n: distribute(v, plan.layouts[n], plan.mesh) for n, v in params.items()}
    run(Execution(plan), dist, batch, loss_scale)
    return run.received


def _layer_of(op_name: str) -> int | None:
    """The transformer layer an operator of `build_gpt` belongs to (`l3.q`: 3); None for
    the embedding and the head."""
    head, dot, _ = op_name.partition(".")
    return int(head[1:]) if dot and head[:1] == "l" and head[1:].isdigit() else None


def transformer_stage_of(graph, counts: tuple[int, ...]) -> dict[str, int]:
    """{operator: virtual stage} of a transformer pipeline's verify graph (`build_gpt`) whose
    virtual stages hold `counts` layers: the embedding with the first virtual stage's
    layers, the final norm, LM head and loss with the last's (Megatron-LM's split)."""
    chunks = len(counts)
    bounds = np.cumsum(counts)
    stage_of = {}
    for op in graph.ops:
        layer = _layer_of(op.name)
        stage_of[op.name] = (0 if op.name.startswith("embed") else chunks - 1) \
            if layer is None else int(np.searchsorted(bounds, layer, side="right"))
    return stage_of


def layer_count(graph) -> int:
    """Transformer layers of a verify graph (`build_gpt`)."""
    return len({n for n in map(_layer_of, (op.name for op in graph.ops)) if n is not None})
