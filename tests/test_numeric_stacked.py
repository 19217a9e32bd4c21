"""The stacked local kernels (numeric.stacked: one numpy call for every rank whose blocks
have the same shapes) compute what the family's kernel computes rank by rank: every op
family, every signature on 1-2 axis meshes, even and uneven (torch.chunk) splits, Partial
inputs as unequal summands, replicas that disagree; whole plans (data, tensor and sequence
parallel, optimizer sharding) give the same tensors both ways, and broken plans still fail
verify."""

import dataclasses

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_rules_property import KINDS, _graph

from simulator.config.resources import resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.graph.graph import GraphBuilder
from simulator.models.cases import build_case
from simulator.numeric.dist import DistTensor, distribute
from simulator.numeric.execute import run_microbatch
from simulator.numeric.execution import Execution, Faults
from simulator.numeric.local import forward_blocks, vjp_blocks
from simulator.numeric.rulecheck import random_inputs
from simulator.numeric.stacked import stacked_kernel
from simulator.numeric.verify import _data, _params, _run, _split_batch
from simulator.sharding.mesh import Mesh
from simulator.sharding.plan import OpPlan, ShardingPlan, build_plan, grad_layouts
from simulator.sharding.rules import signatures
from simulator.simulation.verify import verify_scenario


def _scenario(name: str, overrides=()):
    path = resolve_yaml(name, "scenarios")
    return parse_scenario(yaml.safe_load(path.read_text()), str(path), list(overrides))


def _same(got, want, what: str, dtype=np.float64, floor: float = 1e-300,
          ulps: float = 64) -> None:
    """Equal up to the summation order of a batched GEMM: 64 units in the last place of
    the largest value of the computation's `dtype` (BLAS sums a stacked product in other
    blocks than one rank's)."""
    assert got.shape == want.shape and got.dtype == want.dtype, what
    scale = max(float(np.max(np.abs(want), initial=0.0)), floor)
    tol = ulps * float(np.finfo(dtype).eps)
    assert float(np.max(np.abs(got - want), initial=0.0)) <= tol * scale, what


def _graph_of(kind: str, u: int):
    """test_rules_property's one-op graphs, and FusedAttention (q [b,s,g,r,d], k, v
    [b,t,g,d]) with dropout."""
    if kind != "attention":
        return _graph(kind, u)
    g = GraphBuilder()
    q = g.tensor("q", (u, 4, 2 * u, 2, 3))
    k, v = g.tensor("k", (u, 4, 2 * u, 3)), g.tensor("v", (u, 4, 2 * u, 3))
    g.op("FusedAttention", [q, k, v], "y", p=0.3, seed=5)
    return g.build()


def _one_op(graph, mesh, sig, seed):
    """(plan, distributed inputs, output gradient) of a one-op graph under `sig`."""
    op = graph.ops[0]
    plan = ShardingPlan(graph, mesh, (OpPlan(op, sig, sig.output_layout),), {})
    rng = np.random.default_rng(seed)
    xs = random_inputs(graph, rng)
    ins = [distribute(x, sig.input_layout(i), mesh, rng) for i, x in enumerate(xs)]
    dy_layout, _ = grad_layouts(plan.ops[0])
    dy = distribute(rng.standard_normal(graph.tensors[op.output].shape), dy_layout, mesh, rng)
    return plan, ins, dy


def _both_ways(plan, ins, dy):
    """Forward blocks and gradient blocks, stacked and rank by rank."""
    p = plan.ops[0]
    out = {}
    for vec in (True, False):
        blocks, _ = forward_blocks(plan, p, ins, 3, vec)
        y = DistTensor(dy.shape, p.sig.output_layout, blocks)
        out[vec] = (blocks, vjp_blocks(plan, p, ins, y, dy, 3, vec))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(KINDS + ["attention"]),
       sizes=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2),
       unit=st.sampled_from([None, 2, 5]), data=st.data())
