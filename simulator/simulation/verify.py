"""`verify` of a scenario: the numeric proof (`numeric.verify.verify_case`) of the plan
`run` times, given what the scenario decides and the program knows -- the pipeline's
StageSplit (`simulation.stage_split`), the operators recompute re-runs, the parameters the
optimizer keeps whole, the tensors offload sends to the host. The numeric backend receives
them as plain values and imports nothing of the timing path."""

from __future__ import annotations

import dataclasses
import re

from simulator.config.scenario.schema import Scenario
from simulator.errors import InputError
from simulator.graph.graph import Graph
from simulator.models.cases import VerifyCase, build_case
from simulator.models.graph_batch import resolved
from simulator.models.multicopy import sliced_model
from simulator.models.optimizer_threshold import unsharded_roles
from simulator.models.recompute import (
    SelectivePolicy,
    layer_role,
    recomputed,
    recomputed_ops,
    verify_runs,
)
from simulator.models.registry import family
from simulator.models.split import (
    StageSplit,
    by_count,
    graph_units,
    stage_ops,
    virtual_stages,
)
from simulator.models.transformer import (
    shrunk_pipeline_layers,
    staged_pipeline,
    transformer_model,
)
from simulator.numeric.execution import Faults
from simulator.numeric.host_trips import HostTrips, host_ops
from simulator.numeric.pipeline import (
    PipelineSplit,
    SendFaults,
    layer_count,
    transformer_stage_of,
)
from simulator.numeric.ps import PsRun
from simulator.numeric.recompute import Recompute
from simulator.numeric.verify import Progress, VerifyResult, verify_case
from simulator.sharding.graph_yaml import strategy_key
from simulator.sharding.layout import LayoutError
from simulator.sharding.plan import build_plan
from simulator.sharding.rules import SignatureError

__all__ = ["verify_scenario"]


def graph_recompute(s: Scenario, graph: Graph, stage_of: dict[str, int] | None
                    ) -> Recompute | None:
    """The recompute of an operator graph (mlp, resnet, `type: graph`; the verify case's, in
    plan order) under `s`, the runs that `program.graph_recompute` times, as
    `numeric.recompute.Recompute` executes them; None where nothing is recomputed.
    `stage_of`: operator -> pipeline stage, when the stages run on devices of their own."""
    names = [op.name for op in graph.ops]
    rc = recomputed(s, graph, graph_units(s.model.type, names), stage_of)
    if rc is None:
        return None
    consumers: dict[str, tuple[str, ...]] = {}
    for op in graph.ops:
        for t in dict.fromkeys(op.inputs):
            consumers[t] = consumers.get(t, ()) + (op.name,)
    runs = verify_runs(names, consumers, {op.name: op.output for op in graph.ops}, rc,
                       stage_of)
    if not runs:  # (`recomputed` refuses a recompute without runs; an empty `runs` would
        return None  # fall back to Recompute's transformer blocks)
    return Recompute(rc.__contains__, s.parallel.recompute_comm.tensor,
                     runs=tuple((k, run, readers) for k, (run, readers) in
                                sorted(runs.items())))


def host_trips(s: Scenario, graph: Graph) -> HostTrips | None:
    """The round trips to the host `run` prices (`numeric.host_trips`): the parameters
    under `parallel.offload.parameters`; under `parallel.offload.activations` the saved
    activations of every transformer layer (`lower.offload`: the embedding's and the
    head's stay on the device) or of every unit of an operator graph but the last; the
    outputs and output gradients of the host-placed operators. None without any."""
    off, placed = s.parallel.offload, host_ops(graph)
    if not (off.parameters or off.activations or placed):
        return None
    names = [op.name for op in graph.ops]
    if not off.activations:
        acts: frozenset[str] = frozenset()
    elif family(s.model).layered:
        acts = frozenset(n for n in names if re.match(r"l\d+\.", n))
    else:
        acts = frozenset(n for u in graph_units(s.model.type, names)[:-1] for n in u)
    return HostTrips(off.parameters, acts, placed)


def _kept_whole(s: Scenario, case: VerifyCase, fused_attention: bool) -> frozenset[str]:
    """The parameters (full names) the optimizer keeps whole under
    `parallel.optimizer_threshold_kb` (`program.model_program.unsharded_roles`)."""
    if not family(s.model).layered:
        return frozenset()
    roles = unsharded_roles(s, fused_attention)
    return frozenset(n for n, t in case.sharded.tensors.items()
                     if t.kind == "parameter" and layer_role(n) in roles)


