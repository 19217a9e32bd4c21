"""The default pipeline split of a model of distinct blocks (a hybrid's Mamba and attention
layers, DeepSeek-V3's dense and MoE layers) counts the blocks pinned to the first and last
stage (embedding, LM head, MTP), as the split of alike layers does (`models.split.
stage_layers`): the last stage, which also runs the head, gets fewer layers."""

from __future__ import annotations

from simulator import load_scenario, simulate

NEMOTRON = "nemotron-h-56b-32-h100"


def test_pinned_head_takes_its_place_on_the_last_stage():
    balanced = simulate(load_scenario(NEMOTRON))
    layers = tuple(balanced.plan.stage_layers)
    assert len(layers) == 2 and layers[0] > layers[1]
    # the split that ignores the head (even halves) is no faster
    even = simulate(load_scenario(NEMOTRON, ["parallel.pipeline_layers=[59,59]"]))
    assert balanced.iteration_time_s < even.iteration_time_s
