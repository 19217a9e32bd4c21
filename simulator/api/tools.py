"""The API of the commands that inspect rather than simulate: `explain`, `schema`, `comm`,
`profiles` and `scenarios`. Each function imports what it needs when called."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from simulator.api.core import check_overrides
from simulator.errors import InputError

__all__ = ["explain", "strategy_checkpoint", "json_schema", "comm", "profiles",
           "profile_fields", "scenarios", "COMM_MAX_DEVICES", "COMM_MAX_PER_NODE"]


def explain(loaded: Any) -> dict[str, Any]:
    """What sharding propagation chooses for an operator-graph scenario (`shardsim
    explain`), operator by operator: {scenario, search, search_runs (what that search
    runs), mesh, total_cost_bytes, ops}.
    InputError for a transformer, whose plan is written by the sharding algebra."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.models.model_graph import propagated
    from simulator.models.registry import family
    from simulator.sharding.propagate.explain import explain as explain_plan
    from simulator.sharding.propagate.search import SEARCH_RUNS

    s = loaded.scenario
    if family(s.model).layered:
        raise InputError(s.source, "model.type", f"found '{s.model.type}'; explain takes an "
                         "operator graph: graph, mlp or resnet")
    prop = propagated(s)
    return {"scenario": s.name, "search": s.parallel.search,
            "search_runs": SEARCH_RUNS[s.parallel.search], "mesh": str(prop.problem.mesh),
            "total_cost_bytes": prop.cost,
            "ops": [row.to_dict() for row in explain_plan(prop)]}


def strategy_checkpoint(loaded: Any) -> dict[str, Any]:
    """The plan `explain` shows as a strategy checkpoint (`sharding.strategy_ckpt`), which
    `parallel.strategy_ckpt_load_file` loads into another run."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.models.model_graph import propagated
    from simulator.sharding.strategy_ckpt import checkpoint

    s = loaded.scenario
    return checkpoint(propagated(s), s.name)


def json_schema(hardware: bool = False) -> dict[str, Any]:
    """The JSON Schema of the scenario format (`model: {from_hf: ...}` included), or of a
    hardware profile (`shardsim schema`)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.json_schema import json_schema as _schema

    return _schema(hardware)


# `comm`'s bounds a real system could have (as the scenario's): at most 100,000 devices in a
# group and 1,024 in a node
COMM_MAX_DEVICES = 100_000
COMM_MAX_PER_NODE = 1024


def comm(collective: str, nbytes: int, devices: int, hardware: str,
         devices_per_node: int | None = None, algorithm: str = "auto") -> dict[str, Any]:
    """One collective of `nbytes` on `devices` devices of the profile `hardware` (a bundled
    name or a path), priced as `run` prices it (`shardsim comm`): the `comm --json` object
    (docs/contract.md section 4)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.hardware.load import load_profile
    from simulator.config.yamlio import did_you_mean
    from simulator.cost.collectives import comm_benchmark
    from simulator.cost.specs import COLLECTIVES

    if collective not in COLLECTIVES:
        raise InputError("COLLECTIVE", "", f"found {collective!r}; allowed: "
                         f"{', '.join(COLLECTIVES)}{did_you_mean(collective, COLLECTIVES)}")
    if devices < 1:
        raise InputError("--devices", "", f"found {devices}; expected at least 1")
    if devices > COMM_MAX_DEVICES:
        raise InputError("--devices", "", f"found {devices}; expected at most "
                         f"{COMM_MAX_DEVICES:,} (a range a real system could have)")
    if devices_per_node is not None and devices_per_node > COMM_MAX_PER_NODE:
        raise InputError("--devices-per-node", "", f"found {devices_per_node}; expected "
                         f"at most {COMM_MAX_PER_NODE:,} (a range a real system could have)")
    hw = load_profile(str(_profile_path(hardware)), [])
    per_node = _devices_per_node(devices, devices_per_node, hw)
    return comm_benchmark(collective, nbytes, devices, per_node, hw, algorithm)


def _profile_path(ref: str) -> Any:
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.resources import list_bundled, resolve_yaml
    from simulator.config.yamlio import did_you_mean

    path = resolve_yaml(ref, "hardware_profiles")
    if path is None:
        names = list_bundled("hardware_profiles")
        raise InputError("--hardware", "", f"found {ref!r}, which is neither a bundled profile "
                         f"nor a file{did_you_mean(ref, names)}; bundled: {', '.join(names)}")
    return path


def _devices_per_node(devices: int, given: int | None, hw: Any) -> int:
    if given is None:
        given = int(getattr(hw, "devices_per_node_default", None) or devices)
        return min(given, devices)
    if given < 1:
        raise InputError("--devices-per-node", "", f"found {given}; expected at least 1")
    if devices > given and devices % given:
        raise InputError("--devices-per-node", "", f"{given} must divide --devices={devices} "
                         "when the group spans several nodes")
    return min(given, devices)


def profiles() -> list[dict[str, Any]]:
    """The bundled hardware profiles with their key figures (`shardsim profiles`)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.hardware.load import list_profiles, profile_summary

    return [profile_summary(hw) for hw in list_profiles()]


def profile_fields(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Every field of one profile (a bundled name or a path) with `overrides` (`KEY=VALUE`,
    `hardware.KEY=VALUE` alike): {profile, source, fields: [{field, value, source, read_by,
    note}]} (`shardsim profiles NAME`)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.hardware.load import load_profile, raw_profile
    from simulator.config.hardware.usage import field_rows
    from simulator.config.yamlio import blame_override

    check_overrides(overrides)
    # `hardware.KEY=V` as `run --set` spells it is the same field (was "hardware: unknown key")
    sets = [o.removeprefix("hardware.") for o in overrides]
    try:
        hw = load_profile(name, sets)
    except InputError as err:
        raise blame_override(err, sets) from None
    keys = {item.partition("=")[0].strip() for item in sets}
    return {"profile": hw.name, "source": hw.source,
            "fields": field_rows(hw, raw_profile(name), keys)}


def scenarios() -> list[dict[str, Any]]:
    """Name, title, model type, hardware and device count of every bundled scenario
    (`shardsim scenarios`)."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.resources import list_bundled

    return [_scenario_row(name) for name in list_bundled("scenarios")]


def _scenario_row(name: str) -> dict[str, Any]:
    """Name, title, hardware and device count of a bundled scenario, read without
    validation so one broken file does not hide the others."""
    # imported when called: `import simulator` and the CLI start cheap
    from simulator.config.resources import bundled_dir
    from simulator.config.yamlio import load_yaml_text

    path = bundled_dir("scenarios") / f"{name}.yaml"
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
    except Exception:  # a listing shows what it can; `run` reports the error in full
        data = None
    data = _mapping(data)
    cluster, model = _mapping(data.get("cluster")), _mapping(data.get("model"))
    nodes, per_node = cluster.get("nodes", 1), cluster.get("devices_per_node", 1)
    devices = nodes * per_node if isinstance(nodes, int) and isinstance(per_node, int) else None
    return {"name": name, "title": data.get("name"), "model": model.get("type"),
            "hardware": data.get("hardware"), "devices": devices}


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
