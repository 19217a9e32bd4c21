"""The scenario key `from: {megatron_args: FILE}`: the scenario a Megatron-LM argument file
or launch script imports to, under the keys written beside `from` (config/scenario/load.py
`parse_scenario` expands it first, as `model.from_hf`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.config.framework.load import load_framework
from simulator.config.hardware.load import load_profile
from simulator.config.imports.megatron import import_megatron, read_megatron, stack_for
from simulator.config.resources import is_file
from simulator.errors import InputError

__all__ = ["expand_from", "stack_of"]

_KEYS = ("megatron_args",)


def stack_of(hardware: str) -> tuple[str | None, bool]:
    """(the hardware profile's default framework, what the Megatron stack on it resolves
    `overlap.tp_comm: auto` to); a profile that cannot be read is reported by the scenario's
    own check of `hardware`, so here it is (None, the megatron-core default)."""
    try:
        default = load_profile(hardware).default_framework
    except InputError:
        default = None
    return default, load_framework(stack_for(default)).overlap.tp_comm_enabled


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` written on top, mapping by mapping."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def expand_from(data: dict[str, Any], source: str) -> dict[str, Any]:
    """`data` with `from: {megatron_args: FILE, lenient: false}` replaced by the scenario
    the file imports to, the keys written beside `from` winning (`cluster` gives the world
    size when the file has no torchrun line; `hardware` picks the stack)."""
    spec = data.get("from")
    if spec is None:
        return data
    if not isinstance(spec, dict) or set(spec) - {*_KEYS, "lenient"} or \
            not any(k in spec for k in _KEYS):
        raise InputError(source, "from", f"found {spec!r}; expected a mapping with "
                         f"{' or '.join(_KEYS)}: FILE (and lenient: true|false)")
    ref, lenient = spec["megatron_args"], spec.get("lenient", False)
    if not isinstance(ref, str) or not isinstance(lenient, bool):
        raise InputError(source, "from.megatron_args", f"found {ref!r}; expected the path "
                         "of a Megatron-LM argument file or launch script, relative to the "
                         "scenario's folder, or a bundled one's name (lenient: a boolean)")
    beside = Path(source).parent / ref
    path = ref if is_file(Path(ref)) or not is_file(beside) else str(beside)
    given = data.get("cluster")
    cluster: dict[str, Any] = given if isinstance(given, dict) else {}
    hw = data.get("hardware")
    hardware = hw if isinstance(hw, str) else "h100-sxm"
    default, tp_comm = stack_of(hardware)
    nodes, per_node = (v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None
                       for v in (cluster.get("nodes"), cluster.get("devices_per_node")))
    imported = import_megatron(read_megatron(path, ref), hardware, default, tp_comm, nodes,
                               per_node, lenient)
    written = {k: v for k, v in data.items() if k != "from"}
    return _merge({k: v for k, v in imported.scenario.items() if k != "name"}, written)
