"""The pipeline of a torchtitan job config: the schedule and the layers of each stage as
torchtitan/distributed/pipeline_parallel.py @238fa99 builds them (`pipeline_llm`: one stage a
rank for a single-stage schedule, two for a looped one unless
`pipeline_parallel_layers_per_stage` says; `generate_llm_fqn_per_model_part`: the layers plus
the embedding and the output counted as `first_stage_less_layers` / `last_stage_less_layers`
layers, split as evenly as whole layers go, the remainder to the first stages)."""

from __future__ import annotations

import math
from typing import Any

from simulator.config.imports.torchtitan_source import Toml

__all__ = ["pipeline_keys", "stage_layers", "SCHEDULES"]

# torch.distributed.pipelining schedule names (schedules.py get_schedule_class) with a
# scenario schedule; the rest (LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)
# order their work otherwise
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved_1f1b"}
_OTHERS = ("LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
_SCHEDULE_KEYS = ("parallelism.pipeline_parallel_schedule",
                  "experimental.pipeline_parallel_schedule")


def stage_layers(stages: int, layers: int, first_less: int, last_less: int) -> list[int]:
    """Transformer layers of each stage (generate_llm_fqn_per_model_part)."""
    effective = layers + first_less + last_less
    per, extra = divmod(effective, stages)
    counts, left = [], layers
    for stage in range(stages):
        share = per + (1 if stage < extra else 0)
        share -= first_less if stage == 0 else last_less if stage == stages - 1 else 0
        take = max(0, min(share, left))
        counts.append(take)
        left -= take
    return counts


def _schedule(toml: Toml) -> str:
    key = toml.first(*_SCHEDULE_KEYS) or _SCHEDULE_KEYS[0]
    csv = toml.first("parallelism.pipeline_parallel_schedule_csv",
                     "experimental.pipeline_parallel_schedule_csv")
    if csv and toml.get(csv):
        raise toml.error(csv, f"found {toml.get(csv)!r}: a schedule read from a file is not "
                         "simulated (allowed: empty, and a pipeline_parallel_schedule of "
                         f"{', '.join(SCHEDULES)})")
    name = toml.text(key, "1F1B", (*SCHEDULES, *_OTHERS))
    if name in _OTHERS:
        raise toml.error(key, f"{name}: its order of work has no scenario schedule (allowed: "
                         f"{', '.join(SCHEDULES)})")
    return SCHEDULES[name]


def _stages_per_rank(toml: Toml, layers: int, pp: int, looped: bool, less: tuple[int, int]
                     ) -> int:
    key = "parallelism.pipeline_parallel_layers_per_stage"
    if not toml.has(key):
        return 2 if looped else 1
    per = toml.integer(key, 1)
    stages = math.ceil((layers + sum(less)) / per)
    if stages % pp:
        raise toml.error(key, f"{per}: {stages} stages are not divisible by the pipeline "
                         f"degree {pp} (torchtitan pipeline_llm refuses it)")
    if (stages // pp == 1) == looped:
        raise toml.error(key, f"{per}: {stages // pp} stage(s) a rank; the schedule needs "
                         f"{'at least 2' if looped else 'exactly 1'} (torchtitan pipeline_llm)")
    return stages // pp


def pipeline_keys(toml: Toml, layers: int, pp: int, modern: bool) -> dict[str, Any]:
    """schedule, virtual_stages and pipeline_layers (nothing with pipeline degree 1)."""
    if pp == 1:
        return {}
    if not modern:
        key = toml.first("experimental.pipeline_parallel_degree",
                         "training.pipeline_parallel_degree") or ""
        raise toml.error(key, f"{pp}: torchtitan's pipeline before 2025 split the model at "
                         "split points this importer does not read (the [parallelism] "
                         "section of 2025 on is read)")
    schedule = _schedule(toml)
    less = tuple(toml.integer(f"parallelism.pipeline_parallel_{k}_stage_less_layers", 1, lo=0,
                              hi=1000) for k in ("first", "last"))
    per_rank = _stages_per_rank(toml, layers, pp, schedule == "interleaved_1f1b",
                                (less[0], less[1]))
    stages = pp * per_rank
    if stages > layers + sum(less):
        raise toml.error("parallelism.pipeline_parallel_degree", f"{stages} stages for "
                         f"{layers + sum(less)} effective layers (torchtitan refuses it)")
    counts = stage_layers(stages, layers, less[0], less[1])
    out: dict[str, Any] = {"schedule": schedule, "pipeline_layers": counts}
    if per_rank > 1:
        out["virtual_stages"] = per_rank
    return out
