"""What a `plan` request must satisfy before any search: its options, the devices it plans
for, and the models the search covers (shared by `shardsim plan` and `simulator.api.plan`)."""

from __future__ import annotations

import math
from typing import Any

from simulator.errors import InputError

# the most devices a scenario may have (parallel degrees and nodes: scenario.schema.Degree)
MAX_PLAN_DEVICES = 100_000

__all__ = ["MAX_PLAN_DEVICES", "check_request", "cluster_for", "check_model", "options_for",
           "frameworks_for",
           "positive", "at_most"]

def positive(flag: str, value: float | None, kind: str = "a finite number > 0") -> None:
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise InputError(flag, "", f"found {value:g}; expected {kind}")


def at_most(flag: str, value: int | None, limit: int = MAX_PLAN_DEVICES) -> None:
    if value is not None and value > limit:
        raise InputError(flag, "", f"found {value}; expected at most {limit:,} devices (a "
                         "range a real system could have)")


def check_request(devices: int | None, nodes: int | None, target: float | None,
                  tokens: float | None, days: float | None, objective: str,
                  budget: float | None = None) -> None:
    """InputError for the first bad or conflicting option."""
    from simulator.planner.search import OBJECTIVES  # numpy and the search: not at start-up

    if objective not in OBJECTIVES:
        raise InputError("--objective", "", f"found '{objective}'; expected one of "
                         f"{', '.join(OBJECTIVES)}")
    if devices is not None and nodes is not None:
        raise InputError("--nodes", "", "cannot be combined with --devices; give one of them")
    for flag, count in (("--devices", devices), ("--nodes", nodes)):
        positive(flag, count, "an integer >= 1")
    at_most("--devices", devices)
    for flag, val in (("--target-time", target), ("--tokens", tokens), ("--days", days),
                      ("--budget", budget)):
        positive(flag, val)
    if budget is not None and tokens is None:
        raise InputError("--budget", "", "needs --tokens (the budget pays for training "
                         "that many tokens; add --days for a deadline too)")
    if budget is not None and (devices or nodes):
        raise InputError("--devices" if devices else "--nodes", "", "cannot be combined "
                         "with --budget, which finds the devices")
    if (days is not None and tokens is None) or (tokens is not None and days is None
                                                 and budget is None):
        given, other = ("--tokens", "--days") if days is None else ("--days", "--tokens")
        raise InputError(given, "", f"needs {other} too (the target is tokens in days"
                         f"{'' if given == '--days' else '; or give --budget'})")
    if target is not None and tokens is not None:
        raise InputError("--target-time", "", "cannot be combined with --tokens/--days; "
                         "give one target")
    if (target is not None or tokens is not None) and (devices or nodes):
        raise InputError("--devices" if devices else "--nodes", "", "cannot be combined with "
                         "a target (--target-time, --tokens/--days), which finds the devices")


def cluster_for(scenario: Any, devices: int | None, nodes: int | None) -> tuple[int, int]:
    """(devices, devices per node) to plan for; InputError when they do not make nodes."""
    per_node = scenario.cluster.devices_per_node
    if nodes is not None:
        at_most("--nodes", nodes * per_node)
        return nodes * per_node, per_node
    n = devices or scenario.devices
    if n > per_node and n % per_node:
        raise InputError("--devices", "", f"found {n}; expected at most or a multiple of "
                         f"cluster.devices_per_node={per_node} (whole nodes)")
    return n, min(per_node, n)


def check_model(scenario: Any) -> None:
    """InputError for a model or parallel layout `plan` cannot search: none since issue 23
    (dense transformers by closed-form estimate, every other family by simulation,
    `planner.generic_search`); kept for the API's callers."""
    del scenario


def frameworks_for(text: str | None) -> tuple[str, ...]:
    """The software stacks of `--framework A,B` (or `all`: every bundled profile);
    InputError for a name that is no bundled profile and no file."""
    # imported when called, as the search is: `import simulator` and the CLI start cheap
    from simulator.config.resources import list_bundled, resolve_yaml
    from simulator.config.yamlio import did_you_mean

    if text is None:
        return ()
    bundled = [n for n in list_bundled("framework_profiles") if n != "reference"]
    names = bundled if text.strip() == "all" else [n.strip() for n in text.split(",")]
    for name in names:
        if not name or resolve_yaml(name, "framework_profiles") is None:
            raise InputError("--framework", name, "is neither a bundled framework profile "
                             f"nor a file{did_you_mean(name, bundled)}; bundled: "
                             f"{', '.join(bundled)} (or all)")
    return tuple(names)


def options_for(objective: str, top: int, max_mb: int, max_v: int, max_zero: int,
                headroom: float = 0.0, frameworks: tuple[str, ...] = ()) -> Any:
    """SearchOptions from the command's options; InputError for a bad one."""
    # imported when called: the search and numpy load only then
    from simulator.planner.search import SearchOptions
    from simulator.planner.space import SpaceLimits

    for flag, val in (("--top", top), ("--max-micro-batch", max_mb),
                      ("--max-virtual-stages", max_v)):
        positive(flag, val, "an integer >= 1")
    if max_zero not in range(4):
        raise InputError("--max-optimizer-shard", "", f"found {max_zero}; expected 0, 1, 2 "
                         "or 3 (the highest ZeRO stage tried)")
    if not (0.0 <= headroom < 1.0):
        raise InputError("--headroom", "", f"found {headroom:g}; expected a share of device "
                         "memory to keep free, at least 0 and below 1 (0.1: 10%)")
    return SearchOptions(objective=objective, top_k=top,
                         limits=SpaceLimits(max_mb, max_v, max_zero), headroom=headroom,
                         frameworks=frameworks)


