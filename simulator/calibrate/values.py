"""Reading and replacing one figure of a hardware profile by its dotted key."""

from __future__ import annotations

from typing import Any

from simulator.config.hardware.schema import HardwareProfile

__all__ = ["get_value", "with_value"]


def get_value(hw: HardwareProfile, key: str) -> Any:
    """The value at dotted `key` ('efficiency.intra_node_bus_fraction'), None if a block on
    the way is absent."""
    value: Any = hw
    for part in key.split("."):
        value = getattr(value, part, None)
        if value is None:
            return None
    return value


def with_value(hw: Any, key: str, value: Any) -> Any:
    """A copy of `hw` (a profile or one of its blocks) with dotted `key` set to `value`."""
    head, _, rest = key.partition(".")
    if not rest:
        return hw.model_copy(update={head: value})
    return hw.model_copy(update={head: with_value(getattr(hw, head), rest, value)})
