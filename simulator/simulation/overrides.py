"""Notes on `--set hardware.KEY=VALUE` overrides that do not do what they seem to: a field
whose role another field of the profile takes (`hardware.usage` shadow rules), and a field
this run does not read, found by simulating again without the override and comparing.

No `--set` of a profile field is silently ignored: each one either changes the result or
gets a note (tests/test_overrides.py checks every field). The check costs one more
simulation per hardware override.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.config.hardware.load import parse_profile
from simulator.config.hardware.usage import FIELD_USES, field_value, shadow_notes
from simulator.config.resources import resolve_yaml
from simulator.config.yamlio import read_yaml_file
from simulator.errors import InputError
from simulator.report import summary
from simulator.simulation.simulate import simulate

__all__ = ["override_notes", "stack_notes"]

# summary keys that are not results (`config` names the inputs: a renamed profile is the
# same hardware)
_LABELS = ("scenario", "simulation", "notes", "config")


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


def stack_notes(loaded: Any, hw: Any) -> tuple[str, ...]:
    """A note when `--set hardware=NAME` also changed the software stack: the scenario names
    no `framework`, so the stack is the new profile's `default_framework` (an A100 profile's
    is a 2021 Megatron-LM, an H100's Megatron-Core). A scenario that names its framework
    keeps it, and gets no note."""
    items = [o for o in loaded.overrides if o.partition("=")[0].strip() == "hardware"]
    if not items or loaded.scenario.framework is not None:
        return ()
    taken = hw.default_framework
    text = (f"--set {items[-1].strip()}: the scenario names no framework, so the software "
            f"stack is {hw.name}'s default_framework, {taken}")
    before = _scenario_default_framework(loaded)
    if before is not None and before[1] != taken:
        text += (f" (the scenario's {before[0]} runs {before[1]}); add --set "
                 f"framework={before[1]} to change the hardware alone")
    return (text,)


def _scenario_default_framework(loaded: Any) -> tuple[str, str] | None:
    """(hardware, its default_framework) as the scenario file names them, or None when the
    file or its profile cannot tell (the run itself reports real errors)."""

    path = getattr(loaded, "path", None)
    if path is None:
        return None
    try:
        ref = read_yaml_file(Path(path)).get("hardware")
        found = resolve_yaml(ref, "hardware_profiles") if isinstance(ref, str) else None
        if found is None and isinstance(ref, str) and (Path(path).parent / ref).is_file():
            found = Path(path).parent / ref
        fw = read_yaml_file(found).get("default_framework") if found is not None else None
    except (InputError, OSError):
        return None
    return (ref, fw) if isinstance(ref, str) and isinstance(fw, str) else None
