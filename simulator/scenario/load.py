"""From a mapping (a parsed YAML file plus `--set` overrides) to a validated Scenario.

Pydantic's errors become one InputError naming the file, the dotted key, what was found and
what is allowed, with a did-you-mean for misspelled keys.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from simulator.scenario.rules import check_rules
from simulator.scenario.schema import Scenario
from simulator.validation import to_input_error
from simulator.yamlio import apply_overrides

__all__ = ["parse_scenario", "split_overrides"]


def split_overrides(overrides: list[str]) -> tuple[list[str], list[str]]:
    """(scenario overrides, hardware overrides with the `hardware.` prefix removed)."""
    scen, hw = [], []
    for item in overrides:
        if item.startswith("hardware."):
            hw.append(item[len("hardware.") :])
        else:
            scen.append(item)
    return scen, hw


def parse_scenario(data: dict[str, Any], source: str, overrides: list[str] = ()) -> Scenario:
    """Validate `data` (with scenario `--set` overrides applied) into a Scenario."""
    data = apply_overrides(data, list(overrides))
    data.setdefault("name", source)
    data["source"] = source
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise to_input_error(exc, source, Scenario) from None
    check_rules(scenario)
    return scenario


