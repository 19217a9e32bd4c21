"""A DeepSpeed config (`ds_config.json`) as checked values: read as JSON, flattened to dotted
keys with the line each is on; every key known (a did-you-mean against the table's names
otherwise), a refused key refused only when it turns its feature on; errors name the file,
the line and the key."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from simulator.config.imports.deepspeed_keys import NAMES, rule
from simulator.config.imports.megatron_flags import REFUSE
from simulator.config.imports.source_file import KeyedConfig, read_config_text
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["DsConfig", "parse_ds", "read_ds"]

# a refused key whose value is DeepSpeed's default leaves its feature off (zero/config.py:
# zero_hpz_partition_size 1, mics_shard_size -1; offload_config.py ratio 1.0)
_OFF = {"zero_optimization.zero_hpz_partition_size": 1,
        "zero_optimization.mics_shard_size": -1,
        "zero_optimization.offload_optimizer.ratio": 1.0}


def _lines(text: str, keys: list[str]) -> dict[str, int]:
    """The line of each dotted key: each part's first `"name"` at or after its parent's."""
    rows = text.splitlines()
    out: dict[str, int] = {}
    for key in keys:
        line = 0
        for part in key.split("."):
            pattern = re.compile(rf'"{re.escape(part)}"\s*:')
            line = next((i for i in range(line, len(rows)) if pattern.search(rows[i])), line)
        out[key] = line + 1
    return out


def _flatten(data: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    for key, value in data.items():
        if isinstance(value, dict) and value:
            _flatten(value, f"{prefix}{key}.", out)
        else:
            out[f"{prefix}{key}"] = value


@dataclass
class DsConfig(KeyedConfig):
    """A DeepSpeed JSON config's keys (`KeyedConfig`) and how this format reads a value."""

    def integer(self, key: str, lo: int = 1, hi: int = 10**9) -> int | None:
        """The whole number at `key`, None where absent or "auto"."""
        value = self.values.get(key)
        if value is None or value == "auto":
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(
                value) or not lo <= value <= hi:
            raise self.error(key, f"found {value!r}; expected a whole number from {lo} to "
                             f"{hi:,} (or \"auto\")")
        return int(value)

    def flag(self, key: str, default: bool = False) -> bool | None:
        """The boolean at `key`, None where "auto"."""
        value = self.values.get(key, default)
        if value == "auto":
            return None
        if not isinstance(value, bool):
            raise self.error(key, f"found {value!r}; expected true, false or \"auto\"")
        return value


def _is_on(key: str, value: Any) -> bool:
    return value not in (False, None, 0, "none", "", [], {}) and value != _OFF.get(key)


def _check(ds: DsConfig, lenient: bool) -> None:
    for key, value in ds.values.items():
        found = rule(key)
        if found is None:
            raise ds.error(key, "not a key of DeepSpeed's config this importer knows"
                           f"{did_you_mean(key, NAMES)} (deepspeed/runtime/constants.py, "
                           "zero/config.py)")
        if found.kind == REFUSE and _is_on(key, value):
            if not lenient:
                raise ds.error(key, f"{value!r} changes what DeepSpeed runs and has no "
                               f"scenario key ({found.why}); --lenient imports without it")
            ds.notes.append(f"{key} (line {ds.lines.get(key, 0)}) left out: {found.why}")
            ds.dropped.add(key)


def parse_ds(text: str, path: str, lenient: bool = False) -> DsConfig:
    """The checked keys of the JSON `text` (named `path` in messages)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}", "", f"not JSON ({exc.msg}, column "
                         f"{exc.colno})") from None
    if not isinstance(data, dict):
        raise InputError(path, "", f"found a JSON {type(data).__name__}; expected an object "
                         "of DeepSpeed config keys")
    values: dict[str, Any] = {}
    _flatten(data, "", values)
    ds = DsConfig(path, values, _lines(text, list(values)))
    _check(ds, lenient)
    return ds


def read_ds(ref: str, shown: str | None = None, lenient: bool = False) -> DsConfig:
    """The checked keys of the file `ref` (a path, or the name of a bundled config in
    scenarios/deepspeed/); `shown` names it in messages."""
    text, name = read_config_text(ref, shown, "deepspeed", ".json", "DeepSpeed config",
                                  lambda: "no such file or bundled DeepSpeed config",
                                  "not a DeepSpeed config")
    return parse_ds(text, name, lenient)