def pipeline_split(s: Scenario, graph: Graph, split: StageSplit | None,
                   faults: SendFaults | None = None) -> PipelineSplit | None:
    """Where each operator of a verify graph runs when its pipeline stages run on devices
    of their own (None where they run in sequence on one set of devices): `split` (the
    StageSplit `run` lowers with, `simulation.stage_split`; None: by count) as
    {operator: virtual stage}. A transformer shrunk to fewer layers keeps one block of
    layers (one MoE period) per virtual stage, or its `parallel.pipeline_layers` shrunk as
    `models.layers.shrunk_split` does (as `models.transformer` shrank the case)."""
    layered = family(s.model).layered
    if (staged_pipeline(s) if layered else s.parallel.pipeline > 1) is False:
        return None
    names = [op.name for op in graph.ops]
    split = split or by_count(s, names)
    if not layered:
        return PipelineSplit(stage_ops(graph_units(s.model.type, names), split.counts),
                             s.parallel.pipeline, faults or SendFaults())
    layers, chunks = layer_count(graph), virtual_stages(s)
    kept = shrunk_pipeline_layers(s)
    if layers == s.model.layers:  # type: ignore[union-attr]
        counts = split.layers
    else:  # a shrunk case: as models.transformer shrank it
        counts = kept if kept is not None else (layers // chunks,) * chunks
    return PipelineSplit(transformer_stage_of(graph, counts), s.parallel.pipeline,
                         faults or SendFaults())


def verify_scenario(s: Scenario, faults: Faults | None = None,
                    fused_attention: bool = False, split: StageSplit | None = None,
                    send_faults: SendFaults | None = None, fork: bool | None = None,
                    selective: SelectivePolicy = "attention_core",
                    progress: Progress | None = None) -> VerifyResult:
    """Verify a scenario's plan; InputError when its strategies cannot be planned.
    `fused_attention`: the hardware profile's default for `model.attention: auto`, so that
    verify proves the plan `run` times; `split`: the StageSplit `run` lowers with
    (`simulation.stage_split`, priced on the profile; None: by count). `send_faults`:
    mutations of those pipelines' sends (tests). `fork`: run the whole-batch reference in
    a child process (None: where it pays, `reference.fork_pays`).
    `selective`: what the stack's selective recompute re-runs (program.recompute_policy),
    as `run` prices it. `progress(what, done, total)` is called as the work goes
    (`numeric.verify.verify_case`)."""
    copies = s.parallel.overlap.copies
    if copies > 1 and not family(s.model).writes_ops:
        # multi-copy parallel runs each micro-batch as `copies` slices along the batch, one
        # after another, their gradients summed: verify executes exactly those slices
        s = s.model_copy(update={"training": s.training.model_copy(update={
            "micro_batch_size": s.training.micro_batch_size // copies})})
    if progress is not None:
        progress("planning the sharded case", 0, 1)
    try:
        case = _copies_case(s, build_case(s, fused_attention), fused_attention)
        spec = s.parallel.parameter_server
        ps = PsRun(spec.servers, spec.sync) if s.parallel.mode == "parameter_server" else None
        select = recomputed_ops(s.parallel.recompute, selective,
                                transformer_model(s.model).ffn_activation == "swiglu",
                                s.parallel.recompute_modules) \
            if family(s.model).layered else None
        pipeline = pipeline_split(s, case.sharded, split, send_faults)
        recompute = Recompute(select, s.parallel.recompute_comm.tensor,
                              s.parallel.recompute_comm.optimizer) if select else None
        if not family(s.model).layered:
            recompute = graph_recompute(s, case.sharded,
                                        pipeline.stage_of if pipeline else None)
        result = verify_case(case, s.training.optimizer, s.training.learning_rate, s.seed,
                             s.parallel.optimizer_shard, faults, s.name, ps,
                             recompute=recompute,
                             unsharded=_kept_whole(s, case, fused_attention),
                             enable_alltoall=s.parallel.enable_alltoall,
                             pipeline=pipeline, host=host_trips(s, case.sharded),
                             fork=fork, progress=progress)
    except (SignatureError, LayoutError) as exc:
        raise InputError(s.source, strategy_key(s, exc), str(exc)) from None
    if copies > 1:
        rows = (s.training.micro_batch_size if not family(s.model).writes_ops else
                f"1/{copies} of the batch")
        note = (f"multi-copy: each micro-batch ran as {copies} slices of {rows}, one after "
                f"another, gradients summed")
        result = dataclasses.replace(result, notes=result.notes + (note,))
    return result


def _copies_case(s: Scenario, case: VerifyCase, fused_attention: bool) -> VerifyCase:
    """An operator graph under multi-copy (`parallel.overlap.copies`): its sharded run on
    the graph of one slice (`models.multicopy.sliced_model`), slice after slice, against
    the whole batch on one device."""
    copies = s.parallel.overlap.copies
    if copies == 1 or not family(s.model).writes_ops:
        return case
    whole = resolved(s)  # the global batch first, then its slices (rescaled no further)
    cut = whole.model_copy(update={"model": sliced_model(whole.model, copies)})
    try:  # (the whole batch planned: what fails is the slice)
        sliced = build_case(cut, fused_attention)
        build_plan(sliced.sharded, sliced.mesh)
    except InputError as exc:
        key, why = exc.key, exc.message
    except (SignatureError, LayoutError) as exc:
        key, why = strategy_key(cut, exc), str(exc)
    else:
        return dataclasses.replace(case, sharded=sliced.sharded,
                                   micro_reference=sliced.micro_reference, slices=copies)
    raise InputError(s.source, "parallel.overlap.copies", (
        f"{copies}: one slice of 1/{copies} of the batch cannot run the graph's strategies "
        f"({key}: {why})"))

