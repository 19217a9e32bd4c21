"""The rules an operator graph written out in the scenario (`model.type: graph`) answers for
itself (`GraphModel`'s hooks in `schema_models`): its own batch and mesh, its gradient
reductions, and its pipeline stages (`attrs.pipeline_stage`, MindSpore's
Cell.pipeline_stage)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from simulator.config.scenario import graph_batch
from simulator.config.scenario.pipeline_rules import too_few_units, unit_split
from simulator.config.scenario.rule_helpers import Problem, divisors
from simulator.config.scenario.schema_parallel import CommFusionSpec

if TYPE_CHECKING:
    from simulator.config.scenario.schema import Scenario
    from simulator.config.scenario.schema_models import GraphModel

__all__ = ["own_batch", "reductions", "pipeline", "copies"]


def own_batch(m: GraphModel, s: Scenario) -> Iterator[Problem]:
    """An operator graph carries its own batch (its input tensors, rescaled by
    `training.global_batch_size` where given) and its own device mesh (`model.mesh` and the
    strategies), which `parallel.data` replicates: the other degree and batch keys do not
    apply."""
    fixed = (("parallel.tensor", s.parallel.tensor),
             ("training.micro_batch_size", s.training.micro_batch_size))
    for key, value in fixed:
        if value != 1:
            yield key, (f"{value} does not apply to model.type graph, whose batch is its "
                        f"input tensors' first dim and whose split is model.mesh with the "
                        f"operators' strategies (allowed: 1)")
    yield from graph_batch.problems(m, s)


def reductions(s: Scenario) -> Iterator[Problem]:
    """An operator graph's gradient reductions over its own mesh follow its operators'
    strategies and run coalesced once after the backward; over `parallel.data`'s replicas
    (the outer axis `dp`) they are the data-parallel reduction, which optimizer sharding
    and fusion buckets shape as for any model. Without replicas those keys have no group
    to act on, and without a pipeline the reduction waits for the whole backward (one
    block, `Program.whole_grads`), so the overlap keys have nothing to hide it under:
    refused rather than ignored."""
    p = s.parallel
    why = ("acts on the data-parallel reduction over parallel.data's replicas of "
           "model.mesh; with parallel.data=1 a graph's gradient reductions follow its "
           "operators' strategies on model.mesh and run once after the backward")
    if p.data == 1 and p.optimizer_shard:
        yield "parallel.optimizer_shard", f"{p.optimizer_shard}: {why} (allowed: 0)"
    if p.data == 1 and p.comm_fusion != CommFusionSpec():
        yield "parallel.comm_fusion", f"{why} (remove the key, or set parallel.data > 1)"
    if p.data > 1 and p.pipeline > 1:
        return
    if p.data > 1:
        why = ("not simulated for model.type graph without a pipeline, whose reduction over "
               "the replicas starts once its whole backward has run (nothing to overlap)")
    for key in ("grad_reduce", "param_gather"):
        if getattr(p.overlap, key) is not True:
            yield f"parallel.overlap.{key}", f"false: {why} (allowed: true)"


def pipeline(m: GraphModel, s: Scenario) -> Iterator[Problem]:
    """A pipeline over an operator graph cuts its operators into one contiguous run per
    virtual stage, each stage on devices of its own, as `pipeline_layers` or the operators'
    `attrs.pipeline_stage` give them; operators on the host stay off a pipeline."""
    p, units, word = s.parallel, m.pipeline_units(), m.units_key
    problem = too_few_units(s, units, word)
    if problem is not None:
        yield problem
        return
    if s.devices % p.pipeline:
        yield "parallel.pipeline", (f"{p.pipeline} must divide the {s.devices} devices "
                                    f"(valid: {divisors(s.devices)})")
    yield from unit_split(s, units, word)
    yield from _stage_attrs(m, p.chunks, p.pipeline_layers is not None)
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


def copies(m: GraphModel, s: Scenario) -> Iterator[Problem]:
    """Multi-copy parallel slices an operator graph's batch (an input's or label's first
    dim, and a Reshape's explicit first entry) into `copies` parts (`models.multicopy`)."""
    c = s.parallel.overlap.copies
    if c == 1:
        return
    dims = graph_batch.batch_dims(m, s)
    dims += [(f"model.ops[{i}].attrs.shape", int(op.attrs["shape"][0]))
             for i, op in enumerate(m.ops) if op.type == "Reshape"
             and op.attrs.get("shape") and int(op.attrs["shape"][0]) != -1
             and "global_batch_size" not in s.training.model_fields_set]
    for key, n in dims:
        if n % c:
            yield key, (f"batch {n} is not divisible by parallel.overlap.copies={c} (the "
                        f"copies are slices of the batch; valid copies: {divisors(n)})")
            return
