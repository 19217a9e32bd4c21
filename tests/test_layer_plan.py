"""Layers that differ (`models.layers`): the layer plan a program stands for its layers with,
the kinds a shrunk verify case keeps, and a model whose layers are not one repeated group
(a mixture of experts in its last layer only) simulated group by group: its parameters and
FLOPs are the sum of its layers', and verify proves it."""

from __future__ import annotations

import math

import pytest

from simulator.api import simulate, verify
from simulator.config.loaded import load_scenario
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import LayerKind
from simulator.models.layers import layer_kinds, layer_plan, period, shrunk_kinds
from simulator.models.params import transformer_params
from simulator.models.transformer_plan import gpt_dims

D, M = LayerKind(), LayerKind(ffn="moe")


def test_period_is_the_least_repeat_that_divides_the_layers():
    assert period((D,) * 8) == 1
    assert period((D, M) * 4) == 2
    assert period((D, D, M) * 2) == 3
    assert period((D, D, M)) == 3          # does not repeat: its length
    assert period((D, M, D)) == 3          # 2 does not divide 3


def test_a_repeating_sequence_is_one_group_planned_between_two_others():
    lp = layer_plan((D, M) * 16)
    assert (lp.unit, lp.graph, lp.groups, lp.runs) == (2, (D, M) * 3, (((D, M), 2),),
                                                       ((0, 16),))
    short = layer_plan((D, M) * 2)  # fewer than three groups: the whole model
    assert (short.graph, short.groups) == ((D, M) * 2, (((D, M), 0),))


def test_other_sequences_are_one_group_per_kind_in_runs():
    kinds = (D,) * 3 + (M,) * 58  # DeepSeek-V3's first three layers dense
    lp = layer_plan(kinds)
    assert lp.unit == 1
    assert lp.graph == (D, D, M, M)  # each kind between two layers
    assert lp.groups == (((D,), 1), ((M,), 2))
    assert lp.runs == ((0, 3), (1, 58))
    assert sum(n for _, n in lp.runs) == len(kinds)
    mixed = layer_plan((D, M, M, D, M))
    assert mixed.graph == (D, D, M, M) and mixed.runs == ((0, 1), (1, 2), (0, 1), (1, 1))
    short = layer_plan((D, M, M, D))  # short: the model itself, first occurrences
    assert short.graph == (D, M, M, D) and short.groups == (((D,), 0), ((M,), 1))


def test_a_shrunk_model_keeps_every_kind():
    assert shrunk_kinds((D, D, D, M) * 4, 2) == (D, M)       # MoE every 4th layer
    assert shrunk_kinds((D, D, D, M) * 4, 8) == (D, D, D, M) * 2  # whole periods
    assert shrunk_kinds((D, M) * 8, 2) == (D, M)
    assert shrunk_kinds((D,) * 3 + (M,) * 58, 3) == (D, M, D)
    assert shrunk_kinds((D, M), 4) == (D, M)  # never more layers than the model


MOE_LAST = ["model.layers=3", "model.moe={experts: 2, top_k: 1, every: 3}"]


@pytest.fixture(scope="module")
def moe_last():
    return load_scenario("tiny-cpu", MOE_LAST)


def test_a_model_of_two_groups_is_cut_into_their_runs(moe_last):
    prog = simulate(moe_last).program
    assert [(b.name, b.repeat, b.layers) for b in prog.cut()] == [("layer0", 2, 1),
                                                                   ("layer1", 1, 1)]
    assert layer_kinds(moe_last.scenario.model) == (D, D, M)


def test_its_parameters_are_its_layers_parameters(moe_last):
    m = moe_last.scenario.model
    graph = build_gpt(gpt_dims(moe_last.scenario, False))
    whole = sum(math.prod(t.shape) for t in graph.of_kind("parameter"))
    assert transformer_params(m).total == whole
    prog = simulate(moe_last).program  # tensor 2: half of each layer's matrices per device
    dense, moe = prog.cut()
    assert dense.params < moe.params  # the router and two experts against one FFN


def test_its_flops_are_the_sum_of_its_layers(moe_last):
    """Two dense layers and an MoE one: 2/3 of an all-dense model's FLOPs and 1/3 of an
    all-MoE model's (the embedding and head, alike in all three, add up the same way)."""
    both = simulate(moe_last).model_flops
    dense = simulate(load_scenario("tiny-cpu", ["model.layers=3"])).model_flops
    moe = simulate(load_scenario("tiny-cpu", ["model.layers=3", "model.moe={experts: 2, "
                                              "top_k: 1, every: 1}"])).model_flops
    assert both == pytest.approx(2 * dense / 3 + moe / 3, rel=1e-12)
    assert dense < both < moe


def test_verify_proves_it(moe_last):
    report = verify(moe_last)
    assert report.ok
    checked = {c.tensor for c in report.checks}
    assert {"l2.experts.w1.grad", "l0.w1.grad", "l1.w1.grad"} <= checked
    assert not any(t.startswith(("l0.experts", "l1.experts")) for t in checked)
