"""A shrunk verify case keeps an uneven `parallel.pipeline_layers` (issue 26): each stage keeps
its layers beyond the stage of fewest plus one group, so [19, 21, 20, 20] is proven as
[1, 3, 2, 2] instead of as an even split indistinguishable from [20, 20, 20, 20]."""

from __future__ import annotations

from collections import Counter

import pytest

from simulator.config.loaded import load_scenario
from simulator.models.cases import build_case
from simulator.models.layers import shrunk_split
from simulator.numeric.pipeline import SendFaults
from simulator.simulation.verify import pipeline_split, verify_scenario

PIPE = ["model.layers=80", "parallel.data=1", "parallel.tensor=1", "parallel.pipeline=4"]


def test_shrunk_split_keeps_the_differences_between_stages():
    assert shrunk_split([19, 21, 20, 20], 1) == (1, 3, 2, 2)
    assert shrunk_split([20, 20, 20, 20], 1) == (1, 1, 1, 1)
    assert shrunk_split([4, 8, 6], 2) == (2, 6, 4)  # groups of 2 layers (MoE every 2)


def _layers_per_stage(split: str) -> list[int]:
    s = load_scenario("tiny-cpu", PIPE + [f"parallel.pipeline_layers={split}"]).scenario
    case = build_case(s)
    stage_of = pipeline_split(s, case.sharded, None).stage_of
    firsts = Counter(stage_of[op.name] for op in case.sharded.ops if op.name.endswith(".ln1"))
    return [firsts[i] for i in range(4)]


def test_the_shrunk_case_runs_the_uneven_split():
    assert _layers_per_stage("[19,21,20,20]") == [1, 3, 2, 2]
    assert _layers_per_stage("[20,20,20,20]") == [1, 1, 1, 1]


@pytest.mark.parametrize("split", ["[19,21,20,20]"])
def test_verify_passes_and_fails_under_a_dropped_send(split: str):
    s = load_scenario("tiny-cpu", PIPE + [f"parallel.pipeline_layers={split}"]).scenario
    ok = verify_scenario(s)
    assert ok.ok
    assert any("kept as [1, 3, 2, 2]" in n for n in ok.notes)
    assert not verify_scenario(s, send_faults=SendFaults(drop=("fwd", 1))).ok
