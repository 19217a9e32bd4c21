"""Scenario rules of a pipeline over an mlp, resnet or graph model (`schedule.graph_stages`
cuts it into units: layers, operators): enough units, a split that covers them, and the
operators' `attrs.pipeline_stage` (MindSpore's Cell.pipeline_stage) in order."""

from __future__ import annotations

from collections.abc import Iterator

from simulator.config.scenario.rule_helpers import Problem, divisors, stage_count_problem
from simulator.config.scenario.schema import GraphModel, MlpModel, Scenario, TransformerModel

__all__ = ["graph_pipeline", "pipeline_units"]

def pipeline_units(s: Scenario) -> int:
    """Units a pipeline cuts an mlp, resnet or graph model into (`schedule.graph_stages`):
    its hidden layers, its conv and FC layers, its operators."""
    m = s.model
    if isinstance(m, GraphModel):
        return len(m.ops)
    return m.layers if isinstance(m, MlpModel) else m.conv_layers + m.fc_layers  # type: ignore[union-attr]


def _units_word(s: Scenario) -> str:
    return {"mlp": "model.layers", "resnet": "model.conv_layers + model.fc_layers",
            "graph": "operators in model.ops"}[s.model.type]


def graph_pipeline(s: Scenario) -> Iterator[Problem]:
    """A pipeline over an mlp, resnet or graph model cuts its units (layers, operators) into
    one contiguous run per virtual stage: at least one unit each, as `pipeline_layers` or
    the operators' `attrs.pipeline_stage` give them. Shared by run and verify."""
    p, m = s.parallel, s.model
    if isinstance(m, TransformerModel):
        return
    chunks = p.pipeline * (p.virtual_stages if p.schedule == "interleaved_1f1b" else 1)
    units, word = pipeline_units(s), _units_word(s)
    if units < chunks:
        yield "parallel.pipeline", (
            f"{p.pipeline} stages x {chunks // p.pipeline} chunks need at least {chunks} "
            f"units; a model of type '{m.type}' has {units} ({word})")
        return
    if isinstance(m, GraphModel) and s.devices % p.pipeline:
        yield "parallel.pipeline", (f"{p.pipeline} must divide the {s.devices} devices "
                                    f"(valid: {divisors(s.devices)})")
    given = p.pipeline_layers
    if given is not None:
        problem = stage_count_problem(given, chunks, units, "units", word)
        if problem is not None:
            yield problem
        elif 0 in given:
            yield "parallel.pipeline_layers", f"{given}: every stage needs at least one unit"
    if isinstance(m, GraphModel):
        yield from _stage_attrs(m, chunks, given is not None)
        on_host = [i for i, op in enumerate(m.ops) if op.attrs.get("primitive_target") == "CPU"]
        if p.pipeline > 1 and on_host:
            yield f"model.ops[{on_host[0]}].attrs.primitive_target", (
                f"CPU with parallel.pipeline={p.pipeline} is not simulated yet (allowed "
                f"with a pipeline: GPU, Ascend)")


def _stage_attrs(m: GraphModel, chunks: int, layers_given: bool) -> Iterator[Problem]:
    """`attrs.pipeline_stage` (MindSpore's Cell.pipeline_stage) on graph operators: an
    integer stage in execution order, never going back; an operator without one stays on
    the stage of the operator before it; every stage gets at least one operator."""
    given = [(i, op.attrs["pipeline_stage"]) for i, op in enumerate(m.ops)
             if "pipeline_stage" in op.attrs]
    if not given:
        return
    if layers_given:
        yield "parallel.pipeline_layers", ("give either parallel.pipeline_layers or the "
                                           "operators' attrs.pipeline_stage, not both")
        return
    current = 0
    for i, stage in given:
        where = f"model.ops[{i}].attrs.pipeline_stage"
        if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < chunks:
            yield where, (f"{stage!r}: not a stage of parallel.pipeline*virtual_stages = "
                          f"{chunks} (allowed: 0 to {chunks - 1})")
            return
        if stage < current:
            yield where, (f"{stage} comes after an operator on stage {current}; stages run "
                          f"in operator order (allowed: {current} to {chunks - 1})")
            return
        current = stage
    stages = set()
    current = 0
    for op in m.ops:
        current = op.attrs.get("pipeline_stage", current)
        stages.add(current)
    missing = sorted(set(range(chunks)) - stages)
    if missing:
        yield "model.ops", (f"no operator is on pipeline stage {missing[0]} "
                            f"(attrs.pipeline_stage); every stage of "
                            f"parallel.pipeline*virtual_stages = {chunks} needs one")
