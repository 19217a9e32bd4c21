"""The Python API: the functions behind `shardsim run`, `verify`, `sweep` and `plan`, returning the
objects the CLI prints (re-exported by `simulator/__init__.py`).

    from simulator import load_scenario, plan, simulate, sweep
    sc = load_scenario("gpt3-175b-1024-a100", ["parallel.recompute=selective"])
    print(simulate(sc).iteration_time_s)
    print(plan("llama2-7b-8-ascend910b").best.config)

Bad input raises simulator.errors.InputError with the message the CLI prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.config.loaded import (
    LoadedScenario,
    check_overrides,
    check_supported,
    load_hardware,
    load_scenario,
    scenario_path,
)
from simulator.errors import InfeasibleError, InputError, ShardsimError

__all__ = ["load_scenario", "load_hardware", "check_supported", "check_overrides",
           "scenario_path", "LoadedScenario", "simulate", "verify", "sweep", "plan",
           "InputError", "InfeasibleError", "ShardsimError"]


def _scenario_and_hw(scenario: Any, hw: Any) -> tuple[Any, Any]:
    if isinstance(scenario, (str, Mapping)):
        scenario = load_scenario(scenario)
    if isinstance(scenario, LoadedScenario):
        return scenario.scenario, hw if hw is not None else load_hardware(scenario)
    if hw is None:
        from simulator.config.hardware.load import load_profile
        from simulator.config.scenario import resolve_hardware

        hw = load_profile(str(resolve_hardware(scenario)))
    return scenario, hw


def simulate(scenario: Any, hw: Any = None, fidelity: str = "representative") -> Any:
    """One training iteration (`shardsim run`): a SimResult. `scenario` is a name, a path, a
    LoadedScenario or a Scenario; `hw` defaults to the profile the scenario names.
    `simulator.report.summary(result)` is the `run --json` object; `result.notes` says which
    `hardware.` overrides of a LoadedScenario changed nothing, as `run` does."""
    import dataclasses

    from simulator.simulation.overrides import override_notes, stack_notes
    from simulator.simulation.simulate import simulate as _simulate

    if isinstance(scenario, (str, Mapping)):
        scenario = load_scenario(scenario)
    sc, profile = _scenario_and_hw(scenario, hw)
    result = _simulate(sc, profile, fidelity)
    if isinstance(scenario, LoadedScenario) and hw is None:
        notes = stack_notes(scenario, profile)
        if scenario.hardware_overrides:
            notes += override_notes(scenario, profile, result)
        result = dataclasses.replace(result, notes=notes)
    return result


def verify(scenario: Any, hw: Any = None) -> Any:
    """The numpy proof of `shardsim verify`: a VerifyResult (`.ok`, `.to_dict()`)."""
    from simulator.config.framework.load import framework_for
    from simulator.simulation.verify import verify_scenario

    sc, profile = _scenario_and_hw(scenario, hw)
    software = framework_for(sc, profile).software  # the scenario's stack, as `run` takes it
    return verify_scenario(sc, fused_attention=software.fused_attention, hw=profile,
                           selective=software.selective_recompute)


def sweep(scenario: str, grid: Mapping[str, Sequence[Any]], overrides: Sequence[str] = (),
          out: str | Path | None = None, executor: str = "local", resume: bool = False,
          workers: int | None = None, address: str | None = None,
          force: bool = False) -> list[dict[str, Any]]:
    """Every combination of `grid` ({dotted key: values}) simulated (`shardsim sweep`): the
    rows, sorted by index. With `out`, the folder gets sweep.parquet, sweep.csv, sweep.png
    and report.html, `resume=True` continues a sweep there and `force=True` continues it
    even though the scenario file or shardsim changed since it began."""
    from simulator.planner.sweep import SweepSpec, _yaml_scalar, parse_grid, sweep_into
    from simulator.planner.sweep_exec import make_executor

    path, shown = scenario_path(scenario)
    items = [f"{k}=" + ",".join(_yaml_scalar(v) for v in values) for k, values in grid.items()]
    spec = SweepSpec(str(path), shown, parse_grid(items), tuple(overrides))
    folder = Path(out) if out is not None else None
    return sweep_into(spec, folder, make_executor(executor, address, workers), resume,
                      force=force)


def plan(scenario: Any, devices: int | None = None, *, nodes: int | None = None,
         target_time_s: float | None = None, objective: str = "time", top: int = 10,
         max_devices: int = 16384, options: Any = None, progress: Any = None) -> Any:
    """The strategy search of `shardsim plan` on a transformer scenario (a name, a path, a
    LoadedScenario or a Scenario).

    Without a target: `planner.search.SearchResult` on `devices` devices (or `nodes` whole
    nodes; default the scenario's cluster): `.best` and `.ranked` are `Candidate`s, each
    with `.config` (a `planner.space.Config`) and `.evaluation` (iteration time, tokens/s,
    MFU, peak memory, fits), exactly what the CLI's table and `--json` rows are made of.
    With `target_time_s`: `planner.capacity.CapacityResult`, the fewest devices (up to
    `max_devices`) whose best configuration meets the target (`.chosen`, `.points`).
    `options` (a `planner.search.SearchOptions`) replaces `objective` and `top`;
    `progress(phase, done, total)` is called as the search goes. Bad input raises InputError
    with the message the CLI prints."""
    from simulator.planner.capacity import fewest_devices
    from simulator.planner.requests import check_model, check_request, cluster_for, options_for
    from simulator.planner.search import search

    sc, hw = _scenario_and_hw(scenario, None)
    check_request(devices, nodes, target_time_s, None, None, objective)
    check_model(sc)
    opts = options if options is not None else options_for(objective, top, 8, 8, 3)
    if target_time_s is not None:
        return fewest_devices(sc, hw, target_time_s, sc.cluster.devices_per_node,
                              max_devices, opts, progress)
    n, per_node = cluster_for(sc, devices, nodes)
    return search(sc, hw, n, per_node, opts, progress)
