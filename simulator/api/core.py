"""The core of the API: loading a scenario, `simulate`, `verify`, `sweep`, `plan`, and what
`run` and `verify` check and note around them (`simulator.api` re-exports every name)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.planner.requests import (  # cheap: the search loads when called
    check_model,
    check_request,
    cluster_for,
    options_for,
)

__all__ = ["load_scenario", "load_hardware", "check_supported", "check_overrides",
           "scenario_path", "blame_override", "simulate", "verify", "sweep", "sweep_frame",
           "plan",
           "run_work", "verify_work", "run_notes", "verify_notes", "cheapest_remedy"]


def load_scenario(scenario: str | Mapping[str, Any], overrides: Sequence[str] = (),
                  source: str = "<dict>") -> Any:
    """A scenario (a path, a bundled name, or a mapping of the YAML's keys called `source`
    in messages) validated with `--set`-style overrides (`hardware.KEY=VALUE` for profile
    fields): a `config.loaded.LoadedScenario` (`.scenario` is the validated Scenario)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.loaded import load_scenario as _load

    return _load(scenario, overrides, source)


def load_hardware(loaded: Any) -> Any:
    """The hardware profile of a LoadedScenario, with its `hardware.` overrides."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.loaded import load_hardware as _load

    return _load(loaded)


def check_supported(loaded: Any, hw: Any) -> None:
    """InputError for what `run` and `verify` refuse that the scenario alone cannot tell (a
    dtype the device, or a node kind of a mixed cluster, has no peak for)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.loaded import check_supported as _check

    _check(loaded, hw)


def check_overrides(overrides: Sequence[str]) -> None:
    """InputError for the first `--set` item that is not KEY=VALUE with a dotted key."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.loaded import check_overrides as _check

    _check(overrides)


def scenario_path(scenario: str) -> tuple[Path, str]:
    """The file SCENARIO (a path or a bundled name) names, and how messages call it."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.loaded import scenario_path as _path

    return _path(scenario)


def blame_override(err: InputError, overrides: Sequence[str], prefix: str = "") -> InputError:
    """`err` naming the `--set` item (of `overrides`) that set its key, where one did."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.yamlio import blame_override as _blame

    return _blame(err, list(overrides), prefix)


def _scenario_and_hw(scenario: Any, hw: Any) -> tuple[Any, Any]:
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.loaded import LoadedScenario

    if isinstance(scenario, (str, Mapping)):
        scenario = load_scenario(scenario)
    if isinstance(scenario, LoadedScenario):
        return scenario.scenario, hw if hw is not None else load_hardware(scenario)
    if hw is None:
        # imported when called: `import simulator` and the CLI start cheap
        from simulator.config.hardware.load import load_profile
        from simulator.config.scenario import resolve_hardware

        hw = load_profile(str(resolve_hardware(scenario)))
    return scenario, hw


def simulate(scenario: Any, hw: Any = None, fidelity: str = "representative",
             max_events: int | None = None) -> Any:
    """One training iteration (`shardsim run`): a SimResult. `scenario` is a name, a path, a
    LoadedScenario or a Scenario; `hw` defaults to the profile the scenario names.
    `simulator.report.summary(result)` is the `run --json` object; `result.notes` says which
    `hardware.` overrides of a LoadedScenario changed nothing, as `run` does."""
    # imported when called: `import simulator` and the CLI start cheap
    import dataclasses

    from simulator.config.loaded import LoadedScenario
    from simulator.simulation.overrides import override_notes, stack_notes
    from simulator.simulation.simulate import simulate as _simulate

    if isinstance(scenario, (str, Mapping)):
        scenario = load_scenario(scenario)
    sc, profile = _scenario_and_hw(scenario, hw)
    result = _simulate(sc, profile, fidelity) if max_events is None else \
        _simulate(sc, profile, fidelity, max_events=max_events)
    if isinstance(scenario, LoadedScenario) and hw is None:
        notes = stack_notes(scenario, profile)
        if scenario.hardware_overrides:
            notes += override_notes(scenario, profile, result)
        result = dataclasses.replace(result, notes=notes)
    return result


def verify(scenario: Any, hw: Any = None,
           progress: Callable[[str, int, int], None] | None = None) -> Any:
    """The numpy proof of `shardsim verify`: a VerifyResult (`.ok`, `.to_dict()`).
    `progress(what, done, total)` is called as it goes: what it is doing (planning, the
    sharded run and the single-device reference micro-batch by micro-batch, comparing) and
    how many of that part's steps are done (operator forwards and backwards)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.framework.load import framework_for
    from simulator.simulation.stage_split import stage_split
    from simulator.simulation.verify import verify_scenario

    sc, profile = _scenario_and_hw(scenario, hw)
    software = framework_for(sc, profile).software  # the scenario's stack, as `run` takes it
    return verify_scenario(sc, fused_attention=software.fused_attention,
                           split=stage_split(sc, profile),
                           selective=software.selective_recompute, progress=progress)


