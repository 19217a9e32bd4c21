"""A NeMo training config (the YAML of a NeMo-Framework-Launcher `conf/training/*` file or of
NeMo's megatron_gpt_config.yaml) as checked values: flattened to dotted keys with their lines
(the MindFormers reader's walk), OmegaConf's `${multiply:A, B}` and `${.key}` resolved, every
key known (a did-you-mean otherwise), a refused key refused only when it turns its feature
on; errors name the file, the line and the key."""

from __future__ import annotations

import re
from typing import Any

from simulator.config.imports.megatron_flags import REFUSE
from simulator.config.imports.mindformers_source import MfConfig, yaml_keys
from simulator.config.imports.nemo_keys import NAMES, rule
from simulator.config.imports.source_file import read_config_text
from simulator.config.yamlio import did_you_mean

__all__ = ["parse_nemo", "read_nemo"]

_REF = re.compile(r"^\$\{\.([A-Za-z_][A-Za-z0-9_]*)\}$")
_MUL = re.compile(r"^\$\{multiply:\s*([^,]+?)\s*,\s*(.+?)\s*\}$")


def _term(cfg: MfConfig, key: str, term: str) -> Any:
    """A number, or `${.sibling}`: the value of the key beside `key`."""
    ref = _REF.match(term)
    if ref:
        return _resolve(cfg, key.rsplit(".", 1)[0] + "." + ref.group(1), set())
    try:
        return int(term)
    except ValueError:
        return term


def _resolve(cfg: MfConfig, key: str, seen: set[str]) -> Any:
    value = cfg.values.get(key)
    if not isinstance(value, str) or "${" not in value or key in seen:
        return value
    seen.add(key)
    mul, ref = _MUL.match(value), _REF.match(value)
    out: Any = value
    if mul:
        a, b = _term(cfg, key, mul.group(1)), _term(cfg, key, mul.group(2))
        if isinstance(a, int) and isinstance(b, int):
            out = a * b
    elif ref:
        out = _term(cfg, key, value)
    if isinstance(out, str) and "${" in out and getattr(rule(key), "kind", None) in (
            "mapped", REFUSE):
        raise cfg.error(key, f"found {value!r}; the interpolations read here: a number, "
                        "${.key} and ${multiply:A, B}")
    return out


def _check(cfg: MfConfig, lenient: bool) -> None:
    for key in list(cfg.values):
        found = rule(key)
        if found is None:
            raise cfg.error(key, "not a key of a NeMo training config this importer knows"
                            f"{did_you_mean(key, NAMES)} (NeMo megatron_gpt_config.yaml, "
                            "NeMo-Framework-Launcher conf/training)")
        cfg.values[key] = value = _resolve(cfg, key, set())
        if found.kind == REFUSE and value not in (False, None, 0, "", {}, []):
            if not lenient:
                raise cfg.error(key, f"{value!r} changes what NeMo runs and has no scenario "
                                f"key ({found.why}); --lenient imports without it")
            cfg.notes.append(f"{key} (line {cfg.lines.get(key, 0)}) left out: {found.why}")
            cfg.dropped.add(key)


def parse_nemo(text: str, path: str, lenient: bool = False) -> MfConfig:
    """The checked keys of the YAML `text` (named `path` in messages)."""
    cfg = yaml_keys(text, path, "expected a mapping of NeMo config keys (trainer, model)")
    _check(cfg, lenient)
    return cfg


def read_nemo(ref: str, shown: str | None = None, lenient: bool = False) -> MfConfig:
    """The checked keys of the file `ref` (a path, or the name of a bundled config in
    scenarios/nemo/, kept as `.yml` so that no scenario listing takes it for a scenario)."""
    text, name = read_config_text(ref, shown, "nemo", ".yml", "NeMo config",
                                  lambda: "no such file or bundled NeMo config",
                                  "not a training config")
    return parse_nemo(text, name, lenient)
