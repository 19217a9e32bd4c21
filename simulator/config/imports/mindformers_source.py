"""A MindFormers run config (YAML) as checked values: flattened to dotted keys with the line
each is on; every key known (a did-you-mean against the table's names otherwise); a refused
key refused only when it turns its feature on; errors name the file, the line and the key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from simulator.config.imports.megatron_flags import REFUSE
from simulator.config.imports.mindformers_keys import NAMES, rule
from simulator.config.imports.source_file import KeyedConfig, read_config_text
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["MfConfig", "parse_mf", "read_mf"]


def _walk(node: yaml.Node, data: Any, prefix: str, values: dict[str, Any],
          lines: dict[str, int]) -> None:
    """Flatten the mapping `data` with the lines of its node tree."""
    if not isinstance(node, yaml.MappingNode) or not isinstance(data, dict):
        return
    for key_node, value_node in node.value:
        key = f"{prefix}{key_node.value}"
        lines[key] = key_node.start_mark.line + 1
        value = data.get(key_node.value)
        if isinstance(value, dict) and value:
            _walk(value_node, value, key + ".", values, lines)
        else:
            values[key] = value


@dataclass
class MfConfig(KeyedConfig):
    """A MindFormers or NeMo/Megatron-Bridge YAML config's keys (`KeyedConfig`) and how
    this format reads a value."""

    def integer(self, key: str, default: int | None, lo: int = 1, hi: int = 10**9
                ) -> int | None:
        value = self.values.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self.error(key, f"found {value!r}; expected a whole number from {lo} to "
                             f"{hi:,}")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.values.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"found {value!r}; expected True or False")
        return value

    def text(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.values.get(key, default)
        if value not in choices:
            raise self.error(key, f"found {value!r}; allowed: "
                             f"{', '.join(repr(c) for c in choices)}")
        return str(value)


def _check(mf: MfConfig, lenient: bool) -> None:
    for key, value in mf.values.items():
        found = rule(key)
        if found is None:
            raise mf.error(key, "not a key of a MindFormers run config this importer knows"
                           f"{did_you_mean(key, NAMES)} (mindformers llama_config.py, "
                           "transformer.py TransformerOpParallelConfig)")
        if found.kind == REFUSE and value not in (False, None, 0, "", {}, []):
            if not lenient:
                raise mf.error(key, f"{value!r} changes what MindFormers runs and has no "
                               f"scenario key ({found.why}); --lenient imports without it")
            mf.notes.append(f"{key} (line {mf.lines.get(key, 0)}) left out: {found.why}")
            mf.dropped.add(key)


def yaml_keys(text: str, path: str, expected: str) -> MfConfig:
    """The dotted keys of the YAML `text` (named `path` in messages) with their lines,
    unchecked; `expected` says what the top level must be."""
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise InputError(where, "", f"not YAML ({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict) or node is None:
        raise InputError(path, "", expected)
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    _walk(node, data, "", values, lines)
    return MfConfig(path, values, lines)


def parse_mf(text: str, path: str, lenient: bool = False) -> MfConfig:
    """The checked keys of the YAML `text` (named `path` in messages)."""
    mf = yaml_keys(text, path, "expected a mapping of MindFormers config keys")
    _check(mf, lenient)
    return mf


def read_mf(ref: str, shown: str | None = None, lenient: bool = False) -> MfConfig:
    """The checked keys of the file `ref` (a path, or the name of a bundled config in
    scenarios/mindformers/, kept as `.yml` so that no scenario listing takes it for a
    scenario); `shown` names it in messages."""
    text, name = read_config_text(ref, shown, "mindformers", ".yml", "MindFormers config",
                                  lambda: "no such file or bundled MindFormers config",
                                  "not a run config")
    return parse_mf(text, name, lenient)
