"""`shardsim verify`: run the sharded plan on virtual numpy devices and compare every op
output (first micro-batch), every parameter gradient and every updated parameter with a
single-device run of the whole global batch (docs/contract.md section 5). The whole-batch
reference runs in a forked child beside the sharded run where that pays, and the first
micro-batch's reference forward op by op beside the sharded one (`numeric.reference`)."""

from __future__ import annotations

import dataclasses
import gc
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from simulator.graph.graph import Graph
from simulator.models.family import VerifyCase
from simulator.numeric.compare import Check
from simulator.numeric.compare import compare as _compare
from simulator.numeric.dist import DistTensor, add, assemble, distribute, replica_mismatch
from simulator.numeric.execute import run_microbatch
from simulator.numeric.execution import Execution, Faults
from simulator.numeric.heap import kept_heap
from simulator.numeric.host_trips import HostTrips
from simulator.numeric.inputs import _data, _params, _split_batch
from simulator.numeric.pipeline import (
    PipelineSplit,
    SendKey,
    StagedRun,
    reference_sends,
)
from simulator.numeric.ps import PsRun, ps_step, pushes, stale_reference
from simulator.numeric.recompute import Recompute
from simulator.numeric.reference import Beside, Streamed, fork_pays
from simulator.numeric.sharded_step import _gather, _opt_layout, _reduce, _step
from simulator.numeric.stacked_offsets import clear_dropout_masks
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import ShardingPlan, build_plan

__all__ = ["Check", "VerifyResult", "verify_case", "Progress"]


@dataclass(frozen=True)
class VerifyResult:
    scenario: str
    devices: int
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()
    tolerance: float = 1e-5
    collectives: dict[str, int] = field(default_factory=dict)
    # wall seconds of the sharded run and of the single-device references (benchmarks
    # print them; not part of the JSON contract)
    phases_s: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def shrunk_note(self) -> str | None:
        return "; ".join(self.notes) if self.notes else None

    def to_dict(self) -> dict:
        return {"scenario": self.scenario, "devices": self.devices, "ok": self.ok,
                "max_abs_error": max((c.max_abs_error for c in self.checks), default=0.0),
                "max_rel_error": max((c.max_rel_error for c in self.checks), default=0.0),
                "tensors_checked": len(self.checks), "tolerance": self.tolerance,
                "notes": list(self.notes), "collectives": dict(self.collectives),
                "checks": [{"tensor": c.tensor, "max_abs_error": c.max_abs_error,
                            "max_rel_error": c.max_rel_error, "ok": c.ok}
                           for c in self.checks]}


@dataclass
class _Outcome:
    activations: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    updated: dict[str, np.ndarray]
    replica: dict[str, float]
    collectives: dict[str, int]
    recomputed: int = 0  # op forwards run again for the backward
    # asynchronous parameter server: each worker's push of each parameter, arrival order
    pushed: dict[str, list[np.ndarray]] = field(default_factory=dict)