def test_stacked_kernel_equals_rank_by_rank(kind, sizes, unit, data):
    """unit=None: every dim divides evenly; 2 or 5: torch.chunk splits, shards of unequal
    (or empty) size run as separate stacks."""
    mesh = Mesh(tuple((f"a{i}", s) for i, s in enumerate(sizes)))
    graph = _graph_of(kind, unit or int(np.prod(sizes)))
    op = graph.ops[0]
    sig = data.draw(st.sampled_from(signatures(graph.labels(op), mesh)))
    plan, ins, dy = _one_op(graph, mesh, sig, data.draw(st.integers(0, 99)))
    try:
        results = _both_ways(plan, ins, dy)
    except ValueError:  # a kernel that cannot take this uneven block (Reshape)
        assume(False)
    (fwd, grads), (fwd1, grads1) = results[True], results[False]
    for r in range(mesh.size):
        _same(fwd[r], fwd1[r], f"{kind} {sig} forward rank {r}")
    for i, (g, g1) in enumerate(zip(grads, grads1)):
        assert (g is None) == (g1 is None)
        for r in range(mesh.size if g is not None else 0):
            _same(g[0][r], g1[0][r], f"{kind} {sig} grad {i} rank {r}")


def test_a_vocabulary_shard_with_no_classes():
    """torch.chunk of 2 classes over 3 x 3 shards leaves shards empty: their maximum is -inf,
    their target logit 0, their gradient empty (found by hypothesis: IndexError before)."""
    mesh = Mesh((("a0", 3), ("a1", 3)))
    graph = _graph_of("cross_entropy", 2)
    sigs = [s for s in signatures(graph.labels(graph.ops[0]), mesh)
            if str(s) == "(S(1), B) -> B x (S(1), B) -> B"]  # the class dim split 9 ways
    assert len(sigs) == 1
    for sig in sigs:
        plan, ins, dy = _one_op(graph, mesh, sig, 0)
        (fwd, grads), (fwd1, grads1) = (lambda r: (r[True], r[False]))(_both_ways(plan, ins, dy))
        for r in range(mesh.size):
            _same(fwd[r], fwd1[r], f"{sig} forward rank {r}")
            _same(grads[0][0][r], grads1[0][0][r], f"{sig} grad rank {r}")


def test_every_transformer_family_has_a_stacked_kernel():
    """The kernels of a GPT plan all run stacked (others fall back to rank by rank)."""
    case = build_case(_scenario("verify-tiny-dp8"))
    missing = {op.type for op in case.sharded.ops if stacked_kernel(op.type) is None}
    assert missing == set()


def test_data_parallel_ops_run_as_one_stack():
    case = build_case(_scenario("verify-tiny-dp8"))
    plan = build_plan(case.sharded, case.mesh)
    ex = Execution(plan)
    rng = np.random.default_rng(0)
    params = {n: distribute(v, plan.layouts[n], plan.mesh)
              for n, v in _params(case.sharded, rng, np.float64).items()}
    run_microbatch(ex, params, _data(case.sharded, rng, np.float64), 1.0)
    fc1 = ex.values[next(p.op.output for p in plan.ops if p.op.name == "l0.fc1_mm")]
    assert [len(ranks) for ranks, _ in fc1.stacks] == [8]  # eight devices, one numpy call
    assert len({id(b) for b in fc1.blocks}) == 8  # each device its own block


def _outcomes(scenario, vectorised: bool):
    case = build_case(scenario)
    rng = np.random.default_rng(0)
    params = _params(case.whole, rng, case.dtype)
    batches = _split_batch(_data(case.whole, rng, case.dtype), case.micro_batches)
    plan = build_plan(case.sharded, case.mesh, np.dtype(case.dtype).itemsize)
    shard = scenario.parallel.optimizer_shard >= 1
    return _run(plan, params, batches, scenario.training.optimizer, 1e-3, shard, Faults(),
                vectorised=vectorised), case.dtype


