"""The StageSplit `verify` executes: which operators sit on which pipeline stage, computed
as `run` computes it (the priced balance of `lower.stages` on the scenario's hardware
profile) and handed to the numeric backend as a plain {operator: virtual stage} map."""

from __future__ import annotations

from simulator.config.framework.load import framework_for
from simulator.lower.costs import CostModel
from simulator.lower.framework_apply import fp8_recipe
from simulator.lower.layout import rank_mesh
from simulator.lower.stages import default_split, stage_layers, stage_work
from simulator.numeric.pipeline import (
    PipelineSplit,
    SendFaults,
    layer_count,
    transformer_stage_of,
)
from simulator.program.graph_stages import stage_ops
from simulator.program.model_program import graph_program, transformer_program

__all__ = ["stage_split", "transformer_split"]


def stage_split(scenario, hw=None, faults: SendFaults | None = None) -> PipelineSplit:
    """{operator: virtual stage} of an mlp, resnet or graph scenario's pipeline, the split
    `run` times: with the hardware profile `hw`, its stages exactly (a balanced split is
    priced on `hw`); without one, the given split or units balanced by count."""
    gp = graph_program(scenario)
    seq = gp.program.sequence()
    assert len(seq) > 1, "a pipeline's program is cut into units"
    layout = rank_mesh(scenario, gp.mesh)
    if hw is not None:
        counts = tuple(w.copies for w in stage_work(scenario, gp.program, layout,
                                                    CostModel.from_hardware(hw)))
    else:
        counts = default_split(scenario, gp.program, layout.virtual_stages)
    units = tuple(b.ops for b in seq)
    return PipelineSplit(stage_ops(scenario, units, counts), layout.pipeline,
                         faults or SendFaults())


def _run_layers(scenario, chunks: int, hw) -> tuple[int, ...]:
    """Layers of each virtual stage as `run` assigns them: `parallel.pipeline_layers`, or
    the split `stage_work` prices on the profile `hw` (without one: an even split whose
    remainder goes to the earliest stages, `stage_layers` with equal weights)."""
    p, m = scenario.parallel, scenario.model
    unit = m.moe.every if m.moe else 1
    if p.pipeline_layers is not None or hw is None:
        return tuple(n * unit for n in stage_layers(scenario, chunks, m.layers // unit, 1.0,
                                                   0.0, 0.0, unit))
    fw = framework_for(scenario, hw)
    prog = transformer_program(scenario, fw.software, hw.compute_units,
                               fp8_recipe(scenario, fw))
    return tuple(w.layers for w in stage_work(scenario, prog, rank_mesh(scenario),
                                              CostModel.from_hardware(hw)))


def transformer_split(scenario, graph, hw=None, faults: SendFaults | None = None
                      ) -> PipelineSplit:
    """{operator: virtual stage} of a transformer pipeline's verify graph (`build_gpt`,
    `numeric.pipeline.transformer_stage_of`). With the scenario's own layer count, its
    layers as `run` assigns them (`_run_layers`); a shrunk model keeps one block of layers
    (one MoE period) per virtual stage."""
    p = scenario.parallel
    chunks = p.pipeline * (p.virtual_stages if p.schedule == "interleaved_1f1b" else 1)
    layers = layer_count(graph)
    counts = (_run_layers(scenario, chunks, hw) if layers == scenario.model.layers
              else (layers // chunks,) * chunks)
    return PipelineSplit(transformer_stage_of(graph, counts), p.pipeline,
                         faults or SendFaults())
