"""`parallel.optimizer_threshold_kb` acts in `run`'s collectives and step time as in
`verify`: the parameters a sharded optimizer keeps whole are all-reduced (not
reduce-scattered, not gathered) and updated whole by every rank."""

from __future__ import annotations

import pytest

from simulator.api import load_hardware, load_scenario
from simulator.models.optimizer_threshold import kept_whole, optimizer_threshold
from simulator.models.transformer_plan import gpt_dims, planned_transformer
from simulator.report import summary
from simulator.sharding.plan import build_plan
from simulator.simulation.simulate import simulate
from simulator.simulation.verify import verify_scenario


def _run(*overrides: str) -> dict:
    loaded = load_scenario("tiny-cpu", list(overrides))
    return summary(simulate(loaded.scenario, load_hardware(loaded)))


def _verify(*overrides: str) -> dict[str, int]:
    res = verify_scenario(load_scenario("tiny-cpu", list(overrides)).scenario)
    assert res.ok
    return dict(res.collectives)


def _kinds(summ: dict) -> set[str]:
    return {k for k, v in summ["communication"]["by_collective"].items() if v > 0}


@pytest.mark.parametrize("shard", [1, 2, 3])
def test_everything_kept_whole_runs_as_without_sharding(shard):
    """`run tiny-cpu --set parallel.optimizer_shard=Z --set
    parallel.optimizer_threshold_kb=1000000`: every tensor is below the threshold, so verify
    executes all-reduces only, and run times exactly those: the same collectives, step time
    and memory as with no sharded optimizer."""
    kept = (f"parallel.optimizer_shard={shard}", "parallel.optimizer_threshold_kb=1000000")
    run, plain = _run(*kept), _run()
    assert set(_verify(*kept)) == _kinds(run) == {"all_reduce"}
    assert run["communication"] == plain["communication"]
    assert run["breakdown_s"]["optimizer"] == plain["breakdown_s"]["optimizer"]
    assert run["iteration_time_s"] == pytest.approx(plain["iteration_time_s"], rel=1e-12)
    assert run["memory"]["peak_bytes"] == plain["memory"]["peak_bytes"]


def _kept_elements(*overrides: str) -> int:
    """Local elements of the parameters kept whole (the decision verify executes)."""
    sc = load_scenario("tiny-cpu", list(overrides)).scenario
    p = sc.parallel
    threshold, pe = optimizer_threshold(sc)
    graph, mesh = planned_transformer(gpt_dims(sc, False), p.data, p.tensor,
                                      p.sequence_parallel, p.expert, None)
    return sum(kept_whole(build_plan(graph, mesh, pe), threshold, pe).values())


@pytest.mark.parametrize("shard", [1, 2, 3])
def test_small_parameters_are_all_reduced(shard):
    """At 1 KB only the norms and biases are kept whole: their gradients (fp32, 4 bytes)
    move from the reduce-scatter to the all-reduce, and verify runs the same kinds."""
    zero = f"parallel.optimizer_shard={shard}"
    sharded, part = _run(zero), _run(zero, "parallel.optimizer_threshold_kb=1")
    assert set(_verify(zero, "parallel.optimizer_threshold_kb=1")) == _kinds(part)
    small = 4 * _kept_elements(zero, "parallel.optimizer_threshold_kb=1")
    assert small > 0
    a, b = sharded["communication"]["by_collective"], part["communication"]["by_collective"]
    assert b["all_reduce"] - a["all_reduce"] == small
    # ZeRO-2/3 reduce-scatter every micro-batch (2 here); the kept ones once
    per_step = 1 if shard == 1 else 2
    assert a["reduce_scatter"] - b["reduce_scatter"] == small * per_step
    # the optimizer step updates the kept ones whole: longer than fully sharded
    assert part["breakdown_s"]["optimizer"] > sharded["breakdown_s"]["optimizer"]
