"""A Megatron-Bridge (or NeMo 2) training config as checked values: its ConfigContainer YAML
(what `ConfigContainer.to_yaml` and `logger.save_config_filepath` write: `model`, `train`,
`optimizer`, `ddp`, `dataset`, ... sections) flattened to dotted keys with their lines, or
its Hydra-style overrides (`model.tensor_model_parallel_size=4 train.global_batch_size=128`,
one or more a line, after an optional launch command such as `python run_recipe.py --recipe
NAME`); NeMo 2's names rewritten to Bridge's (`bridge_keys.canonical`), every key known (a
did-you-mean otherwise; --lenient leaves an unknown key out with a note), a refused key
refused only when it turns its feature on; errors name the file, the line and the key."""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from simulator.config.imports.bridge_keys import NAMES, canonical, rule
from simulator.config.imports.megatron_flags import REFUSE
from simulator.config.imports.mindformers_source import MfConfig, yaml_keys
from simulator.config.imports.source_file import read_config_text
from simulator.config.yamlio import did_you_mean
from simulator.errors import InputError

__all__ = ["parse_bridge", "read_bridge", "OFF"]

_KEY = re.compile(r"^\+{0,2}[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
OFF: tuple[Any, ...] = (False, None, 0, "", {}, [], "null", "None")


def _scalar(text: str, where: str, key: str) -> Any:
    """An override's value as Hydra reads it (YAML's scalars and flow lists)."""
    try:
        return yaml.safe_load(text) if text else None
    except yaml.YAMLError:
        raise InputError(where, key, f"found {text!r}; expected a YAML value") from None


def _overrides(text: str, path: str) -> MfConfig:
    """The `key=value` items of `text`; the words before the first one a launch command."""
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    started = False
    for number, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line.rstrip().removesuffix("\\"), comments=True)
        except ValueError as exc:
            raise InputError(f"{path}:{number}", "", f"cannot split the line ({exc})") from None
        for word in words:
            key, eq, value = word.partition("=")
            if not eq and not started:
                continue
            if not eq or not _KEY.match(key):
                raise InputError(f"{path}:{number}", word.split("=")[0], "expected a dotted "
                                 "override KEY=VALUE (Hydra's syntax, as "
                                 "model.tensor_model_parallel_size=4)")
            started = True
            values[key] = _scalar(value, f"{path}:{number}", key)
            lines[key] = number
    if not values:
        raise InputError(path, "", "expected a Megatron-Bridge ConfigContainer YAML or "
                         "dotted overrides (model.num_layers=32 ...)")
    return MfConfig(path, values, lines)


def _renamed(cfg: MfConfig) -> MfConfig:
    """`cfg` under Megatron-Bridge's names; a key given twice (under both names) refused."""
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    shown: dict[str, str] = {}
    for key, value in cfg.values.items():
        name = canonical(key)
        if name in values:
            raise cfg.error(key, f"given twice (as {shown[name]} as well)")
        values[name], lines[name], shown[name] = value, cfg.lines.get(key, 0), key
    out = MfConfig(cfg.path, values, lines)
    out.notes.extend(f"{k} read as {canonical(k)} (NeMo 2's name)" for k in cfg.values
                     if canonical(k) != k.lstrip("+"))
    return out


def _check(cfg: MfConfig, lenient: bool) -> None:
    for key in list(cfg.values):
        found = rule(key)
        value = cfg.values[key]
        if found is None:
            if not lenient:
                raise cfg.error(key, "not a key of a Megatron-Bridge config this importer "
                                f"knows{did_you_mean(key, NAMES)} (Megatron-Bridge training/"
                                "config.py ConfigContainer); --lenient leaves it out")
            cfg.notes.append(f"{key} (line {cfg.lines.get(key, 0)}) left out: not a key "
                             "this importer knows")
            cfg.dropped.add(key)
        elif found.kind == REFUSE and value not in OFF:
            if not lenient:
                raise cfg.error(key, f"{value!r} changes what Megatron-Bridge runs and has no "
                                f"scenario key ({found.why}); --lenient imports without it")
            cfg.notes.append(f"{key} (line {cfg.lines.get(key, 0)}) left out: {found.why}")
            cfg.dropped.add(key)


def parse_bridge(text: str, path: str, lenient: bool = False) -> MfConfig:
    """The checked keys of `text` (a ConfigContainer YAML or overrides; `path` in
    messages)."""
    try:
        mapping = isinstance(yaml.safe_load(text), dict)
    except yaml.YAMLError:
        mapping = False
    raw = yaml_keys(text, path, "expected a ConfigContainer mapping (model, train, ...)") \
        if mapping else _overrides(text, path)
    cfg = _renamed(raw)
    _check(cfg, lenient)
    return cfg


def read_bridge(ref: str, shown: str | None = None, lenient: bool = False) -> MfConfig:
    """The checked keys of the file `ref` (a path, or the name of a bundled config in
    scenarios/bridge/, kept as `.yml`)."""
    text, name = read_config_text(ref, shown, "bridge", ".yml", "Megatron-Bridge config",
                                  lambda: "no such file or bundled Megatron-Bridge config",
                                  "not a training config")
    return parse_bridge(text, name, lenient)
