"""The Python API: the functions behind every `shardsim` command, returning the objects the CLI
prints (`load_scenario`, `simulate`, `verify`, `sweep`, `plan` are re-exported by
`simulator/__init__.py`). The CLI is a client of this package (and of `report`): it imports
nothing else of simulator (an import-linter contract in pyproject.toml).

    from simulator import load_scenario, plan, simulate, sweep
    sc = load_scenario("gpt3-175b-1024-a100", ["parallel.recompute=selective"])
    print(simulate(sc).iteration_time_s)
    print(plan("llama2-7b-8-ascend910b").best.config)

Bad input raises simulator.errors.InputError (also `simulator.api.InputError`) with the
message the CLI prints. Importing this module is cheap: each function imports what it needs
when called, so that `shardsim --help` and the CLI's own imports stay fast.
"""

from simulator.api.calibrate import calibrate_profile
from simulator.api.core import (
    blame_override,
    cheapest_remedy,
    check_overrides,
    check_supported,
    load_hardware,
    load_scenario,
    plan,
    run_notes,
    run_work,
    scenario_path,
    simulate,
    sweep,
    sweep_frame,
    verify,
    verify_notes,
    verify_work,
)
from simulator.api.imports import emit_config, import_config
from simulator.api.planning import (
    Budget,
    at_most,
    check_model,
    check_request,
    cluster_for,
    fewest_devices,
    frameworks_for,
    options_for,
    pareto_front,
    positive,
    replay_scenario,
    search,
    soonest_within,
    sweep_executor,
    sweep_rows,
    sweep_spec,
    target_time_s,
)
from simulator.api.tools import (
    comm,
    explain,
    json_schema,
    profile_fields,
    profiles,
    scenarios,
    strategy_checkpoint,
)
from simulator.errors import InfeasibleError, InputError, ShardsimError

__all__ = [
    # a scenario and one run / one proof (api.core)
    "load_scenario", "load_hardware", "check_supported", "check_overrides", "scenario_path",
    "blame_override", "simulate", "verify", "run_work", "verify_work", "run_notes",
    "verify_notes", "cheapest_remedy",
    # searches (api.core, api.planning)
    "sweep", "sweep_frame", "plan", "sweep_spec", "sweep_executor", "sweep_rows", "search",
    "fewest_devices", "pareto_front", "target_time_s", "check_request", "check_model",
    "cluster_for", "options_for", "positive", "at_most", "replay_scenario", "frameworks_for",
    "soonest_within", "Budget",
    # inspection (api.tools)
    "explain", "strategy_checkpoint", "json_schema", "comm", "profiles", "profile_fields",
    "scenarios",
    # a scenario from a framework's own launch configuration (api.imports)
    "import_config", "emit_config",
    # a hardware profile from the user's nccl-tests logs and GEMM sweep (api.calibrate)
    "calibrate_profile",
    # errors
    "InputError", "InfeasibleError", "ShardsimError",
]
