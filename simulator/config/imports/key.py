"""The scenario key `from: {megatron_args: FILE}` (or `torchtitan_toml: FILE`): the scenario
a Megatron-LM argument file or launch script, or a torchtitan job config, imports to, under
the keys written beside `from` (config/scenario/load.py `parse_scenario` expands it first,
as `model.from_hf`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.config.imports.formats import read_format, stack_of
from simulator.config.resources import is_file
from simulator.errors import InputError

__all__ = ["expand_from", "stack_of"]

_KEYS = {"megatron_args": "megatron", "torchtitan_toml": "torchtitan",
         "deepspeed_config": "deepspeed", "mindformers_yaml": "mindformers",
         "nemo_yaml": "nemo", "bridge_config": "bridge"}
_WHAT = {"megatron_args": "a Megatron-LM argument file or launch script",
         "torchtitan_toml": "a torchtitan job config (TOML)",
         "deepspeed_config": "a DeepSpeed config (JSON)",
         "mindformers_yaml": "a MindFormers run config (YAML)",
         "nemo_yaml": "a NeMo training config (YAML)",
         "bridge_config": "a Megatron-Bridge ConfigContainer YAML or dotted overrides"}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` written on top, mapping by mapping."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _spec(spec: Any, source: str) -> tuple[str, str, bool]:
    """(the key, the file, lenient) of a `from` mapping; InputError naming what is wrong."""
    given = [k for k in _KEYS if isinstance(spec, dict) and k in spec]
    if not isinstance(spec, dict) or set(spec) - {*_KEYS, "lenient"} or len(given) != 1:
        raise InputError(source, "from", f"found {spec!r}; expected a mapping with one of "
                         f"{', '.join(_KEYS)}: FILE (and lenient: true|false)")
    key = given[0]
    ref, lenient = spec[key], spec.get("lenient", False)
    if not isinstance(ref, str) or not isinstance(lenient, bool):
        raise InputError(source, f"from.{key}", f"found {ref!r}; expected the path of "
                         f"{_WHAT[key]}, relative to the scenario's folder, or a bundled "
                         "one's name (lenient: a boolean)")
    return key, ref, lenient


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def expand_from(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`data` with `from: {megatron_args: FILE, lenient: false}` (or `torchtitan_toml`)
    replaced by the scenario the file imports to, the keys written beside `from` winning
    (`cluster` gives the world size when the file has no torchrun line; `hardware` picks
    the stack)."""
    spec = data.get("from")
    if spec is None:
        return data
    key, ref, lenient = _spec(spec, source)
    beside = Path(source).parent / ref
    path = ref if is_file(Path(ref)) or not is_file(beside) else str(beside)
    given = data.get("cluster")
    cluster: dict[str, Any] = given if isinstance(given, dict) else {}
    hw = data.get("hardware")
    hardware = hw if isinstance(hw, str) else "h100-sxm"
    imported, _ = read_format(_KEYS[key], path, hardware, _count(cluster.get("nodes")),
                              _count(cluster.get("devices_per_node")), lenient, ref)
    written = {k: v for k, v in data.items() if k != "from"}
    return _merge({k: v for k, v in imported.scenario.items() if k != "name"}, written)
