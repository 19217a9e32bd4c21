"""`shardsim verify`: run the sharded plan on virtual numpy devices and compare every op
output (first micro-batch), every parameter gradient and every updated parameter with a
single-device run of the whole global batch (CONTRACT.md section 5)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.numeric.cases import VerifyCase, build_case
from simulator.numeric.dist import DistTensor, assemble, distribute, replica_mismatch
from simulator.numeric.execute import Execution, Faults, run_microbatch
from simulator.numeric.optimizer import update
from simulator.numeric.ps import PsRun, ps_step
from simulator.scenario.schema import Scenario
from simulator.sharding.graph_yaml import strategy_key
from simulator.sharding.layout import LayoutError
from simulator.sharding.mesh import Mesh
from simulator.sharding.placement import Broadcast, Shard
from simulator.sharding.plan import ShardingPlan, build_plan
from simulator.sharding.rules import SignatureError

__all__ = ["Check", "VerifyResult", "verify_scenario", "verify_case", "reduce_grad"]


@dataclass(frozen=True)
class Check:
    tensor: str
    max_abs_error: float
    max_rel_error: float
    ok: bool


@dataclass(frozen=True)
class VerifyResult:
    scenario: str
    devices: int
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()
    tolerance: float = 1e-5
    collectives: dict[str, int] = field(default_factory=dict)

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


def _data(graph: Graph, rng: np.random.Generator, dtype: type) -> dict[str, np.ndarray]:
    """Random inputs: floats, or integer ids/labels in range of the op that reads them."""
    out = {}
    for t in graph.tensors.values():
        if t.kind not in ("input", "label"):
            continue
        high = _index_range(graph, t.name)
        out[t.name] = (rng.integers(0, high, t.shape) if high
                       else rng.standard_normal(t.shape).astype(dtype))
    return out


def _index_range(graph: Graph, name: str) -> int | None:
    for op in graph.consumers(name):
        if op.type == "Gather" and op.inputs[1] == name:
            return graph.tensors[op.inputs[0]].shape[0]
        if op.type == "SoftmaxCrossEntropy" and op.inputs[1] == name:
            return graph.tensors[op.inputs[0]].shape[-1]
    return None


def _params(graph: Graph, rng: np.random.Generator, dtype: type) -> dict[str, np.ndarray]:
    return {t.name: (rng.standard_normal(t.shape) * 0.5).astype(dtype)
            for t in graph.of_kind("parameter")}


def _split_batch(data: dict[str, np.ndarray], parts: int) -> list[dict[str, np.ndarray]]:
    return [{k: np.split(v, parts, axis=0)[i] for k, v in data.items()} for i in range(parts)]


def _opt_layout(plan: ShardingPlan, name: str, shard: bool):
    """Optimizer sharding (ZeRO / MindSpore optimizer parallel): the kept layout with the
    first evenly divisible dim that no other axis splits additionally split on `dp` where
    it was broadcast (a parameter without one, such as a bias split on tp, stays whole)."""
    layout, mesh = plan.layouts[name], plan.mesh
    if not shard or "dp" not in mesh.names:
        return layout
    a = mesh.axis_index("dp")
    if not isinstance(layout.placements[a], Broadcast):
        return layout
    shape = plan.graph.tensors[name].shape
    # only a dim no other axis splits: ZeRO shards each rank's own flat buffer, which on the
    # (dp, tp) mesh order is expressible only where tp leaves the dim whole
    for d in range(len(shape)):
        n = shape[d]
        if layout.split_factor(d, mesh) > 1:
            continue  # dp is the outer axis: splitting a split dim again re-nests its blocks
        if n % (layout.split_factor(d, mesh) * mesh.shape[a]) == 0:
            ps = list(layout.placements)
            ps[a] = Shard(d)
            return type(layout)(tuple(ps))
    return layout


def _except_dp(plan: ShardingPlan, src, target):
    """`target` with the dp axis left as in `src`."""
    if "dp" not in plan.mesh.names:
        return target
    a = plan.mesh.axis_index("dp")
    ps = list(target.placements)
    ps[a] = src.placements[a]
    return type(target)(tuple(ps))


def reduce_grad(ex: Execution, plan: ShardingPlan, g: DistTensor, target) -> DistTensor:
    """An accumulated gradient brought to its optimizer layout: the other axes first, on
    the whole gradient (Megatron's finalize_model_grads all-reduces the sequence-parallel
    norm gradients over tp on the full buffer), then data parallel."""
    whole = ex.move(g, _except_dp(plan, g.layout, target), forward=False, keep=("dp",))
    return ex.move(whole, target, forward=False)


def _step(ex: Execution, plan: ShardingPlan, params: dict[str, DistTensor],
          grads: dict[str, DistTensor], kind: str, lr: float, shard: bool
          ) -> tuple[dict[str, DistTensor], dict[str, DistTensor]]:
    """Reduce each gradient to its parameter's optimizer layout, update there, and bring the
    parameter back to its kept layout. Returns (new parameters, reduced gradients)."""
    new, reduced = {}, {}
    for name, p in params.items():
        target = _opt_layout(plan, name, shard)
        g = grads[name]
        if ex.faults.skip_grad_reduction:
            g = DistTensor(g.shape, target, g.blocks) if g.layout != target else g
        else:
            g = reduce_grad(ex, plan, g, target)
        local = ex.move(p, target, forward=False)
        updated = DistTensor(p.shape, target, tuple(
            update(kind, pb, gb, lr) for pb, gb in zip(local.blocks, g.blocks)))
        new[name], reduced[name] = ex.move(updated, p.layout, forward=False), g
    return new, reduced


@dataclass
class _Outcome:
    activations: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    updated: dict[str, np.ndarray]
    replica: dict[str, float]
    collectives: dict[str, int]


def _run(plan: ShardingPlan, params0, batches, kind, lr, shard, faults,
         ps: PsRun | None = None) -> _Outcome:
    mesh, ex = plan.mesh, Execution(plan, faults)
    params = {n: distribute(v, plan.layouts[n], mesh) for n, v in params0.items()}
    acts: dict[str, np.ndarray] = {}
    replica: dict[str, float] = {}
    total: dict[str, DistTensor] = {}

    def record(name: str, t: DistTensor) -> None:
        acts[name] = assemble(t, mesh)
        replica[name] = replica_mismatch(t, mesh)

    for i, batch in enumerate(batches):
        rows = next(iter(batch.values())).shape[0] if batch else 0
        local = run_microbatch(ex, params, batch, 1.0 / len(batches),
                               record if i == 0 else None, batch_offset=i * rows)
        for n, g in local.items():
            total[n] = g if n not in total else DistTensor(
                g.shape, g.layout, tuple(a + b for a, b in zip(total[n].blocks, g.blocks)))
    counts: dict[str, int] = {}
    if ps is not None:
        new, reduced, counts = ps_step(plan, params, total, kind, lr, ps)
    else:
        new, reduced = _step(ex, plan, params, total, kind, lr, shard)
    for s in ex.comm_log:
        counts[s.kind] = counts.get(s.kind, 0) + 1
    return _Outcome(acts, {n: assemble(g, mesh) for n, g in reduced.items()},
                    {n: assemble(t, mesh) for n, t in new.items()},
                    {**replica, **{f"{n}.updated": replica_mismatch(t, mesh)
                                   for n, t in new.items()}}, counts)


def _unsharded(graph: Graph) -> Graph:
    """The same graph with every strategy dropped: the single-device reference."""
    return Graph(graph.tensors, tuple(dataclasses.replace(op, strategy=None)
                                      for op in graph.ops))


def _compare(name: str, got: np.ndarray, want: np.ndarray, tol: float,
             floor: float = 1e-12) -> Check:
    """Error relative to the largest reference value, or to `floor` where that is smaller
    (a gradient that is zero in exact arithmetic, such as a key bias's under softmax, holds
    rounding noise of the size of the other gradients' rounding)."""
    err = float(np.max(np.abs(got - want))) if want.size else 0.0
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, floor)
    return Check(name, err, err / scale, err / scale <= tol)


