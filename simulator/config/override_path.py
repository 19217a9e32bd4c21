"""The key of a `--set KEY=VALUE` override as a path into a scenario or profile: dotted
mapping keys, each optionally followed by list indices (`model.ops[0].strategy`,
`parallel.pipeline_layers[0]`), and setting a value at that path with clear errors (a
bad index says how many items the list has)."""

from __future__ import annotations

import re
from typing import Any

from simulator.errors import InputError

__all__ = ["override_steps", "set_at"]

_PART = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
_INDEX = re.compile(r"\[([^\[\]]*)\]")


def override_steps(key: str) -> list[str | int]:
    """`a.b[0].c` -> ['a', 'b', 0, 'c']; InputError for an empty part or a bad index."""
    steps: list[str | int] = []
    for part in key.split("."):
        m = _PART.match(part)
        if not part or m is None:
            raise InputError("--set", key, "the key must be a dotted path like "
                             "parallel.tensor (list items as model.ops[0].strategy)")
        steps.append(m.group(1))
        for text in _INDEX.findall(m.group(2)):
            if not text.strip().isdigit():
                raise InputError("--set", key, f"found [{text}]; a list index is a whole "
                                 "number >= 0 in brackets, as in model.ops[0].strategy")
            steps.append(int(text))
    return steps


def _shown(steps: list[str | int]) -> str:
    out = ""
    for s in steps:
        out += f"[{s}]" if isinstance(s, int) else (f".{s}" if out else s)
    return out


def _child(node: Any, step: str | int, nxt: str | int, steps: list[str | int], i: int,
           key: str) -> Any:
    """The item of `node` at `step` on the way to the override's value (a missing mapping
    is created; a list is never invented)."""
    here = _shown(steps[: i + 1])
    if isinstance(step, int):
        return _item(node, step, steps, i, key)
    nxt_node = node.get(step)
    if nxt_node is None:
        if isinstance(nxt, int):
            raise InputError("--set", key, f"{here} is not set, so it has no item [{nxt}]; "
                             f"set the whole list ({here}=[...])")
        nxt_node = node[step] = {}
    return nxt_node


def _item(node: Any, index: int, steps: list[str | int], i: int, key: str) -> Any:
    owner = _shown(steps[:i])
    if not isinstance(node, list):
        raise InputError("--set", key, f"{owner} is not a list, so [{index}] selects nothing")
    if index >= len(node):
        items = f"index 0..{len(node) - 1}" if node else "it is empty"
        raise InputError("--set", key, f"{owner} has {len(node)} item"
                         f"{'' if len(node) == 1 else 's'} ({items}); found [{index}]")
    return node[index]


def set_at(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `value` at the override path `key` in `data` (in place)."""
    steps = override_steps(key)
    node: Any = data
    for i, step in enumerate(steps[:-1]):
        node = _child(node, step, steps[i + 1], steps, i, key)
        if isinstance(steps[i + 1], str) and not isinstance(node, dict):
            raise InputError("--set", key, f"{_shown(steps[: i + 1])} is not a mapping")
    last = steps[-1]
    if isinstance(last, int):
        _item(node, last, steps, len(steps) - 1, key)  # checks the index
        node[last] = value
    else:
        node[last] = value
