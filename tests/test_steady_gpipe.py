"""GPipe's steady state extended (issue 11, sweep speed): a micro-batch more inserts one
forward at the end of the forward phase and one backward at the end of the backward phase
of every stage (`engine.steady.splice(..., insertions=2)`); `simulate(steady=True,
two_point=True)`, as a sweep runs it, extends two short runs to the scenario's
micro-batches. The extended result must equal every micro-batch simulated in every field
`run --json` reports (the memory peak, which grows with each micro-batch's activations
under GPipe, included); `run` itself still simulates GPipe in full."""

from __future__ import annotations

from typing import Any

import pytest
from sim_cases import assert_same_summary, small_gpt

from simulator.config.hardware import load_profile
from simulator.engine.core import run
from simulator.engine.steady import splice
from simulator.errors import InputError
from simulator.lower.costs import CostModel
from simulator.lower.iteration import lower
from simulator.program.model_program import transformer_program
from simulator.report import summary
from simulator.simulation.simulate import GPIPE_SHORT, simulate


@pytest.fixture(scope="module")
def a100():
    return load_profile("a100-80gb")


def _gpipe(micro: int, **kw: Any):
    return small_gpt(micro, name="gpipe", schedule="gpipe", **kw)


def _assert_extends_exactly(sc: Any, hw: Any, fidelity: str = "representative") -> Any:
    full = simulate(sc, hw, fidelity, steady=False, collapse=False)
    ext = simulate(sc, hw, fidelity, steady=True, two_point=True)
    assert full.steady is None and ext.steady is not None, "GPipe should extend exactly"
    # the first short run, or (where it does not repeat yet) the retry with twice as many
    assert ext.steady.simulated in (GPIPE_SHORT, 2 * GPIPE_SHORT)
    assert ext.plan.micro_batches == ext.steady.simulated + 1
    assert ext.steady.simulated + ext.steady.repeats == sc.grad_accum_steps
    assert_same_summary(full, ext)
    assert (ext.slowest_device, ext.comm_device) == (full.slowest_device, full.comm_device)
    assert (ext.memory.device, ext.memory.time_s) == pytest.approx(
        (full.memory.device, full.memory.time_s), rel=1e-9)
    assert ext.trace.events < full.trace.events
    return full, ext


CASES = [
    pytest.param(40, {}, id="p4"),
    pytest.param(41, {"pipeline": 8, "data": 1, "layers": 16}, id="p8-odd"),
    pytest.param(30, {"pipeline": 1, "data": 8}, id="no-pipeline-dp8"),
    pytest.param(64, {"recompute": "full"}, id="recompute-full"),
    pytest.param(40, {"recompute": "selective", "sequence_parallel": True},
                 id="selective-sp"),
    pytest.param(40, {"overlap": {"grad_reduce": False}}, id="no-overlap"),
    pytest.param(40, {"optimizer_shard": 1}, id="zero1"),
    # with the overlap slowdown (engine.core) ZeRO-2's GPipe traces do not repeat exactly and
    # are simulated in full (test_zero3_is_extended_only_where_it_repeats): free overlap here
    pytest.param(40, {"optimizer_shard": 2, "data": 4, "tensor": 1}, id="zero2-free-overlap"),
    pytest.param(40, {"offload": {"optimizer_states": True}}, id="optimizer-offload"),
]


@pytest.mark.parametrize("micro, parallel", CASES)
def test_extended_gpipe_equals_the_full_simulation(a100, micro, parallel, request):
    hw = a100
    if request.node.callspec.id.endswith("free-overlap"):
        hw = load_profile("a100-80gb", ["efficiency.overlap_compute_slowdown=0"])
    _assert_extends_exactly(_gpipe(micro, **parallel), hw)


def test_zero3_is_extended_only_where_it_repeats(a100):
    """ZeRO-3 gathers each forward's parameters: the short runs do not repeat exactly, and
    every micro-batch is simulated, with the same figures."""
    sc = _gpipe(40, optimizer_shard=3, data=8, tensor=1, pipeline=2)
    full = simulate(sc, a100, steady=False, collapse=False)
    assert_same_summary(full, simulate(sc, a100, steady=True, two_point=True))


def test_the_memory_peak_grows_by_one_micro_batch_of_activations(a100):
    """Under GPipe every stage holds every micro-batch's activations until the backward
    phase: the extended peak is the short run's plus one stash per further micro-batch."""
    full, ext = _assert_extends_exactly(_gpipe(40), a100)
    m = ext.steady.simulated
    short = simulate(_gpipe(m), a100, steady=False)
    grow = (full.memory.peak_bytes - short.memory.peak_bytes) / (40 - m)
    acts = dict(full.memory.by_category)["activations"] - dict(
        short.memory.by_category)["activations"]
    assert grow == pytest.approx(acts / (40 - m), rel=1e-12) and grow > 0


def test_full_fidelity_extends_exactly_too(a100):
    _assert_extends_exactly(_gpipe(24, pipeline=2, data=2, tensor=2), a100, "full")


