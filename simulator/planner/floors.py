"""Lower bounds on what the event engine will say of a configuration, from the same
program and lowering that `run` simulates, without running the engine: the search
(`planner.generic_search`) drops a configuration whose floor shows it cannot beat what
it has already simulated.

- time: a device's compute stream runs one task at a time, and every forward, recompute
  and backward task of a virtual stage lasts its priced seconds (`lower.stages.StageWork`:
  kernels plus the tensor- and expert-parallel collectives on the critical path, which the
  task's duration includes), so an iteration lasts at least the busiest device's
  `micro-batches x (forward + recompute + backward)` of its virtual stages. Without DualPipe
  the last device can start nothing before the first micro-batch's forward has crossed
  the stages before it, which adds their forwards. Under DualPipe a forward/backward pair
  hides its communication: only the kernels are counted there;
- memory: the model states each simulated device holds all iteration (`lower.state`, as
  the lowering allocates them, offload included) plus the most saved activations its
  schedule's step order keeps alive at once (a forward allocates its stage's saved set, its
  backward frees it; the working buffers of a recompute and the framework's overheads only
  add to that), so the engine's peak is at least that.

Both are checked against the engine in tests/test_plan_floors.py (never above what it
simulates, on every configuration of small searches) and the search with them returns
what it returns without them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simulator.config.framework.load import framework_for
from simulator.config.scenario.schema import Scenario
from simulator.lower.device_states import model_states
from simulator.lower.framework_apply import fp8_recipe, with_auto_fusion
from simulator.lower.layout import rank_mesh
from simulator.lower.lowering import Lowering
from simulator.lower.pipeline import schedule_steps
from simulator.models.registry import family
from simulator.program.model_program import transformer_program
from simulator.program.program_key import UNREAD, program_key
from simulator.simulation.simulate import run_costs, run_program

__all__ = ["Floor", "floor_of", "FloorCache"]

_MANY = 1 << 20  # micro-batches the floor's FP8 / FP4 weight casts are spread over
# the fields a layered model's program does not read (`program_key.UNREAD`, which keys
# its memo) and the data degree (read only through the casts' micro-batches, above)
_KEY = {**UNREAD, "parallel": {**UNREAD["parallel"], "data": True}}


@dataclass(frozen=True)
class Floor:
    """Seconds per iteration and peak bytes per device the engine cannot go below."""

    time_s: float
    peak_bytes: float


class FloorCache:
    """Programs and cost models shared by the floors of one search (a program depends on
    the tensor, expert and context degrees, the micro-batch and the memory knobs, not on
    the data or pipeline degree: many configurations share one)."""

    def __init__(self) -> None:
        self.programs: dict[Any, Any] = {}
        self.costs: dict[int, Any] = {}


def _costs(cache: FloorCache, hw: Any, fw: Any) -> Any:
    key = id(fw)
    if key not in cache.costs:
        cache.costs[key] = (fw, run_costs(hw, fw))
    return cache.costs[key][1]


def _program(planned: Scenario, hw: Any, fw: Any, cache: FloorCache) -> tuple[Any, Any]:
    """(program, mesh) whose work is at most what `run`'s program of `planned` prices: a
    layered model's program is the same whatever the data degree but for the FP8 / FP4
    weight casts, which delayed scaling pays once per iteration, spread over the
    micro-batches (`program.fp8`); derived with `_MANY` micro-batches, their share per
    micro-batch is at most `run`'s, and one program serves every data degree."""
    if not family(planned.model).layered:
        prog, mesh, _, _ = run_program(planned, hw, fw)
        return prog, mesh
    recipe = fp8_recipe(planned, fw, hw)
    if recipe is not None:
        recipe = replace(recipe, micro_batches=max(_MANY, recipe.micro_batches))
    key = program_key(planned, fw.software, hw.compute_units, recipe, _KEY)
    if key not in cache.programs:
        cache.programs[key] = transformer_program(planned, fw.software, hw.compute_units,
                                                  recipe)
    return cache.programs[key], None


def floor_of(planned: Scenario, hw: Any, cache: FloorCache | None = None) -> Floor:
    """The floor of a planned scenario (one `run` accepts) on hardware profile `hw`."""
    cache = cache or FloorCache()
    fw = framework_for(planned, hw)
    prog, mesh = _program(planned, hw, fw, cache)
    costs = _costs(cache, hw, fw)
    fused = with_auto_fusion(planned, fw, prog.grad_bytes)
    low = Lowering(fused, prog, costs, "representative", rank_mesh(fused, mesh))
    devices, _ = low.ranks.simulated("representative")
    time_s = peak = 0.0
    for dev in devices:
        stage = low.ranks.stage(dev)
        steps = schedule_steps(low.par.schedule, stage, low.ranks.pipeline, low.micro,
                               low.ranks.chunks, planned.source)
        vss = sorted({vs for _, _, vs in steps})
        time_s = max(time_s, _busy_s(low, vss) + _fill_s(low, stage))
        peak = max(peak, _static_bytes(low, vss) + _activation_bytes(low, steps))
    return Floor(time_s, peak)


def _busy_s(low: Lowering, vss: list[int]) -> float:
    """Seconds of compute-stream work of a device holding virtual stages `vss`."""
    mirrored = low.ranks.mirrored
    total = 0.0
    for vs in vss:
        w = low.work[vs]
        parts = (w.fwd, w.recompute, w.bwd) if w.recompute.compute_s or w.recompute.comm_s \
            else (w.fwd, w.bwd)
        each = sum(p.compute_s + (0.0 if mirrored else p.comm_s) for p in parts)
        total += len(low.micro_range(vs)) * each
    return total


def _fill_s(low: Lowering, stage: int) -> float:
    """Forward seconds of the first micro-batch on the virtual stages before `stage`'s
    first one (none under DualPipe, whose micro-batches enter from both ends)."""
    if low.ranks.mirrored:
        return 0.0
    return sum(low.work[vs].fwd.compute_s for vs in range(stage))


def _static_bytes(low: Lowering, vss: list[int]) -> float:
    """The model states of a device holding `vss`, allocated as `Lowering.device` does."""
    static = model_states(low, vss, kept=False) + low.prog.resident
    return sum(nbytes for _, nbytes in static)


def _activation_bytes(low: Lowering, steps: list[tuple[str, int, int]]) -> float:
    """The most saved activations alive at once in the step order (a forward keeps its
    stage's saved set until that micro-batch's backward on the stage); the layers'
    share is left out where `parallel.offload.activations` moves it to the host."""
    offloaded = low.par.offload.activations
    held = most = 0.0
    for kind, _, vs in steps:
        w = low.work[vs]
        kept = w.activation_bytes
        if offloaded:
            kept = sum(a for a, off in zip(w.act_pieces, w.offloadable, strict=False)
                       if not off)
        if kind.startswith("F"):
            held += kept
            most = max(most, held)
        elif kind.startswith("B"):
            held -= kept
    return most
