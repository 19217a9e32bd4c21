"""The API of `plan` and `sweep` beyond `plan()` and `sweep()`: a sweep's spec, executor
and rows, the search on N devices, the capacity search, the Pareto front and the checks of a
plan request (`planner.requests`, cheap to import: the search loads when called)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulator.api.core import check_overrides, scenario_path
from simulator.errors import InputError
from simulator.planner.requests import (
    at_most,
    check_model,
    check_request,
    cluster_for,
    frameworks_for,
    options_for,
    positive,
)

__all__ = ["sweep_spec", "sweep_executor", "sweep_rows", "search", "fewest_devices",
           "pareto_front", "target_time_s", "check_request", "check_model", "cluster_for",
           "options_for", "frameworks_for", "positive", "at_most", "replay_scenario",
           "soonest_within", "Budget"]


def sweep_spec(scenario: str, grid: Sequence[str], overrides: Sequence[str] = (),
               fidelity: str = "representative") -> Any:
    """The `planner.sweep_spec.SweepSpec` of `shardsim sweep`: SCENARIO (or a sweep file whose
    `sweep:` block names the scenario and adds grid keys and fixed overrides), the grid
    items `KEY=V1,V2,...` and the fixed `--set` overrides. InputError for an empty grid."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.yamlio import read_yaml_file
    from simulator.planner.sweep_spec import SweepSpec, load_sweep_file, parse_grid

    path, shown = scenario_path(scenario)
    data = read_yaml_file(path, shown)
    grid, overrides = list(grid), list(overrides)
    if "sweep" in data:
        ref, file_grid, fixed = load_sweep_file(path, data)
        path, shown = scenario_path(ref)
        grid, overrides = file_grid + grid, fixed + overrides
    check_overrides(overrides)
    if not grid:
        raise InputError("--grid", "", "nothing to sweep; give --grid KEY=V1,V2,... (or a "
                         "sweep file with a sweep.grid block)")
    return SweepSpec(str(path), shown, parse_grid(grid), tuple(overrides), fidelity)


def sweep_executor(name: str = "local", address: str | None = None,
                   workers: int | None = None) -> Any:
    """Where a sweep's configurations run: 'local' (a process pool of `workers`), 'serial'
    or 'ray' (at `address`); InputError where it cannot (Ray not installed, ...)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.sweep_exec import make_executor

    return make_executor(name, address, workers)


def sweep_rows(spec: Any, folder: Path, executor: Any, resume: bool = False,
               force: bool = False, **hooks: Any) -> list[dict[str, Any]]:
    """Run a SweepSpec into `folder` on an executor (`sweep_executor`; `shardsim sweep`):
    the rows, sorted by index. `hooks`: `on_row(row)`, `on_start(total, done)`,
    `on_note(text)` as the sweep goes."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.sweep import sweep_into

    return sweep_into(spec, folder, executor, resume, force=force, **hooks)


def search(scenario: Any, hw: Any, devices: int, per_node: int, options: Any,
           progress: Any = None) -> Any:
    """The best configurations of a scenario on `devices` devices, `per_node` a node
    (`shardsim plan --devices`): a `planner.search.SearchResult`."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.search import search as _search

    return _search(scenario, hw, devices, per_node, options, progress)


def fewest_devices(scenario: Any, hw: Any, target_s: float, per_node: int, max_devices: int,
                   options: Any, progress: Any = None, budget: Any = None) -> Any:
    """The fewest devices (up to `max_devices`) whose best configuration meets `target_s`
    seconds per iteration (`shardsim plan --target-time`), within `budget` (a `Budget`)
    when given: a `planner.capacity.CapacityResult`."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.capacity import fewest_devices as _fewest

    return _fewest(scenario, hw, target_s, per_node, max_devices, options, progress, budget)


def soonest_within(scenario: Any, hw: Any, budget: Any, per_node: int, max_devices: int,
                   options: Any, progress: Any = None) -> Any:
    """The device count (up to `max_devices`) whose best configuration trains soonest at a
    cost within `budget` (`shardsim plan --tokens T --budget B`): a CapacityResult."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.capacity import soonest_within as _soonest

    return _soonest(scenario, hw, budget, per_node, max_devices, options, progress)


def Budget(limit: float, iterations: float, price: float | None = None) -> Any:  # noqa: N802
    """`planner.capacity.Budget`: at most `limit` device-hours (money with `price` per
    device-hour) for `iterations` iterations."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.capacity import Budget as _Budget

    return _Budget(limit, iterations, price)


def pareto_front(ranked: tuple[Any, ...] | list[Any]) -> list[Any]:
    """The candidates no other beats on both iteration time and peak memory."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.capacity import pareto_front as _front

    return _front(ranked)


def target_time_s(tokens: float, days: float, global_batch_size: int, seq_length: int
                  ) -> float:
    """Seconds per iteration that train `tokens` tokens in `days` days."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.capacity import target_time_s as _target

    return _target(tokens, days, global_batch_size, seq_length)


def replay_scenario(scenario: Any, config: Any, devices_per_node: int | None = None,
                    hardware_path: Path | None = None) -> dict[str, Any]:
    """The complete scenario of a plan's configuration as a JSON-ready mapping: a file
    `shardsim run` takes as is, cluster included (`plan --json` rows' `scenario`)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.planner.replay import replay_scenario as _replay

    return _replay(scenario, config, devices_per_node, hardware_path)
