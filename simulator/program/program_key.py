"""What a transformer's model program (`model_program._derive`) reads of its inputs: the
key under which `memoised_programs` and the planner's floors share one program."""

from __future__ import annotations

from typing import Any

from simulator.config.hardware.schema import Software
from simulator.config.scenario.schema import Scenario
from simulator.program.fp8 import Fp8Recipe
from simulator.program.stack_ops import p2p_blocking

__all__ = ["UNREAD", "program_key"]

# Scenario fields `model_program._derive` provably never reads (pydantic `exclude` form): a
# memoised program is keyed on the scenario's JSON without them, so configurations of a
# sweep that differ only there (buckets, schedule, pipeline, batch size, optimizer) share
# one program. A field not listed here is part of the key: a field read later can only cost
# hits. The schedule is read once, for `p2p_blocking`, which `program_key` adds to the key
# (Megatron's pipeline sends block the compute stream except in the interleaved schedule).
UNREAD: dict[str, Any] = {
    "name": True, "source": True, "hardware": True, "framework": True, "cluster": True,
    "seed": True, "training": {"global_batch_size": True, "optimizer": True,
                               "learning_rate": True},
    "parallel": {k: True for k in ("pipeline", "schedule", "virtual_stages", "pipeline_layers",
                                   "offload", "comm_fusion", "mode", "parameter_server",
                                   "search", "comm_subgraph")}
    | {"overlap": {"grad_reduce": True, "param_gather": True, "copies": True}}}


def program_key(scenario: Scenario, software: Software, compute_units: int,
                fp8: Fp8Recipe | None, unread: dict[str, Any] = UNREAD) -> tuple:
    """What `model_program._derive` reads of its inputs: the scenario less the `unread`
    fields, and of the schedule whether the stack's pipeline sends block (`p2p_blocking`)."""
    return (scenario.model_dump_json(exclude=unread), software, compute_units, fp8,
            p2p_blocking(software, scenario.parallel.schedule))
