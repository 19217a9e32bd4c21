"""From a mapping (a parsed YAML file plus `--set` overrides) to a validated Scenario.

Pydantic's errors become one InputError naming the file, the dotted key, what was found and
what is allowed, with a did-you-mean for misspelled keys. An error caused by a `--set`
override says so, so the user does not search the file for a key they typed on the command
line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from simulator.config.imports.key import expand_from
from simulator.config.resources import is_file, list_bundled, resolve_yaml
from simulator.config.scenario.hf import expand_from_hf
from simulator.config.scenario.rules import check_rules
from simulator.config.scenario.schema import Scenario
from simulator.config.scenario.strategy_ckpt import load_strategy_ckpt
from simulator.config.validation import to_input_error
from simulator.config.yamlio import apply_overrides, blame_override, did_you_mean
from simulator.errors import InputError

__all__ = ["parse_scenario", "split_overrides", "resolve_hardware"]


def split_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """(scenario overrides, hardware overrides with the `hardware.` prefix removed)."""
    scen, hw = [], []
    for item in overrides:
        if item.startswith("hardware."):
            hw.append(item[len("hardware.") :])
        else:
            scen.append(item)
    return scen, hw


def parse_scenario(data: dict[str, Any], source: str, overrides: Sequence[str] = ()) -> Scenario:
    """Validate `data` (with scenario `--set` overrides applied) into a Scenario.

    Raises InputError naming `source` (or `source with --set KEY=VALUE` when an override
    is to blame), the dotted key, what was found and what is allowed.
    """
    data = apply_overrides(data, list(overrides))
    try:
        data = expand_from(data, source)  # from: {megatron_args: FILE}
        data = expand_from_hf(data, source)  # model: {from_hf: config.json}
        data = load_strategy_ckpt(data, source)  # parallel.strategy_ckpt_load_file
    except InputError as err:
        raise blame_override(err, overrides) from None
    data.setdefault("name", source)
    data["source"] = source
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise blame_override(to_input_error(exc, source, Scenario), overrides) from None
    try:
        check_rules(scenario)
    except InputError as err:
        raise blame_override(err, overrides) from None
    return scenario


def resolve_hardware(
    scenario: Scenario, base_dir: Path | None = None, overrides: Sequence[str] = ()
) -> Path:
    """The profile file a scenario's `hardware` names: a bundled name, or a path (as given,
    or relative to `base_dir`, the scenario's folder). InputError with the bundled names
    and a did-you-mean when there is none.
    """
    ref = scenario.hardware
    found = resolve_yaml(ref, "hardware_profiles")
    if found is None and base_dir is not None and is_file(base_dir / ref):
        found = base_dir / ref
    if found is not None:
        return found
    names = list_bundled("hardware_profiles")
    raise blame_override(InputError(
        scenario.source,
        "hardware",
        f"found {ref!r}, which is neither a bundled profile nor a file{did_you_mean(ref, names)}"
        f"; bundled: {', '.join(names) or '(none)'}",
    ), overrides)
