"""A sweep reuses work across configurations (issue 11): the model program is derived once
per distinct model, layout and micro-batch size (`model_program.memoised_programs`) and
stage pricing once per program and cost model (`stages.stage_work`). Both must leave every
row exactly as a sweep that derives and prices everything afresh for each configuration."""

from __future__ import annotations

import pytest

import simulator.planner.sweep_eval as sweep_mod
from simulator.config.resources import resolve_yaml
from simulator.lower import stages
from simulator.planner.sweep import sweep_into
from simulator.planner.sweep_exec import SerialExecutor
from simulator.planner.sweep_spec import SweepSpec, parse_grid
from simulator.program import model_program

# GPT-3 175B on pipeline 4 x data 32, 512 samples: 16 or 8 micro-batches, so 1F1B with 16
# is extended from shortened steady states, the other runs simulated in full
FIXED = ("parallel.pipeline=4", "parallel.data=32", "training.global_batch_size=512")
GRID = ("training.micro_batch_size=1,2", "parallel.schedule=gpipe,1f1b",
        "parallel.sequence_parallel=false,true")


def _spec() -> SweepSpec:
    path = resolve_yaml("gpt3-175b-1024-a100", "scenarios")
    return SweepSpec(str(path), "scenarios/gpt3-175b-1024-a100.yaml", parse_grid(GRID), FIXED)


def _fresh_caches() -> None:
    sweep_mod.PROGRAMS.clear()
    stages._PRICED.clear()
    for cached in (sweep_mod._scenario_data, sweep_mod._profile, sweep_mod._costs):
        cached.cache_clear()


def test_rows_with_reuse_equal_rows_without(monkeypatch):
    _fresh_caches()
    reused = sweep_into(_spec(), None, SerialExecutor())
    # one program per (micro-batch size, sequence parallel): the schedules share it
    assert len(sweep_mod.PROGRAMS) == 4
    assert all(r["status"] == "ok" for r in reused)
    monkeypatch.setattr(model_program, "MEMO_SIZE", 0)
    monkeypatch.setattr(stages, "PRICED_SIZE", 0)
    fresh = []
    for index in range(len(reused)):  # every configuration from cold caches
        _fresh_caches()
        fresh += sweep_into(_spec(), None, _Only(index))
    assert len(sweep_mod.PROGRAMS) == 0 and len(stages._PRICED) == 0
    assert fresh == reused


class _Only:
    """An executor that runs only the job at position `index` (one configuration)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def imap(self, fn, jobs):
        yield fn(jobs[self.index])


@pytest.mark.parametrize("other", ["parallel.schedule=gpipe", "parallel.overlap.grad_reduce=false",
                                   "parallel.comm_fusion.bucket_mb=400",
                                   "training.global_batch_size=768"])
def test_a_program_is_shared_only_where_its_inputs_agree(other):
    from simulator.api import load_scenario

    base = load_scenario("gpt3-175b-1024-a100", []).scenario
    same = load_scenario("gpt3-175b-1024-a100", [other]).scenario
    differs = load_scenario("gpt3-175b-1024-a100", ["parallel.sequence_parallel=true"]).scenario
    store: dict = {}
    with model_program.memoised_programs(store):
        first = model_program.transformer_program(base)
        assert model_program.transformer_program(same) is first
        assert model_program.transformer_program(differs) is not first
    assert len(store) == 2
    assert first == model_program.transformer_program(base)  # outside: derived afresh
    assert model_program.transformer_program(differs) != first


def test_the_optimizer_threshold_is_part_of_the_program_key():
    """The program reads optimizer_shard (the threshold applies only to a sharded
    optimizer): configurations that differ there must not share a program."""
    from simulator.api import load_hardware, load_scenario
    from simulator.program.model_program import memoised_programs, transformer_program

    store: dict = {}
    progs = []
    with memoised_programs(store):
        for shard in (0, 1):
            loaded = load_scenario("tiny-cpu", [f"parallel.optimizer_shard={shard}"]
                                   + (["parallel.optimizer_threshold_kb=1"] if shard else []))
            hw = load_hardware(loaded)
            progs.append(transformer_program(loaded.scenario, compute_units=hw.compute_units))
    assert len(store) == 2
    assert progs[0].block("layer").unsharded == 0 < progs[1].block("layer").unsharded


def test_the_interleaved_schedule_is_part_of_the_program_key():
    """Megatron-Core's pipeline sends block the compute stream except in the interleaved
    schedule (`stack_ops.p2p_blocking`, which the program holds): 1F1B and GPipe may share
    a program, the interleaved schedule may not (it did, and a plan searched under the memo
    ranked Llama 2 70B's 1F1B configurations with the interleaved program's sends)."""
    from simulator.api import load_hardware, load_scenario
    from simulator.config.framework.load import framework_for

    progs, store = {}, {}
    with model_program.memoised_programs(store):
        for schedule in ("interleaved_1f1b", "1f1b", "gpipe"):
            chunks = 2 if schedule == "interleaved_1f1b" else 1  # not read by the program
            loaded = load_scenario("llama2-70b-64-h100", [f"parallel.schedule={schedule}",
                                                           f"parallel.virtual_stages={chunks}"])
            fw = framework_for(loaded.scenario, load_hardware(loaded))
            assert fw.software.p2p_blocking == "non_interleaved"
            progs[schedule] = model_program.transformer_program(loaded.scenario, fw.software)
    assert len(store) == 2 and progs["gpipe"] is progs["1f1b"]
    assert not progs["interleaved_1f1b"].p2p_blocking and progs["1f1b"].p2p_blocking