def sweep(scenario: str, grid: Mapping[str, Sequence[Any]], overrides: Sequence[str] = (),
          out: str | Path | None = None, executor: str = "local", resume: bool = False,
          workers: int | None = None, address: str | None = None,
          force: bool = False) -> list[dict[str, Any]]:
    """Every combination of `grid` ({dotted key: values}) simulated (`shardsim sweep`): the
    rows, sorted by index. With `out`, the folder gets sweep.parquet, sweep.csv, sweep.png
    and report.html, `resume=True` continues a sweep there and `force=True` continues it
    even though the scenario file or shardsim changed since it began. `sweep_frame` gives
    the same rows as a typed pandas DataFrame."""
    return _swept(scenario, grid, overrides, out, executor, resume, workers, address,
                  force)[0]


def sweep_frame(scenario: str, grid: Mapping[str, Sequence[Any]],
                overrides: Sequence[str] = (), out: str | Path | None = None,
                executor: str = "local", resume: bool = False, workers: int | None = None,
                address: str | None = None, force: bool = False) -> Any:
    """`sweep` (the same arguments) as a pandas DataFrame indexed by configuration index,
    with the columns of sweep.parquet typed: each grid key int64, float64, bool or string,
    the metrics float64 (NaN where the configuration failed), `fits` a nullable boolean
    (NA where it failed), `config`, `status` and `error` strings. pandas is optional (the
    dev extra has it): without it, an ImportError that says what to install, before any
    configuration runs."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.report.sweep_table import PANDAS_MISSING, rows_frame

    try:
        import pandas  # noqa: F401
    except ImportError:
        raise ImportError(PANDAS_MISSING) from None
    rows, columns = _swept(scenario, grid, overrides, out, executor, resume, workers,
                           address, force)
    return rows_frame(rows, columns)


def _swept(scenario: str, grid: Mapping[str, Sequence[Any]], overrides: Sequence[str],
           out: str | Path | None, executor: str, resume: bool, workers: int | None,
           address: str | None, force: bool) -> tuple[list[dict[str, Any]], Any]:
    """The rows of a sweep and the types of its grid columns (SweepSpec.columns)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.sweep import sweep_into
    from simulator.planner.sweep_exec import make_executor
    from simulator.planner.sweep_spec import SweepSpec, _yaml_scalar, parse_grid

    path, shown = scenario_path(scenario)
    items = [f"{k}=" + ",".join(_yaml_scalar(v) for v in values) for k, values in grid.items()]
    spec = SweepSpec(str(path), shown, parse_grid(items), tuple(overrides))
    folder = Path(out) if out is not None else None
    rows = sweep_into(spec, folder, make_executor(executor, address, workers), resume,
                      force=force)
    return rows, spec.columns