def _run(plan: ShardingPlan, params0, batches, kind, lr, shard, faults,
         ps: PsRun | None = None, vectorised: bool = True,
         recompute: Recompute | None = None, unsharded: frozenset[str] = frozenset(),
         runner=run_microbatch,
         on_act: Callable[[str, np.ndarray], None] | None = None,
         tick: Callable[[], None] | None = None) -> _Outcome:
    """`runner`: how one micro-batch runs (`run_microbatch`, or a graph's pipeline stages
    on devices of their own, `numeric.pipeline.StagedRun`). The first micro-batch's op
    outputs go to `on_act(name, value)` as they are computed (None: kept in the
    outcome's `activations`). `tick()` after each operator's forward and backward."""
    mesh = plan.mesh
    ex = Execution(plan, faults, vectorised=vectorised, free=True, tick=tick)
    params = {n: distribute(v, plan.layouts[n], mesh) for n, v in params0.items()}
    acts: dict[str, np.ndarray] = {}
    replica: dict[str, float] = {}
    total: dict[str, DistTensor] = {}

    def record(name: str, t: DistTensor) -> None:
        if on_act is None:
            acts[name] = assemble(t, mesh)
        else:
            on_act(name, assemble(t, mesh))
        replica[name] = replica_mismatch(t, mesh)

    # the optimizer-sharding level (ZeRO stage; True counts as 1) of each parameter: 0 for
    # those the threshold keeps whole
    levels = {n: 0 if n in unsharded else int(shard) for n in params}
    held = {n: ex.move(p, _opt_layout(plan, n, True), forward=False) if levels[n] >= 3 else p
            for n, p in params.items()}  # ZeRO-3 keeps shards (sliced locally: no transfer)
    def regather(n: str) -> Any:  # a recompute pass's gather of a ZeRO-3 shard
        return _gather(ex, plan, n, held[n], again=True) if levels.get(n, 0) >= 3 else None

    def accumulate(n: str, g: DistTensor) -> None:
        # ZeRO-2/3 reduce-scatter every micro-batch's gradients and keep only the shard
        total[n] = add(total.get(n), _reduce(ex, plan, n, g, levels[n]) if levels[n] >= 2
                       else g)

    for i, batch in enumerate(batches):
        rows = next(iter(batch.values())).shape[0] if batch else 0
        if any(v >= 3 for v in levels.values()):
            params = {n: _gather(ex, plan, n, t) if levels[n] >= 3 else t
                      for n, t in held.items()}
        # each parameter's gradient is added to the accumulated one as soon as its
        # backward is complete (`run_microbatch`'s on_grad), so that a micro-batch's
        # gradients and the accumulated ones are not all held at once
        extra = {"on_grad": accumulate} if runner is run_microbatch else {}
        local = runner(ex, params, batch, 1.0 / len(batches), record if i == 0 else None,
                       batch_offset=i * rows, recompute=recompute, gather=regather, **extra)
        for n, g in local.items():
            accumulate(n, g)
    counts: dict[str, int] = {}
    on = {n for n in params if ps is not None and ps.serves(n)}
    pushed = pushes({n: total[n] for n in on}) if ps is not None and not ps.sync else {}
    new, reduced = _step(ex, plan, {n: t for n, t in held.items() if n not in on},
                         {n: g for n, g in total.items() if n not in on}, kind, lr, levels)
    if ps is not None:  # the servers' parameters pushed, summed, updated and pulled
        served = ps_step(plan, {n: params[n] for n in on}, {n: total[n] for n in on}, kind,
                         lr, ps)
        new, reduced = ({n: (served[0] if n in on else new)[n] for n in params},
                        {n: (served[1] if n in on else reduced)[n] for n in params})
        counts = dict(served[2])
    for s in ex.comm_log:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    return _Outcome(acts, {n: assemble(g, mesh) for n, g in reduced.items()},
                    {n: assemble(t, mesh) for n, t in new.items()},
                    {**replica, **{f"{n}.updated": replica_mismatch(t, mesh)
                                   for n, t in new.items()}}, counts, ex.recomputed_ops,
                    pushed)


# `progress(what, done, total)`: what verify is doing and how far it is (the CLI's progress)
Progress = Callable[[str, int, int], None]


