"""The model-family registry: one family per `model.type` of the scenario schema, a failed
lookup that lists them, and each family's units (the blocks pipeline stages and recompute
cut at) on its own graph."""

from __future__ import annotations

import typing

import pytest

from simulator.api import load_scenario
from simulator.config.scenario.schema import Scenario
from simulator.config.scenario.schema_models import ModelConfig, model_class
from simulator.models.registry import FAMILIES, family
from simulator.models.split import graph_units


def test_one_family_per_schema_model_type():
    union = typing.get_args(Scenario.model_fields["model"].annotation)
    types = {typing.get_args(m.model_fields["type"].annotation)[0] for m in union}
    assert set(FAMILIES) == types


def test_every_schema_model_type_answers_the_scenario_rules():
    # the rules ask the model's schema class (issue 21: no rule tests the type), so each
    # type of the union is a ModelConfig, and model_class finds it by its name
    for cls in typing.get_args(Scenario.model_fields["model"].annotation):
        assert issubclass(cls, ModelConfig)
        assert model_class(typing.get_args(cls.model_fields["type"].annotation)[0]) is cls
    assert model_class("dit") is None


def test_an_unknown_family_lists_the_registered_ones():
    with pytest.raises(KeyError, match="no model family 'dit' .registered: transformer, mlp, "
                                       "resnet, graph, vit."):
        family("dit")


@pytest.mark.parametrize(("name", "units"), [
    ("tiny-cpu", 2 + 2),                  # the embedding, 2 layers, the head
    ("pipeline-mlp-8-a100", 8),           # one unit per fully connected layer
])
def test_units_of_a_family_graph(name, units):
    s = load_scenario(name).scenario
    graph = family(s.model).unplanned(s, 2)
    got = graph_units(s.model.type, [op.name for op in graph.ops])
    assert len(got) == units
    assert [op for u in got for op in u] == [op.name for op in graph.ops]


def test_layered_and_written_flags():
    assert [f.name for f in FAMILIES.values() if f.layered] == ["transformer", "vit"]
    assert [f.name for f in FAMILIES.values() if f.writes_ops] == ["graph"]
    assert all(f.written is not None for f in FAMILIES.values() if not f.layered)


def test_the_registry_finds_each_family_through_its_schema_class():
    # no list of families: each schema class names the module that defines its FAMILY
    for cls in typing.get_args(Scenario.model_fields["model"].annotation):
        name = typing.get_args(cls.model_fields["type"].annotation)[0]
        assert FAMILIES[name].name == name
        assert cls.family_module