@pytest.mark.parametrize("name,overrides", [
    ("verify-tiny-dp8", []),
    ("verify-tiny-tp8", []),
    ("verify-tiny-dp2-tp4-sp", ["parallel.optimizer_shard=1"]),
    ("verify-tiny-dp2-tp4-sp", ["model.num_kv_heads=4", "model.ffn_activation=swiglu"]),
    ("verify-tiny-dp2-tp4-sp", ["model.attention=flash"]),
    ("seed-a-weight-ops", []),
    ("seed-c-resnet-boundary", []),
    ("moe-tiny-verify", []),  # routing ops run rank by rank between stacked ones
])
def test_plans_give_the_same_tensors_stacked_and_rank_by_rank(name, overrides):
    s = _scenario(name, overrides)
    (fast, dtype), (slow, _) = _outcomes(s, True), _outcomes(s, False)
    top = max(float(np.max(np.abs(g), initial=0.0)) for g in slow.grads.values())
    noise = {n for n, g in slow.grads.items() if float(np.max(np.abs(g), initial=0.0))
             <= 1e-9 * top}  # gradients that are zero in exact arithmetic
    for field in ("activations", "grads", "updated"):
        a, b = getattr(fast, field), getattr(slow, field)
        assert a.keys() == b.keys() and a
        # a gradient that is zero in exact arithmetic (a key bias's, under softmax) holds
        # rounding noise of the other gradients' size, summed in another order by BLAS
        floor = max(float(np.max(np.abs(v), initial=0.0)) for v in a.values()) \
            if field == "grads" else 1e-300
        for n in a:
            # Adam divides such a noise gradient by its own size: the update it makes is
            # rounding noise amplified (1e-12 of the parameter), compared to 1e-9
            ulps = 64 if field != "updated" or n not in noise else 1e-9 / np.finfo(dtype).eps
            _same(a[n], b[n], f"{name} {field} {n}", dtype, floor, ulps)
    assert fast.replica == slow.replica
    assert fast.collectives == slow.collectives


def _corrupted_run(plan, params0, batch, vectorised: bool, factor: float):
    """One micro-batch with data-parallel rank 5's copy of l0.w1 scaled by `factor`."""
    params = {n: distribute(v, plan.layouts[n], plan.mesh) for n, v in params0.items()}
    w = params["l0.w1"]
    blocks = list(w.blocks)
    blocks[5] = blocks[5] * factor
    params["l0.w1"] = dataclasses.replace(w, blocks=tuple(blocks))
    ex = Execution(plan, vectorised=vectorised)
    grads = run_microbatch(ex, params, batch, 1.0)
    out = next(p.op.output for p in plan.ops if p.op.name == "l0.fc1_mm")
    return ex.values[out], grads


def test_a_replica_that_disagrees_is_computed_as_its_own():
    """Stacking never assumes that replicas hold equal values: one data-parallel rank's
    copy of a weight is changed, and every rank's outputs and gradients are those it
    computes when every rank runs alone."""
    case = build_case(_scenario("verify-tiny-dp8"))
    plan = build_plan(case.sharded, case.mesh)
    rng = np.random.default_rng(0)
    params0 = _params(case.sharded, rng, np.float64)
    batch = _data(case.sharded, rng, np.float64)
    fc1, grads = _corrupted_run(plan, params0, batch, True, 1.5)
    fc1_alone, grads_alone = _corrupted_run(plan, params0, batch, False, 1.5)
    fc1_clean, _ = _corrupted_run(plan, params0, batch, True, 1.0)
    # The computation's largest gradient sets the scale: a gradient that is zero in exact
    # arithmetic (a key bias under softmax) holds only rounding noise of that size.
    scale = max(float(np.max(np.abs(g.blocks[r]))) for g in grads_alone.values()
                for r in range(8))
    for r in range(8):
        _same(fc1.blocks[r], fc1_alone.blocks[r], f"fc1 rank {r}")
        for n in grads:
            _same(grads[n].blocks[r], grads_alone[n].blocks[r], f"{n} grad rank {r}",
                  floor=scale)
    _same(fc1.blocks[4], fc1_clean.blocks[4], "an untouched rank")
    _same(fc1.blocks[5], fc1_clean.blocks[5] * 1.5, "the changed rank")
    assert not np.allclose(fc1.blocks[5], fc1_clean.blocks[5])


@pytest.mark.parametrize("name,faults", [
    ("verify-tiny-dp8", Faults(skip_grad_reduction=True)),
    ("verify-tiny-dp2-tp4-sp", Faults(drop_comm=3)),
    ("verify-tiny-tp8", Faults(drop_comm=5)),
])
def test_broken_plans_still_fail_stacked(name, faults):
    """(test_verify checks other faults the same way: verify runs stacked by default)."""
    assert not verify_scenario(_scenario(name), faults).ok
