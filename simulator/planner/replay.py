"""A ranked plan as a scenario file: the complete scenario `shardsim run` takes as is
(cluster, model, training and parallel keys), so that running it gives the plan's figures
to the last digit (tests/test_plan_replay.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.config.scenario.schema import Scenario
from simulator.planner.space import Config, apply_config

__all__ = ["replay_scenario"]


def _portable(ref: str, resolved: Path | None) -> str:
    """A profile reference that works from any folder: a bundled name stays a name, a
    relative path becomes the absolute path of the file it named."""
    if resolved is None or ("/" not in ref and not ref.endswith((".yaml", ".yml"))):
        return ref
    return str(resolved.resolve())


def replay_scenario(scenario: Scenario, cfg: Config, devices_per_node: int | None = None,
                    hardware_path: Path | None = None) -> dict[str, Any]:
    """The scenario of configuration `cfg` as a JSON-ready mapping (`apply_config`, the
    loader's `source` and the keys left unset dropped, a profile path made absolute)."""
    planned = apply_config(scenario, cfg, devices_per_node)
    data = planned.model_dump(mode="json", exclude={"source"}, exclude_unset=True)
    data["hardware"] = _portable(planned.hardware, hardware_path)
    return data