class _Ticks:
    """The operator steps of a run (a forward and a backward per operator and micro-batch)
    counted and reported to `progress` as `what, micro-batch i/m` with done/total steps.
    Only this process reports: a forked child running the reference calls nothing."""

    def __init__(self, progress: Progress, what: str, ops: int, batches: int) -> None:
        self.progress, self.what = progress, what
        self.per_batch, self.batches = max(2 * ops, 1), batches
        self.total, self.done, self.pid = self.per_batch * batches, 0, os.getpid()

    def __call__(self) -> None:
        if os.getpid() != self.pid:
            return
        self.done = min(self.done + 1, self.total)
        batch = min((self.done - 1) // self.per_batch + 1, self.batches)
        self.progress(f"{self.what}, micro-batch {batch}/{self.batches}", self.done,
                      self.total)


def _ignore(name: str, value: np.ndarray) -> None:
    """The whole-batch reference's op outputs are not compared (its first micro-batch's
    are, `reference.Streamed`)."""


def _unsharded(graph: Graph) -> Graph:
    """The same graph with every strategy dropped: the single-device reference."""
    return Graph(graph.tensors, tuple(dataclasses.replace(op, strategy=None)
                                      for op in graph.ops))


def _sliced(batches: list[dict[str, np.ndarray]], slices: int, faults: Faults
            ) -> list[dict[str, np.ndarray]]:
    """Each batch as its `slices` slices along the batch, in order (multi-copy); the
    mutation 'repeat' runs the first slice of each batch `slices` times."""
    out = []
    for b in batches:
        parts = _split_batch(b, slices)
        out += [parts[0]] * slices if faults.copy_fault == "repeat" else parts
    return out


def _sent(key: SendKey, got: np.ndarray | None, want: np.ndarray, tol: float,
          floor: float) -> Check:
    """What a pipeline stage received against what it must receive (a missing send
    fails)."""
    direction, src, dst, tensor = key
    name = f"{tensor}{'.grad' if direction == 'bwd' else ''} (sent stage {src} -> {dst})"
    if got is None:
        return Check(name, float("inf"), float("inf"), False)
    return _compare(name, got, want, tol, floor if direction == "bwd" else 1e-12)


def verify_case(case: VerifyCase, optimizer: str = "adam", lr: float = 1e-3, seed: int = 0,
                shard_optimizer: int = 0, faults: Faults | None = None,
                name: str = "", ps: PsRun | None = None, vectorised: bool = True,
                recompute: Recompute | None = None,
                unsharded: frozenset[str] = frozenset(), enable_alltoall: bool = True,
                pipeline: PipelineSplit | None = None, host: HostTrips | None = None,
                fork: bool | None = None, progress: Progress | None = None) -> VerifyResult:
    """`vectorised=False` runs every local kernel rank by rank (numeric.local). BLAS runs on
    one thread: verify's products are a device's blocks of small or shrunk models, where a
    second thread only adds synchronisation (a 4-device tiny transformer: 5.0 s with two
    OpenBLAS threads on 2 busy cores, 1.3 s with one). Python's cyclic garbage collector
    is paused for the run (it walked the run's many block tuples again and again: about 3%
    of the time at 256 devices); the run makes no cycles it must free early.
    `progress(what, done, total)` is called as the run goes (the sharded run and the
    single-device reference operator by operator, then the comparison)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        with threadpool_limits(limits=1, user_api="blas"), kept_heap():
            return _verify(case, optimizer, lr, seed, shard_optimizer, faults, name, ps,
                           vectorised, recompute, unsharded, enable_alltoall, pipeline, host,
                           fork, progress)
    finally:
        clear_dropout_masks()  # the memoised keep-masks are this run's only
        if collecting:
            gc.enable()


def _verify(case: VerifyCase, optimizer: str, lr: float, seed: int, shard_optimizer: int,
            faults: Faults | None, name: str, ps: PsRun | None, vectorised: bool,
            recompute: Recompute | None = None, unsharded: frozenset[str] = frozenset(),
            enable_alltoall: bool = True, pipeline: PipelineSplit | None = None,
            host: HostTrips | None = None, fork: bool | None = None,
            progress: Progress | None = None) -> VerifyResult:
    faults = faults or Faults()
    rng = np.random.default_rng(seed)
    dtype, m = case.dtype, case.micro_batches
    params = _params(case.whole, rng, dtype)
    data = _data(case.whole, rng, dtype)
    batches = (_split_batch(data, m) if not case.separate
               else [data] + [_data(case.whole, rng, dtype) for _ in range(m - 1)])
    ref_batches = batches if case.separate else [data]
    if case.slices > 1:
        batches, m = _sliced(batches, case.slices, faults), m * case.slices
    plan = build_plan(case.sharded, case.mesh, np.dtype(dtype).itemsize, enable_alltoall)
    one = Mesh.of(single=1)
    whole = build_plan(_unsharded(case.whole), one)
    tol = 1e-4 if dtype == np.float32 else 1e-5
    if fork is None:
        fork = fork_pays(sum(math.prod(t.shape) for t in case.whole.tensors.values()))
    devices = case.mesh.size * (pipeline.stages if pipeline is not None else 1)
    ticks = ref_ticks = None
    if progress is not None:
        ticks = _Ticks(progress, f"sharded run on {devices} numpy devices", len(plan.ops), m)
        ref_ticks = _Ticks(progress, "single-device reference", len(whole.ops),
                           len(ref_batches))
    t0 = time.perf_counter()
    with Beside(lambda: _run(whole, params, ref_batches, optimizer, lr, False, Faults(),
                             on_act=_ignore, tick=ref_ticks), fork) as beside:
        stages = None if pipeline is None else StagedRun(plan, pipeline.stage_of,
                                                          pipeline.faults)
        runner = stages or run_microbatch
        streamed = Streamed(build_plan(_unsharded(case.micro_reference), one), params,
                            batches[0], tol)
        got = _run(plan, params, batches, optimizer, lr, shard_optimizer, faults, ps,
                   vectorised, recompute, unsharded, host.runner(runner) if host else runner,
                   on_act=streamed, tick=ticks)
        t1 = time.perf_counter()
        if progress is not None and fork:
            progress("waiting for the single-device reference (forked beside)", 0, 1)
        ref = beside.result()
    if progress is not None:
        progress("comparing with the single-device run", 0, 1)
    phases = {"sharded": t1 - t0, "reference": beside.seconds,
              "waited": time.perf_counter() - t1, "forked": float(fork)}
    checks = streamed.checks()
    grad_scale = max((float(np.max(np.abs(g))) for g in ref.grads.values() if g.size),
                     default=0.0)
    checks += [_compare(f"{n}.grad", got.grads[n], ref.grads[n], tol, 1e-6 * grad_scale)
               for n in ref.grads]
    notes = case.notes
    if ps is None or ps.sync:
        checks += [_compare(f"{n}.updated", got.updated[n], ref.updated[n], tol)
                   for n in ref.updated]
    else:
        stale = stale_reference(optimizer, {n: params[n] for n in got.pushed}, got.pushed,
                                lr)
        checks += [_compare(f"{n}.updated", got.updated[n], stale.get(n, ref.updated[n]),
                            tol) for n in ref.updated]
        notes += ("asynchronous parameter server: each push updates parameters other workers "
                  "have moved since (staleness up to n - 1 updates), so the updates are not "
                  "the single-device step: they were compared with one device applying the "
                  "same stale pushes in the same order, and the pushes' sum with the "
                  "single-device gradient",)
    if got.recomputed:
        notes += (f"recompute: {got.recomputed} op forwards ran again before their backward, "
                  f"from the kept block inputs",)
    if host is not None:
        notes += (host.note(),)
    checks += [Check(f"{n} (replicas)", e, e, e <= tol) for n, e in got.replica.items() if e]
    if pipeline is not None and stages is not None:
        want = reference_sends(_unsharded(case.micro_reference), pipeline.stage_of, params,
                               batches[0], 1.0 / m)
        checks += [_sent(key, stages.received.get(key), ref, tol, 1e-6 * grad_scale)
                   for key, ref in want.items()]
        notes += (pipeline.note(case.mesh.size, stages.sends),)
        got.collectives["send_recv"] = stages.sends
    if progress is not None:
        progress("comparing with the single-device run", 1, 1)
    return VerifyResult(name, devices, tuple(checks), notes, tol, got.collectives, phases)