def verify_case(case: VerifyCase, optimizer: str = "adam", lr: float = 1e-3, seed: int = 0,
                shard_optimizer: bool = False, faults: Faults | None = None,
                name: str = "", ps: PsRun | None = None) -> VerifyResult:
    faults = faults or Faults()
    rng = np.random.default_rng(seed)
    dtype, m = case.dtype, case.micro_batches
    params = _params(case.whole, rng, dtype)
    data = _data(case.whole, rng, dtype)
    batches = _split_batch(data, m)
    plan = build_plan(case.sharded, case.mesh, np.dtype(dtype).itemsize)
    got = _run(plan, params, batches, optimizer, lr, shard_optimizer, faults, ps)
    one = Mesh.of(single=1)
    ref = _run(build_plan(_unsharded(case.whole), one), params, [data], optimizer, lr, False,
               Faults())
    ref_mb = _run(build_plan(_unsharded(case.micro_reference), one), params, batches[:1],
                  optimizer, lr, False, Faults())
    tol = 1e-4 if dtype == np.float32 else 1e-5
    checks = [_compare(n, got.activations[n], ref_mb.activations[n], tol)
              for n in ref_mb.activations]
    grad_scale = max((float(np.max(np.abs(g))) for g in ref.grads.values() if g.size),
                     default=0.0)
    checks += [_compare(f"{n}.grad", got.grads[n], ref.grads[n], tol, 1e-6 * grad_scale)
               for n in ref.grads]
    notes = case.notes
    if ps is None or ps.sync:
        checks += [_compare(f"{n}.updated", got.updated[n], ref.updated[n], tol)
                   for n in ref.updated]
    else:
        notes += ("asynchronous parameter server: each push updates parameters other workers "
                  "have moved since, so the updates are not the single-device step and were "
                  "not compared (forward and pushed gradients were)",)
    checks += [Check(f"{n} (replicas)", e, e, e <= tol) for n, e in got.replica.items() if e]
    return VerifyResult(name, case.mesh.size, tuple(checks), notes, tol, got.collectives)


def verify_scenario(s: Scenario, faults: Faults | None = None,
                    fused_attention: bool = False) -> VerifyResult:
    """Verify a scenario's plan; InputError when its strategies cannot be planned.
    `fused_attention`: the hardware profile's default for `model.attention: auto`, so that
    verify proves the plan `run` times."""
    try:
        case = build_case(s, fused_attention)
        spec = s.parallel.parameter_server
        ps = PsRun(spec.servers, spec.sync) if s.parallel.mode == "parameter_server" else None
        return verify_case(case, s.training.optimizer, s.training.learning_rate, s.seed,
                           s.parallel.optimizer_shard >= 1, faults, s.name, ps)
    except (SignatureError, LayoutError) as exc:
        raise InputError(s.source, strategy_key(s, exc), str(exc)) from None

