"""Notes on `--set hardware.KEY=VALUE` overrides that do not do what they seem to: a field
whose role another field of the profile takes (`hardware.usage` shadow rules), and a field
this run does not read, found by simulating again without the override and comparing.

No `--set` of a profile field is silently ignored: each one either changes the result or
gets a note (tests/test_overrides.py checks every field). The check costs one more
simulation per hardware override.
"""

from __future__ import annotations

from typing import Any

from simulator.config.hardware.load import parse_profile
from simulator.config.hardware.usage import FIELD_USES, field_value, shadow_notes
from simulator.config.yamlio import read_yaml_file
from simulator.errors import InputError

__all__ = ["override_notes"]

_LABELS = ("scenario", "simulation", "notes")  # summary keys that are not results


def _comparable(summ: dict[str, Any]) -> dict[str, Any]:
    """The summary's results: labels and wall times dropped."""
    out = {k: v for k, v in summ.items() if k not in _LABELS}
    if out.get("critical_path"):
        out["critical_path"] = {k: v for k, v in out["critical_path"].items()
                                if k != "hardware"}
    return out


def _unused(loaded: Any, hw: Any, raw: dict[str, Any], result: Any, i: int) -> str | None:
    """Why override i of `loaded` changed nothing, or None when it did (or is needed).
    `raw`: the profile file's mapping."""
    from simulator.report import summary
    from simulator.simulation.simulate import simulate

    items = loaded.hardware_overrides
    key, _, value = items[i].partition("=")
    key = key.strip()
    try:
        without = parse_profile(raw, hw.source, items[:i] + items[i + 1:])
    except InputError:
        return None  # the other overrides need it to be valid
    if field_value(without, key) == field_value(hw, key):
        return f"the profile has {key}={value.strip()} already"
    again = simulate(loaded.scenario, without, result.fidelity)
    if _comparable(summary(again)) != _comparable(summary(result)):
        return None
    return f"this run does not read it; {key} is for: {FIELD_USES.get(key, '?')}"


def override_notes(loaded: Any, hw: Any, result: Any) -> tuple[str, ...]:
    """Notes for the hardware overrides of `loaded` (a cli LoadedScenario) given `hw`, the
    profile they produced, and `result`, the simulation with them."""
    items = list(loaded.hardware_overrides)
    keys = [item.partition("=")[0].strip() for item in items]
    notes = [f"--set hardware.{key}: {why}" for key, why in shadow_notes(hw, keys)]
    raw = read_yaml_file(loaded.hardware_path) if items else {}
    for i, item in enumerate(items):
        why = _unused(loaded, hw, raw, result, i)
        if why:
            notes.append(f"--set hardware.{item} changed nothing: {why}")
    return tuple(notes)
