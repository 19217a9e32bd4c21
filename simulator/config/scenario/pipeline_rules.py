"""Scenario rules of a pipeline over a model cut into units (`schedule.graph_stages`: an mlp's
layers, a resnet's conv and FC layers, a graph's operators): enough units, and a split
that covers them (the families' hooks in `schema_models` call them)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from simulator.config.scenario.rule_helpers import Problem, stage_count_problem

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario

__all__ = ["too_few_units", "unit_split", "unit_pipeline"]


def too_few_units(s: Scenario, units: int, word: str) -> Problem | None:
    """Fewer `units` (counted by the keys `word`) than the pipeline has chunks."""
    p = s.parallel
    if units < p.chunks:
        return "parallel.pipeline", (
            f"{p.pipeline} stages x {p.chunks // p.pipeline} chunks need at least {p.chunks} "
            f"units; a model of type '{s.model.type}' has {units} ({word})")
    return None


def unit_split(s: Scenario, units: int, word: str) -> Iterator[Problem]:
    """`parallel.pipeline_layers` of a unit-cut model: one count per virtual stage, adding
    up to its units, at least one each."""
    given = s.parallel.pipeline_layers
    if given is None:
        return
    problem = stage_count_problem(given, s.parallel.chunks, units, "units", word)
    if problem is not None:
        yield problem
    elif 0 in given:
        yield "parallel.pipeline_layers", f"{given}: every stage needs at least one unit"


def unit_pipeline(s: Scenario, units: int, word: str) -> Iterator[Problem]:
    """A pipeline cuts the units into one contiguous run per virtual stage, at least one
    unit each. Shared by run and verify."""
    problem = too_few_units(s, units, word)
    if problem is not None:
        yield problem
        return
    yield from unit_split(s, units, word)
