"""report.allocator: PyTorch's caching-allocator rounding (c10/cuda/CUDACachingAllocator.cpp)
in closed form, and `reserved_peak_bytes` of a run built from it."""

from __future__ import annotations

import pytest

from simulator.cost.specs import ComputeSpec
from simulator.program.program import Block, Program
from simulator.report.allocator import (
    LARGE_BUFFER,
    allocation_size,
    peak_requests,
    reserved_bytes,
    reserved_peak,
    round_size,
)

MIB = 1 << 20


def test_requests_round_to_512_byte_granules():
    assert round_size(1) == 512
    assert round_size(512) == 512
    assert round_size(513) == 1024
    assert round_size(3 * MIB + 1) == 3 * MIB + 512


def test_segment_sizes_follow_get_allocation_size():
    assert allocation_size(MIB) == 2 * MIB  # small: a 2 MiB segment
    assert allocation_size(MIB + 512) == 20 * MIB  # 1-10 MiB: a 20 MiB segment
    assert allocation_size(10 * MIB - 512) == 20 * MIB
    assert allocation_size(10 * MIB) == 10 * MIB  # from 10 MiB: 2 MiB multiples
    assert allocation_size(10 * MIB + 1) == 12 * MIB


def test_small_requests_pack_into_2_mib_segments():
    # 3 x 700 KiB: 2.05 MiB of granules, two 2 MiB segments
    assert reserved_bytes([(700 * 1024, 3)]) == 4 * MIB
    assert reserved_bytes([(1, 4096)]) == 2 * MIB  # 4096 x 512 B fill one segment exactly


def test_mid_requests_share_20_mib_segments_and_large_ones_round_to_2_mib():
    # a 20 MiB segment serves floor(20 / 7) = 2 requests of 7 MiB: 5 need 3 segments
    assert reserved_bytes([(7 * MIB, 5)]) == 3 * LARGE_BUFFER
    assert reserved_bytes([(11 * MIB, 2)]) == 24 * MIB
    assert reserved_bytes([(11 * MIB, 2), (7 * MIB, 1), (1000, 1)]) == (
        24 * MIB + 20 * MIB + 2 * MIB)


def test_expandable_segments_round_each_pool_to_its_page():
    # large pool: 11 MiB x 2 + 7 MiB = 29 MiB in 20 MiB pages; small pool one 2 MiB page
    assert reserved_bytes([(11 * MIB, 2), (7 * MIB, 1), (1000, 1)], expandable=True) == (
        40 * MIB + 2 * MIB)
    # and never less than what is allocated
    assert reserved_bytes([(7 * MIB + 1, 3)], expandable=True) >= 3 * (7 * MIB + 1)


def _program() -> Program:
    ops = (ComputeSpec("a", "matmul", 1.0, 1.0, "bf16", saved_bytes=7 * MIB),
           ComputeSpec("b", "matmul", 1.0, 1.0, "bf16", saved_bytes=11 * MIB))
    return Program((Block("layer", ops, (), repeat=4, params=10, param_tensors=2),), "bf16")


def test_the_peak_activations_are_apportioned_over_the_saved_tensors():
    # 36 MiB of activations = 2 copies of the layer's (7 + 11) MiB
    reqs = peak_requests(_program(), {"activations": 36 * MIB, "parameters": 5 * MIB})
    assert reqs == [(7 * MIB, 2.0), (11 * MIB, 2.0), (5 * MIB, 1.0)]
    # 7 MiB x 2 share a 20 MiB segment, 11 MiB x 2 take 12 MiB each, the 5 MiB parameters
    # a 20 MiB segment of their own (one request per category: 2 segments of 20 MiB)
    assert reserved_peak(_program(), {"activations": 36 * MIB, "parameters": 5 * MIB,
                                      "framework_overhead": 999 * MIB}, "pytorch") == (
        2 * 20 * MIB + 24 * MIB)
    assert reserved_peak(_program(), {"activations": 36 * MIB}, None) is None


def test_run_reports_reserved_at_least_allocated_and_none_without_torch(tmp_path):
    from simulator import load_scenario, simulate
    from simulator.report import summary

    base = "benchmarks/data/memory/tt-h100-llama31-8b.yaml"
    # without FSDP (ZeRO-1) no allocation sequence is modelled: the closed form, the
    # tensors alive at the peak rounded
    mem = summary(simulate(load_scenario(base, ["model.layers=2",
                                                "parallel.optimizer_shard=1"])))["memory"]
    assert mem["reserved_model"] == "closed_form"
    assert mem["allocated_peak_bytes"] <= mem["reserved_peak_bytes"] <= (
        mem["allocated_peak_bytes"] + 2 * LARGE_BUFFER + 2 * MIB)
    other = summary(simulate(load_scenario(base, ["model.layers=2",
                                                  "framework=mindspore"])))["memory"]
    assert other["reserved_peak_bytes"] is None and other["reserved_model"] is None


def test_fsdp2_run_reports_the_replayed_reserve():
    from simulator import load_scenario, simulate
    from simulator.report import summary
    from simulator.report.alloc_sequence import replay_result

    result = simulate(load_scenario("benchmarks/data/memory/tt-h100-llama31-8b.yaml",
                                    ["model.layers=2"]))
    mem = summary(result)["memory"]
    replayed = replay_result(result)
    assert mem["reserved_model"] == "allocation_replay" and replayed is not None
    assert mem["reserved_peak_bytes"] == replayed.peak_reserved >= replayed.peak_allocated
    # the reserve of the three streams adds up; the reduce-scatter stream holds at least
    # the sharded fp32 gradients (4 B a parameter over the 8 ranks)
    assert sum(replayed.reserved_by_stream.values()) == replayed.reserved
    grads = dict(result.plan.static_memory[0])["gradients"]
    assert replayed.peak_by_stream["reduce_scatter"] >= grads


@pytest.mark.parametrize("size", [1, 511, MIB, MIB + 1, 10 * MIB - 1, 10 * MIB, 33 * MIB + 3])
def test_one_request_reserves_its_segment(size):
    assert reserved_bytes([(size, 1)]) == allocation_size(round_size(size))


def test_memory_figure_draws_the_reserve_beside_the_stack_overhead():
    from simulator import load_scenario, simulate
    from simulator.report import summary
    from simulator.report.interactive import memory_figure

    base = "benchmarks/data/memory/tt-h100-llama31-8b.yaml"
    result = simulate(load_scenario(base, ["model.layers=2"]))
    mem = summary(result)["memory"]
    line = [t for t in memory_figure(result)["data"] if t["name"] == "reserved at the peak"]
    expected = (mem["reserved_peak_bytes"] + mem["framework_overhead_bytes"]) / 1e9
    assert len(line) == 1 and line[0]["y"][0] == pytest.approx(expected, rel=1e-3)
    other = simulate(load_scenario(base, ["model.layers=2", "framework=mindspore"]))
    assert not [t for t in memory_figure(other)["data"] if t["name"] == "reserved at the peak"]