def test_mixed_devices_extend_exactly():
    """An A100 stage and an H100 stage (each forwards at its own pace: the inserted
    forwards repeat their stage's own period)."""
    from simulator.api import load_hardware, load_scenario

    loaded = load_scenario("mixed-a100-h100-pp2", ["training.global_batch_size=512",
                                                   "parallel.schedule=gpipe"])
    _assert_extends_exactly(loaded.scenario, load_hardware(loaded))


def _plan_and_trace(sc: Any, hw: Any, micro: int):
    plan = lower(sc, transformer_program(sc), CostModel.from_hardware(hw), micro=micro)
    return plan, run(plan)


def test_splice_finds_both_insertion_points(a100):
    sc = _gpipe(40)
    a, b = _plan_and_trace(sc, a100, 8), _plan_and_trace(sc, a100, 9)
    assert splice(*a, *b) is None  # one insertion point cannot describe GPipe
    sp = splice(*a, *b, insertions=2)
    assert sp is not None and sp.micro_period == 1 and sp.middle_s is not None
    assert sp.period_s == pytest.approx(max(b[1].end) - max(a[1].end), rel=1e-12)
    # the backward phase starts later by the last stage's forward (its pace)
    assert 0 < sp.middle_s < sp.period_s
    inserted = dict(sp.inserted)
    assert all(inserted[(d, "compute")] == 2 for d in a[0].devices)  # one F and one B
    tasks = list(b[0].tasks)
    tasks[3] = tasks[3]._replace(duration_s=tasks[3].duration_s + 1e-9)
    from dataclasses import replace
    slower = replace(b[0], tasks=tuple(tasks))
    assert splice(*a, slower, run(slower), insertions=2) is None


def test_run_still_simulates_gpipe_in_full(a100):
    """Only a caller that asks (a sweep) gets GPipe extended; `run`'s figures are those of
    every micro-batch simulated, as before."""
    sc = _gpipe(40)
    assert simulate(sc, a100).steady is None
    assert simulate(sc, a100, steady=True).steady is None


@pytest.mark.parametrize("seed", range(3))
def test_random_gpipe_plans_extend_exactly_or_not_at_all(a100, seed):
    """Seeded draws over ZeRO stages, recompute, overlap and fusion: extended or not,
    every field equals every micro-batch simulated."""
    import random

    options = {"pipeline": [1, 2, 4], "data": [1, 2, 4], "tensor": [1, 2],
               "recompute": ["none", "full", "selective"], "optimizer_shard": [0, 1, 2, 3],
               "sequence_parallel": [False, True],
               "overlap": [{"grad_reduce": True}, {"grad_reduce": False}],
               "comm_fusion": [{"mode": "size", "bucket_mb": 25},
                               {"mode": "size", "bucket_mb": 0.05}, {"mode": "none"}]}
    rng = random.Random(seed)
    while True:  # the first valid draw of this seed
        parallel = {k: rng.choice(v) for k, v in options.items()}
        micro = rng.choice([24, 32, 48])
        try:
            sc = _gpipe(micro, **parallel)
            full = simulate(sc, a100, steady=False, collapse=False)
            break
        except InputError:
            continue
    assert_same_summary(full, simulate(sc, a100, steady=True, two_point=True))


def test_a_sweep_row_of_gpipe_equals_run():
    """The sweep extends GPipe (and leaves out the critical path); its row holds the
    figures `run --json` reports for the same overrides, every micro-batch simulated."""
    from simulator.api import load_hardware, load_scenario
    from simulator.config.resources import resolve_yaml
    from simulator.planner.sweep_eval import evaluate
    from simulator.planner.sweep_spec import SweepSpec, expand, parse_grid
    from simulator.report.sweep_table import ROW_METRICS

    # tiny-cpu as a 2-stage pipeline of 2 data-parallel replicas, 20 micro-batches each
    fixed = ("parallel.pipeline=2", "parallel.tensor=1", "training.global_batch_size=80")
    spec = SweepSpec(str(resolve_yaml("tiny-cpu", "scenarios")), "scenarios/tiny-cpu.yaml",
                     parse_grid(["parallel.schedule=gpipe"]), fixed)
    config = expand(spec)[0]
    row = evaluate(spec, config)
    loaded = load_scenario("tiny-cpu", list(config.overrides))
    hw = load_hardware(loaded)
    want = simulate(loaded.scenario, hw)
    assert want.steady is None and want.scenario.grad_accum_steps == 20
    # what the sweep ran: extended, without the reports
    swept = simulate(loaded.scenario, hw, steady=True, two_point=True, reports=False)
    assert swept.steady is not None and swept.critical_path is None
    s = summary(want)
    expected = {"iteration_time_s": s["iteration_time_s"], "mfu": s["mfu"],
                "peak_memory_bytes": s["memory"]["peak_bytes"],
                "comm_bytes_per_device": s["communication"]["bytes_per_device"],
                **{f"{k}_s": v for k, v in s["breakdown_s"].items()}}
    assert row["status"] == "ok" and set(expected) <= set(ROW_METRICS)
    for key, value in expected.items():
        assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
