"""Identical gradient buckets run as one task (issue 13): a run of COLLAPSE_MIN or more
identical consecutive buckets of one backward piece is one task of that many units, cut
wherever another transfer asks for the same link inside it (engine.blocks). The result
must equal one task per bucket in every field `run --json` reports."""

from __future__ import annotations

from typing import Any

import pytest
from sim_cases import assert_same, small_gpt

from simulator.config.hardware import load_profile
from simulator.engine.blocks import cuts_needed
from simulator.engine.core import run
from simulator.engine.tasks import Plan, Task
from simulator.lower.buckets import COLLAPSE_MIN, grad_bucket_runs, grad_buckets
from simulator.lower.costs import CostModel
from simulator.lower.iteration import lower
from simulator.program.model_program import transformer_program
from simulator.report import summary
from simulator.simulation.budget import DEFAULT_MAX_EVENTS, estimate_run
from simulator.simulation.simulate import simulate


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def _scenario(bucket_mb: float, *, micro: int = 8, **parallel: Any):
    return small_gpt(micro, name="buckets",
                     comm_fusion={"mode": "size", "bucket_mb": bucket_mb}, **parallel)


def test_runs_expand_to_the_buckets_one_by_one():
    params = (1_000_003, 77_777, 5, 2_500_000)
    runs = grad_bucket_runs(params, 2.0, "size", 0.01)
    assert grad_buckets(params, 2.0, "size", 0.01) == tuple(
        (i, b) for i, b, n in runs for _ in range(n))
    assert sum(b * n for _, b, n in runs) == sum(params) * 2.0
    # the last piece first fills the bucket the earlier ones left 5,570 bytes in, then
    # cuts 10,000-byte buckets from the rest of its 5,000,000 bytes
    assert max(n for *_, n in runs) == 1 + (5_000_000 - 4_430) // 10_000


@pytest.mark.parametrize("bucket_mb, parallel", [
    pytest.param(0.01, {}, id="pipeline-sends-share-the-nic"),
    pytest.param(0.01, {"pipeline": 1, "data": 4}, id="no-pipeline"),
    pytest.param(0.01, {"overlap": {"grad_reduce": False}}, id="after-the-backward"),
    pytest.param(0.01, {"optimizer_shard": 2, "overlap": {"param_gather": False}},
                 id="zero2"),
    pytest.param(0.01, {"optimizer_shard": 1, "overlap": {"param_gather": False}},
                 id="zero1-gather-after-step"),
])
def test_collapsed_buckets_equal_one_task_per_bucket(a100, bucket_mb, parallel):
    sc = _scenario(bucket_mb, **parallel)
    one, coll = (simulate(sc, a100, collapse=False), simulate(sc, a100))
    assert not one.plan.blocks and coll.plan.blocks
    assert all(coll.plan.tasks[t].units >= 1 for t, _ in coll.plan.blocks)
    a, b = summary(one), summary(coll)
    a.pop("simulation"), b.pop("simulation")
    assert_same(a, b)
    assert coll.memory.time_s == pytest.approx(one.memory.time_s, rel=1e-9)
    assert coll.trace.events < one.trace.events / 3


def test_not_collapsed_beside_an_overlapped_gather_of_every_bucket(a100):
    """ZeRO-1's overlapped parameter gather runs one task per bucket: a second simulation to
    cut collapsed reductions would run all of them again, so nothing is collapsed."""
    sc = _scenario(0.01, optimizer_shard=1, micro=2)
    assert sc.parallel.overlap.param_gather
    res = simulate(sc, a100)
    assert not res.plan.blocks
    assert res.trace.events == simulate(sc, a100, collapse=False).trace.events


def test_a_send_inside_a_run_of_buckets_cuts_it(a100):
    """With pipeline sends on the NIC the buckets use, the uncut blocks hold the link while
    a send asks for it; the plan simulate() ends with needs no further cut."""
    sc = _scenario(0.01)
    uncut = lower(sc, transformer_program(sc), CostModel.from_hardware(a100), cuts={})
    assert cuts_needed(uncut, run(uncut))
    coll = simulate(sc, a100)
    assert len(coll.plan.blocks) > len(uncut.blocks)
    assert cuts_needed(coll.plan, coll.trace) == {}


def _block_plan(ask_at: float) -> Plan:
    """A block of 10 one-second buckets on device 0's NIC from t=0, and a send that asks
    for the NIC at `ask_at` (after a compute task of that length)."""
    tasks = (Task(0, 0, "dp", "grad_bucket", "comm", -1, -1, 10.0, link="nic",
                  comm=(("all_reduce", 10.0),), units=10),
             Task(1, 0, "compute", "B", "bwd", 0, 0, ask_at),
             Task(2, 0, "pp_bwd", "send_bwd", "comm", 0, 0, 0.5, deps=(1,), link="nic"))
    return Plan(tasks=tasks, streams=((0, "dp", (0,)), (0, "compute", (1,)),
                                      (0, "pp_bwd", (2,))),
                devices=(0,), represents=(1,), stage_of=(0,), static_memory=((),),
                total_devices=1, micro_batches=1, blocks=((0, (0, 0, 3, 0)),))


@pytest.mark.parametrize("ask_at, cuts", [
    (3.5, {(0, 0, 3): (4,)}),  # asks while the fourth bucket runs: after it
    (0.25, {(0, 0, 3): (1,)}),
    (9.5, {}),  # after the last bucket asked: behind the block either way
    (3.0, None),  # with the fourth bucket: a tie rounding decides
])
def test_cuts_needed_names_the_bucket_a_send_would_follow(ask_at, cuts):
    plan = _block_plan(ask_at)
    assert cuts_needed(plan, run(plan)) == cuts


def test_tiny_buckets_on_gpt3_answer_and_are_estimated_collapsed(invoke_cli):
    """Issue 13: 0.01 MB buckets on GPT-3 175B took 135 s and 4.4 M events."""
    import json

    from simulator.api import load_scenario

    out = invoke_cli("run", "gpt3-175b-1024-a100", "--json", "--set",
                     "parallel.comm_fusion.bucket_mb=0.01")
    assert out.exit_code == 0, out.stderr
    events = json.loads(out.stdout)["simulation"]["events"]

    sc = load_scenario("gpt3-175b-1024-a100", ["parallel.comm_fusion.bucket_mb=0.01"]).scenario
    est = estimate_run(sc)
    assert est.count < DEFAULT_MAX_EVENTS / 10
    assert 0.5 <= est.count / events <= 2.0
    # 545,548 buckets per device in runs of thousands: about three tasks per piece
    pieces = 96 // 16 + 1
    # the last micro-batch's backward layer by layer: 96 // 16 more tasks a device
    assert est.count <= 2 * 16 * (192 * 6 + 96 // 16 + 3 * pieces)
    assert 545_548 / pieces > COLLAPSE_MIN