def plan(scenario: Any, devices: int | None = None, *, nodes: int | None = None,
         target_time_s: float | None = None, objective: str = "time", top: int = 10,
         max_devices: int = 16384, options: Any = None, progress: Any = None) -> Any:
    """The strategy search of `shardsim plan` on a scenario of any model (a name, a path, a
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
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.capacity import fewest_devices
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


def run_work(loaded: Any, fidelity: str, max_events: int) -> int:
    """The events `run` will simulate, estimated from the scenario; InputError above
    `max_events` (naming the key that drives the count and `--max-events`)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.simulation.budget import check_budget, estimate_run

    est = estimate_run(loaded.scenario, fidelity)
    check_budget(est, max_events, loaded.scenario.source, "events to simulate", "--max-events")
    return est.count


def verify_work(loaded: Any, max_devices: int, max_gflop: int, max_gb: int) -> int:
    """The numpy devices `verify` will run; InputError above `max_devices`, or for an
    operator graph above `max_gflop` matrix GFLOP or `max_gb` GB of tensors (each naming
    the key that drives it and the flag that raises the limit)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.simulation.budget import (
        check_budget,
        estimate_verify,
        estimate_verify_gb,
        estimate_verify_gflop,
    )

    s = loaded.scenario
    devices = estimate_verify(s)
    check_budget(devices, max_devices, s.source, "numpy devices to run", "--max-devices")
    for estimate, limit, unit, flag in (
            (estimate_verify_gflop, max_gflop, "GFLOP to execute", "--max-gflop"),
            (estimate_verify_gb, max_gb, "GB of tensors to hold", "--max-gb")):
        work = estimate(s)
        if work is not None:
            check_budget(work, limit, s.source, unit, flag)
    return devices.count


def run_notes(loaded: Any, hw: Any, result: Any) -> tuple[str, ...]:
    """What `run` says of its inputs: the stack `--set hardware=` took, which search
    `recursive_programming` runs, and the `hardware.` overrides that changed nothing (each
    re-simulated without it)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.scenario.hf import hf_notes
    from simulator.simulation.overrides import override_notes, stack_notes

    notes = list(hf_notes(loaded.scenario.source)) + list(stack_notes(loaded, hw))
    p = loaded.scenario.parallel
    if p.mode == "auto" and p.search == "recursive_programming":
        # not MindSpore's whole algorithm: say which search ran (shardsim explain says it too)
        from simulator.sharding.propagate.search import SEARCH_RUNS
        notes.append(f"parallel.search recursive_programming runs {SEARCH_RUNS[p.search]}")
    notes += _graph_note(loaded.scenario, getattr(result, "framework", None))
    if loaded.hardware_overrides:
        notes += override_notes(loaded, hw, result)
    return tuple(notes)


def _graph_note(scenario: Any, fw: Any) -> list[str]:
    """A run with CUDA graphs on a stack whose profile states no graph launch cost prices
    every replay free on the host: say so rather than leave it silent."""
    graphs = scenario.training.cuda_graphs
    if graphs.impl == "none" or fw is None or (fw.launch and fw.launch.graph_launch_us
                                               is not None):
        return []
    return [f"training.cuda_graphs: the {fw.name} framework profile states no "
            "launch.graph_launch_us, so each graph replay is priced free on the host"]


def verify_notes(scenario: Any) -> tuple[str, ...]:
    """What `verify` checked of offload and host placement, where the scenario has them."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.lower.offload import verify_note

    placed = verify_note(scenario)
    return (placed,) if placed else ()


def cheapest_remedy(loaded: Any, hw: Any, fidelity: str = "representative") -> str:
    """The cheapest single `--set` that makes a scenario that does not fit fit in device
    memory, simulated (`run --strict`): 'cheapest remedy: --set K=V (...)', or that none
    was found."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.simulation.remedy import cheapest_remedy as _remedy

    return _remedy(loaded, hw, fidelity)
