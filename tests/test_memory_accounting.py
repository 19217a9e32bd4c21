"""Memory accounting of issue 24: what each rank holds, as the stacks allocate it."""

from __future__ import annotations

import pytest

from simulator import load_scenario, simulate


def _states(*sets: str) -> dict[str, float]:
    result = simulate(load_scenario("cp-llama3-8b-128k-16-h100", list(sets)))
    return dict(result.memory.by_category)


def test_distributed_optimizer_shards_over_data_times_context():
    """Megatron-LM's distributed optimizer spans the data x context ranks
    (get_data_parallel_group(with_context_parallel=True)): with data 1 and context 8 each
    rank keeps 1/8 of the fp32 states, the weights and gradients whole (ZeRO stage 1)."""
    whole = _states("parallel.optimizer_shard=0")
    sharded = _states("parallel.optimizer_shard=1")
    assert sharded["optimizer_states"] == pytest.approx(whole["optimizer_states"] / 8)
    assert sharded["parameters"] == whole["parameters"]
    assert sharded["gradients"] == whole["gradients"]
    # stage 2 shards the gradients over the same 8 ranks
    stage2 = _states("parallel.optimizer_shard=2")
    assert stage2["gradients"] == pytest.approx(whole["gradients"] / 8)


def test_run_json_splits_the_peak_into_allocated_and_framework_overhead():
    from simulator.report import summary

    result = simulate(load_scenario("llama2-7b-8-ascend910b"))
    mem = summary(result)["memory"]
    overhead = dict(result.memory.by_category)["framework_overhead"]
    assert overhead > 0
    assert mem["framework_overhead_bytes"] == round(overhead)
    assert mem["allocated_peak_bytes"] + mem["framework_overhead_bytes"] == pytest.approx(
        mem["peak_bytes"], abs=1)
    assert mem["reserved_peak_bytes"] is None  # no cited fragmentation rule: not invented
