"""A torchtitan job config (TOML) as checked values: read with Python's tomllib, flattened to
`section.key` with the line each key is on; every key known (a did-you-mean against
torchtitan's own names otherwise), each value of the type and range it must have; errors
name the file, the line and the key."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import tomllib

from simulator.config.imports.megatron_flags import REFUSE
from simulator.config.imports.source_file import read_config_text
from simulator.config.imports.torchtitan_keys import SECTIONS, rule
from simulator.config.imports.torchtitan_names import KEY_NAMES
from simulator.config.resources import bundled_dir
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["Toml", "read_toml", "parse_toml", "bundled_tomls"]

_MAX = 10**9
_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*=")


def _lines(text: str) -> dict[str, int]:
    """The line (from 1) of each `section.key` assignment, as the file writes it."""
    out: dict[str, int] = {}
    section = ""
    for number, line in enumerate(text.splitlines(), 1):
        head = _HEADER.match(line)
        if head:
            section = head.group(1)
            continue
        key = _KEY.match(line)
        if key:
            out.setdefault(f"{section}.{key.group(1)}" if section else key.group(1), number)
    return out


def _flatten(data: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            _flatten(value, name + ".", out)
        else:
            out[name] = value


@dataclass
class Toml:
    """The checked keys of one file: values and lines by `section.key`, and what each
    scenario key came from (for the table)."""

    path: str
    values: dict[str, Any]
    lines: dict[str, int]
    notes: list[str] = field(default_factory=list)
    dropped: set[str] = field(default_factory=set)  # left out by --lenient

    def line(self, key: str) -> int:
        return self.lines.get(key, 0)

    def error(self, key: str, message: str) -> InputError:
        line = self.line(key)
        return InputError(f"{self.path}:{line}" if line else self.path, key, message)

    def has(self, key: str) -> bool:
        return key in self.values

    def first(self, *keys: str) -> str | None:
        """The first of `keys` the file sets (older and newer names of one setting)."""
        return next((k for k in keys if k in self.values), None)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def text(self, key: str, default: str, choices: tuple[str, ...] = ()) -> str:
        value = self.values.get(key, default)
        if not isinstance(value, str) or (choices and value not in choices):
            allowed = f"; allowed: {', '.join(repr(c) for c in choices)}" if choices else \
                "; expected a string"
            raise self.error(key, f"found {value!r}{allowed}")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.values.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"found {value!r}; expected true or false")
        return value

    def integer(self, key: str, default: int, lo: int = 1, hi: int = _MAX) -> int:
        value = self.values.get(key, default)
        if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self.error(key, f"found {value!r}; expected a whole number from {lo} to "
                             f"{hi:,}")
        return value

    def strings(self, key: str) -> list[str]:
        value = self.values.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"found {value!r}; expected a list of strings")
        return value


def _unknown(toml: Toml, key: str) -> InputError:
    section = key.split(".", 1)[0]
    if "." not in key or section not in SECTIONS:
        hint = did_you_mean(section, SECTIONS)
        return toml.error(key, f"[{section}] is not a section of torchtitan's job config"
                          f"{hint} (torchtitan/config/job_config.py JobConfig)")
    hint = did_you_mean(key, sorted(KEY_NAMES))
    return toml.error(key, f"not a key of torchtitan's job config{hint} "
                      "(torchtitan/config/job_config.py)")


def _check(toml: Toml, lenient: bool) -> None:
    """Every key known and none refused (`--lenient`: left out with a note)."""
    for key in list(toml.values):
        found = rule(key)
        if found is None and key not in KEY_NAMES:
            raise _unknown(toml, key)
        if found is None or found.kind == REFUSE:
            why = found.why if found else "a torchtitan key this importer does not read"
            if not lenient:
                raise toml.error(key, f"changes what torchtitan runs and has no scenario key "
                                 f"({why}); --lenient imports without it")
            toml.notes.append(f"{key} (line {toml.line(key)}) left out: {why}")
            toml.dropped.add(key)


def parse_toml(text: str, path: str, lenient: bool = False) -> Toml:
    """The checked keys of the TOML `text` (named `path` in messages)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, "", f"not a TOML file ({exc})") from None
    values: dict[str, Any] = {}
    _flatten(data, "", values)
    toml = Toml(path, values, _lines(text))
    _check(toml, lenient)
    return toml


def bundled_tomls() -> list[str]:
    """Names of the bundled torchtitan job configs (scenarios/torchtitan/*.toml)."""
    return sorted(p.stem for p in (bundled_dir("scenarios") / "torchtitan").glob("*.toml"))


def read_toml(ref: str, shown: str | None = None, lenient: bool = False) -> Toml:
    """The checked keys of the file `ref` (a path, or the name of a bundled job config in
    scenarios/torchtitan/); `shown` names it in messages."""
    def missing() -> str:
        names = bundled_tomls()
        return (f"no such file or bundled torchtitan job config{did_you_mean(ref, names)}; "
                f"bundled (scenarios/torchtitan/): {', '.join(names)}")
    text, name = read_config_text(ref, shown, "torchtitan", ".toml", "torchtitan job config",
                                  missing, "not a job config")
    return parse_toml(text, name, lenient)
