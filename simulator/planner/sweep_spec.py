"""What a sweep runs (`SweepSpec`): a scenario and a grid of `--set` overrides, given on the
command line (`parse_grid`) or in a sweep file (`load_sweep_file`), expanded into one
configuration per combination (`expand`), with the typed column of each grid key."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.yamlio import parse_override
from simulator.errors import InputError

__all__ = ["SweepSpec", "Config", "typed", "parse_grid", "expand", "load_sweep_file"]


@dataclass(frozen=True)
class SweepSpec:
    """What a sweep runs. `scenario_path` is the scenario file, `shown` how messages name it;
    `grid` is ((dotted key, (value text, ...)), ...) in the order given; `fixed` are
    overrides applied to every configuration (like `--set`)."""

    scenario_path: str
    shown: str
    grid: tuple[tuple[str, tuple[str, ...]], ...]
    fixed: tuple[str, ...] = ()
    fidelity: str = "representative"

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.grid)

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """(grid key, Arrow type of its column): int64, float64 or bool where every value
        of the key reads as one (as `--set` reads it), else string."""
        return tuple((k, _column_type(values)) for k, values in self.grid)

    @property
    def size(self) -> int:
        n = 1
        for _, values in self.grid:
            n *= len(values)
        return n

    def manifest(self) -> dict[str, Any]:
        """What identifies the sweep (a resumed sweep must have the same)."""
        return {"scenario": self.shown, "grid": {k: list(v) for k, v in self.grid},
                "set": list(self.fixed), "fidelity": self.fidelity}


def _scalar(text: str) -> Any:
    try:
        return parse_override(f"k={text}")[1]
    except InputError:
        return text


def _column_type(values: Sequence[str]) -> str:
    parsed = [_scalar(v) for v in values]
    if all(isinstance(v, bool) for v in parsed):
        return "bool"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in parsed):
        return "int64"
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in parsed):
        return "float64"
    return "string"


def typed(text: str, kind: str) -> Any:
    """A grid value in its column's type."""
    if kind == "string":
        return text
    value = _scalar(text)
    return float(value) if kind == "float64" else value


@dataclass(frozen=True)
class Config:
    """One combination: its position in the grid and its `KEY=VALUE` overrides."""

    index: int
    overrides: tuple[str, ...]

    @property
    def label(self) -> str:
        return " ".join(self.overrides)


def parse_grid(items: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """`['parallel.tensor=1,2,4', ...]` -> (('parallel.tensor', ('1', '2', '4')), ...).

    Each value is parsed later as YAML, as `--set` parses it; a key may appear once."""

    grid: dict[str, tuple[str, ...]] = {}
    for item in items:
        parse_override(item)  # the same KEY=VALUE checks and messages as --set
        key, _, text = item.partition("=")
        key = key.strip()
        values = tuple(v.strip() for v in text.split(","))
        if not text.strip() or any(not v for v in values):
            raise InputError("--grid", key, f"found {text!r}; expected comma-separated values "
                             "such as parallel.tensor=1,2,4,8")
        if key in grid:
            raise InputError("--grid", key, "the key is given twice; give each key once")
        grid[key] = values
    return tuple(grid.items())


def expand(spec: SweepSpec) -> list[Config]:
    """Every combination, the last grid key varying fastest (itertools.product order)."""
    keys = spec.keys
    combos = itertools.product(*(values for _, values in spec.grid))
    return [Config(i, spec.fixed + tuple(f"{k}={v}" for k, v in zip(keys, combo)))
            for i, combo in enumerate(combos)]


def load_sweep_file(path: Path, data: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """(scenario reference, grid items, fixed overrides) of a sweep file (a YAML mapping
    with a `sweep:` block: scenario, grid {key: [values]}, optional set [KEY=VALUE])."""
    src = str(path)
    block = data.get("sweep")
    if not isinstance(block, dict):
        raise InputError(src, "sweep", "expected a mapping with scenario, grid and set")
    unknown = sorted(set(block) - {"scenario", "grid", "set"})
    if unknown:
        raise InputError(src, f"sweep.{unknown[0]}", "unknown key; allowed: scenario, grid, set")
    ref, grid, fixed = block.get("scenario"), block.get("grid"), block.get("set", [])
    if not isinstance(ref, str):
        raise InputError(src, "sweep.scenario", f"found {ref!r}; expected a scenario name or "
                         "a path relative to this file")
    if not isinstance(grid, dict) or not grid:
        raise InputError(src, "sweep.grid", "expected a mapping of dotted keys to lists of "
                         "values, such as {parallel.tensor: [1, 2, 4]}")
    items = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise InputError(src, f"sweep.grid.{key}", f"found {values!r}; expected a "
                             "non-empty list of values")
        items.append(f"{key}=" + ",".join(_yaml_scalar(v) for v in values))
    if not isinstance(fixed, list) or not all(isinstance(s, str) for s in fixed):
        raise InputError(src, "sweep.set", "expected a list of KEY=VALUE strings")
    local = path.parent / ref
    return (str(local) if local.is_file() else ref), items, list(fixed)


def _yaml_scalar(value: Any) -> str:
    """A grid value as `--set` text (booleans as YAML writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
