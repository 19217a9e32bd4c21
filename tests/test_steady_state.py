"""Repetition simulated once (issue 13): a pipeline's steady state is simulated for a
shortened run and one with a period more, and extended to the scenario's micro-batches.
The extended result must equal the full simulation in every field `run --json` reports;
where the steady state does not repeat exactly (GPipe, too few micro-batches, a
data-parallel queue that keeps growing) nothing is extended."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sim_cases import assert_same_summary, small_gpt

from simulator.config.hardware import load_profile
from simulator.engine.core import run
from simulator.engine.steady import splice
from simulator.errors import InputError
from simulator.lower.costs import CostModel
from simulator.lower.iteration import lower
from simulator.lower.pipeline import steady_window
from simulator.program.model_program import transformer_program
from simulator.report import summary
from simulator.simulation.budget import (
    DEFAULT_MAX_EVENTS,
    estimate_every_micro_batch,
    estimate_run,
    shortened_run,
)
from simulator.simulation.simulate import simulate


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def _scenario(micro: int, **kw: Any):
    return small_gpt(micro, name="steady", **kw)


def _both(sc: Any, hw: Any, fidelity: str = "representative"):
    """Every micro-batch and bucket simulated; the steady state extended (buckets
    collapsed where they would be)."""
    return (simulate(sc, hw, fidelity, steady=False, collapse=False),
            simulate(sc, hw, fidelity, steady=True))


def _assert_equal_results(full: Any, ext: Any) -> None:
    # the extended run says so in its notes; everything else is the same
    assert_same_summary(full, ext)
    assert (ext.slowest_device, ext.comm_device) == (full.slowest_device, full.comm_device)
    assert (ext.memory.device, ext.memory.time_s) == pytest.approx(
        (full.memory.device, full.memory.time_s), rel=1e-9)


CASES = [
    pytest.param(40, {}, id="1f1b-p4"),
    pytest.param(41, {"pipeline": 8, "data": 1, "layers": 16}, id="1f1b-p8-odd"),
    pytest.param(30, {"pipeline": 1, "data": 8}, id="no-pipeline-dp8"),
    pytest.param(64, {"schedule": "interleaved_1f1b", "virtual_stages": 2}, id="interleaved-v2"),
    pytest.param(60, {"schedule": "interleaved_1f1b", "virtual_stages": 3, "layers": 24},
                 id="interleaved-v3"),
    pytest.param(40, {"recompute": "full"}, id="recompute-full"),
    pytest.param(40, {"recompute": "selective", "sequence_parallel": True},
                 id="selective-sp"),
    pytest.param(40, {"overlap": {"grad_reduce": False}}, id="no-overlap"),
    pytest.param(40, {"optimizer_shard": 1}, id="zero1"),
    pytest.param(40, {"optimizer_shard": 1, "overlap": {"param_gather": True}},
                 id="zero1-overlapped-gather"),
    pytest.param(40, {"optimizer_shard": 2, "data": 4, "tensor": 1}, id="zero2"),
    pytest.param(40, {"optimizer_shard": 3, "data": 8, "tensor": 1, "pipeline": 2},
                 id="zero3"),
    pytest.param(40, {"offload": {"optimizer_states": True}}, id="optimizer-offload"),
    pytest.param(40, {"comm_fusion": {"mode": "size", "bucket_mb": 0.01}}, id="collapsed-buckets"),
    pytest.param(40, {"schedule": "zb_h1"}, id="zb-h1"),
    pytest.param(40, {"schedule": "zb_h1", "recompute": "selective", "sequence_parallel": True},
                 id="zb-h1-selective-sp"),
    pytest.param(40, {"schedule": "zb_h1", "optimizer_shard": 2, "data": 4, "tensor": 1},
                 id="zb-h1-zero2"),
]


@pytest.mark.parametrize("micro, parallel", CASES)
def test_extended_steady_state_equals_the_full_simulation(a100, micro, parallel):
    sc = _scenario(micro, **parallel)
    full, ext = _both(sc, a100)
    assert full.steady is None and full.plan.micro_batches == micro
    assert ext.steady is not None, "the steady state should repeat exactly"
    short, period = ext.steady.simulated, ext.steady.period
    assert ext.plan.micro_batches == short + period < micro
    assert short + ext.steady.repeats * period == micro
    _assert_equal_results(full, ext)
    assert ext.trace.events < full.trace.events


def test_full_fidelity_extends_exactly_too(a100):
    sc = _scenario(24, pipeline=2, data=2, tensor=2)
    full, ext = _both(sc, a100, "full")
    assert ext.steady is not None and len(ext.plan.devices) == 8
    _assert_equal_results(full, ext)


def test_period_is_the_time_one_more_micro_batch_adds(a100):
    """Iteration time of m + 1 minus m (both simulated in full) is the extended period."""
    sc = _scenario(40)
    ext = simulate(sc, a100, steady=True)
    t40 = simulate(sc, a100, steady=False).iteration_time_s
    t41 = simulate(_scenario(41), a100, steady=False).iteration_time_s
    assert ext.steady.period_s == pytest.approx(t41 - t40, rel=1e-9)


@pytest.mark.parametrize("micro, parallel, why", [
    (200, {"schedule": "gpipe"}, "gpipe: every added micro-batch moves all backwards"),
    (8, {}, "too few micro-batches for warm-up, steady periods and cool-down"),
    (40, {"schedule": "interleaved_1f1b", "virtual_stages": 2}, "not enough for a period"),
])
def test_no_steady_window_where_nothing_repeats(a100, micro, parallel, why):
    sc = _scenario(micro, **parallel)
    p = sc.parallel
    assert steady_window(p.schedule, p.pipeline, micro, p.virtual_stages) is None, why
    full, ext = _both(sc, a100)
    assert ext.steady is None and ext.plan.micro_batches == micro
    _assert_equal_results(full, ext)


# a stack whose pipeline sends run asynchronously (framework overlap.p2p_blocking never: they
# share the NIC with the dp stream; Megatron's blocking sends would pace the queue)
GROWING_QUEUE = ["model.layers=16", "parallel.optimizer_shard=2", "framework=deepspeed-zero"]


def test_a_growing_queue_is_not_extended_and_is_simulated_in_full():
    """GPT-3's 16-layer stages under ZeRO-2 reduce-scatter every micro-batch's gradients on
    the dp stream, which shares the NIC with the pipeline sends and is slower than the
    compute: the queue grows with every micro-batch, the cool-down differs from run to run
    and the shortened runs never repeat exactly (checked up to 152 micro-batches)."""
    from simulator.api import load_hardware, load_scenario

    loaded = load_scenario("gpt3-175b-1024-a100",
                           [*GROWING_QUEUE, "training.global_batch_size=512"])
    full, ext = _both(loaded.scenario, load_hardware(loaded))
    assert ext.steady is None and ext.plan.micro_batches == 64
    _assert_equal_results(full, ext)


def _plan_and_trace(sc: Any, hw: Any, micro: int):
    prog = transformer_program(sc)
    plan = lower(sc, prog, CostModel.from_hardware(hw), micro=micro)
    return plan, run(plan)


def test_splice_finds_the_inserted_period_of_1f1b_but_not_of_gpipe(a100):
    sc = _scenario(40)
    a, b = _plan_and_trace(sc, a100, 12), _plan_and_trace(sc, a100, 13)
    sp = splice(*a, *b)
    assert sp is not None and sp.micro_period == 1
    assert sp.period_s == pytest.approx(max(b[1].end) - max(a[1].end), rel=1e-12)
    compute = dict(sp.inserted)
    assert all(compute[(d, "compute")] == 2 for d in a[0].devices)  # one F and one B
    gp = _scenario(40, schedule="gpipe")
    assert splice(*_plan_and_trace(gp, a100, 12), *_plan_and_trace(gp, a100, 13)) is None
    assert splice(*b, *a) is None  # fewer micro-batches: no period inserted


def test_splice_refuses_a_changed_duration(a100):
    """One task slower by a nanosecond in the longer run: not A with a period inserted."""
    sc = _scenario(40)
    a = _plan_and_trace(sc, a100, 12)
    plan, _ = _plan_and_trace(sc, a100, 13)
    tasks = list(plan.tasks)
    tasks[5] = tasks[5]._replace(duration_s=tasks[5].duration_s + 1e-9)
    from dataclasses import replace
    slower = replace(plan, tasks=tuple(tasks))
    assert splice(*a, slower, run(slower)) is None


DONE_WHEN = ["--set", "training.global_batch_size=1572864"]


def test_a_million_micro_batches_are_estimated_by_the_shortened_runs():
    from simulator.api import load_scenario

    sc = load_scenario("gpt3-175b-1024-a100", DONE_WHEN[1::2]).scenario
    assert sc.grad_accum_steps == 196_608
    assert shortened_run(sc) == (19, 1)
    est = estimate_run(sc)
    assert est.count < DEFAULT_MAX_EVENTS / 10
    assert "simulated for 19 and 20 and extended" in est.detail
    default = load_scenario("gpt3-175b-1024-a100", []).scenario
    assert shortened_run(default) is None  # 192 micro-batches: every one is simulated


def test_done_when_command_runs_and_extends_the_1536_run(invoke_cli):
    import json

    from simulator.api import load_hardware, load_scenario

    out = invoke_cli("run", "gpt3-175b-1024-a100", "--json", *DONE_WHEN)
    assert out.exit_code == 0, out.stderr
    big = json.loads(out.stdout)
    loaded = load_scenario("gpt3-175b-1024-a100", [])
    hw = load_hardware(loaded)
    base = simulate(loaded.scenario, hw)
    step = simulate(load_scenario("gpt3-175b-1024-a100",
                                  ["training.global_batch_size=1544"]).scenario, hw)
    period = step.iteration_time_s - base.iteration_time_s  # one micro-batch more
    added = (196_608 - 192) * period
    assert big["iteration_time_s"] == pytest.approx(base.iteration_time_s + added, rel=1e-9)
    assert big["memory"]["peak_bytes"] == summary(base)["memory"]["peak_bytes"]
    assert big["simulation"]["events"] < base.trace.events
    estimated = estimate_run(load_scenario("gpt3-175b-1024-a100", DONE_WHEN[1::2]).scenario)
    assert 0.5 <= estimated.count / big["simulation"]["events"] <= 2.0


def test_refuses_every_micro_batch_when_the_shortened_runs_do_not_repeat():
    from simulator.api import load_hardware, load_scenario

    loaded = load_scenario("gpt3-175b-1024-a100",
                           [*GROWING_QUEUE, "training.global_batch_size=1572864"])
    sc = loaded.scenario
    assert shortened_run(sc) == (19, 1)
    with pytest.raises(InputError) as err:
        simulate(sc, load_hardware(loaded))
    est = estimate_every_micro_batch(sc)
    assert est.count >= 196_608 * 16 * 6  # micro-batches x (F, B, 4 sends) x stages
    assert str(err.value) == (
        f"{sc.source}: training.global_batch_size: about {est.count:,} events to simulate "
        f"(196608 micro-batches x 6 tasks on each of 16 simulated devices (pipeline "
        f"stages); the steady state of the pipeline does not repeat exactly (a queue that "
        f"keeps growing, such as a data-parallel stream slower than the compute), so every "
        f"micro-batch is simulated), above the limit of 500,000; change "
        f"training.global_batch_size or raise the limit with --max-events {est.count}")


RANDOM_OPTIONS = {
    "pipeline": [1, 2, 4], "data": [1, 2, 4], "tensor": [1, 2],
    "schedule": ["1f1b", "interleaved_1f1b"], "virtual_stages": [1, 2],
    "recompute": ["none", "full", "selective"], "optimizer_shard": [0, 1, 2, 3],
    "sequence_parallel": [False, True],
    "overlap": [{"grad_reduce": True}, {"grad_reduce": False}, {"param_gather": False}],
    "comm_fusion": [{"mode": "size", "bucket_mb": 25}, {"mode": "size", "bucket_mb": 0.05},
                    {"mode": "index"}, {"mode": "none"}],
}


@pytest.mark.parametrize("seed", range(6))
def test_random_plans_extend_exactly_or_not_at_all(a100, seed):
    """Seeded draws over schedules, ZeRO stages, recompute, overlap and fusion (a sweep of
    130 such draws on three hardware profiles found no difference): whether or not the
    steady state is extended, and with buckets collapsed, every field equals one task per
    bucket and every micro-batch simulated."""
    import random

    rng = random.Random(seed)
    while True:  # the first valid draw of this seed
        parallel = {k: rng.choice(v) for k, v in RANDOM_OPTIONS.items()}
        micro = rng.choice([32, 48, 64])
        try:
            sc = _scenario(micro, layers=8 * parallel["virtual_stages"], **parallel)
            full = simulate(sc, a100, steady=False, collapse=False)
            break
        except InputError:
            continue
    _assert_equal_results(full, simulate(sc, a100, steady=True))


@pytest.mark.parametrize("name", ["mixed-a100-h100-pp2", "straggler-dp16-a100"])
def test_mixed_and_slowed_devices_extend_exactly(name):
    """Per-device cost models (an A100 stage and an H100 stage; one slowed replica): the
    shortened runs carry them, and critical_path (who set the pace) extends too."""
    from simulator.api import load_hardware, load_scenario

    loaded = load_scenario(name, ["training.global_batch_size=512"])
    full, ext = _both(loaded.scenario, load_hardware(loaded))
    assert ext.steady is not None and full.critical_path is not None
    _assert_equal_results(full, ext)


@pytest.mark.parametrize("reports", [True, False])
def test_short_runs_that_disagree_on_the_pacer_are_not_extended(a100, monkeypatch, reports):
    """Extending is refused when the two short runs were paced by different devices, and the
    refusal does not depend on whether the pace report was asked for: `reports=False` (what
    sweeps run) must time exactly what `run` does."""
    import simulator.report.critical as critical
    import simulator.simulation.heterogeneous as heterogeneous
    import simulator.simulation.steady_runs as steady_runs

    sc = _scenario(40)
    assert simulate(sc, a100, steady=True, reports=reports).steady is not None
    real, seen = critical.pace, []

    def alternating(plan, trace):  # the pacer's device flips from one short run to the next
        got = real(plan, trace)
        seen.append(got)
        return replace(got, device=plan.devices[len(seen) % 2])

    monkeypatch.setattr(steady_runs, "pace", alternating, raising=False)
    monkeypatch.setattr(heterogeneous, "pace", alternating)
    flipped = simulate(sc, a100, steady=True, reports=reports)
    assert seen and flipped.steady is None
