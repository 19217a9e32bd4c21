"""Editing a bundled profile's YAML text in place: one field's value replaced (or added) with
a comment that cites where the new figure came from, every other line (and its citation)
kept as written.

The bundled profiles are block mappings, one key per line, a comment after the value and
its continuation lines indented past the key (`hardware_profiles/*.yaml`); a replaced
field's old comment and its continuation lines go with its old value.
"""

from __future__ import annotations

import re

__all__ = ["set_field", "yaml_value"]

_KEY = re.compile(r"^(\s*)([A-Za-z_][\w]*)\s*:(.*)$")
_COMMENT_COLUMN = 30


def yaml_value(value: object) -> str:
    """`value` as YAML flow text: numbers as Python prints them, tuples as [a, b] lists."""
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if abs(value) >= 1 else repr(value)
    return repr(value) if isinstance(value, float) else str(value)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_key(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#") and _KEY.match(line) is not None


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index after the block of children of the key at `start` (indent `indent`)."""
    end = start + 1
    while end < len(lines) and not (_is_key(lines[end]) and _indent(lines[end]) <= indent):
        end += 1
    return end


def _find(lines: list[str], name: str, lo: int, hi: int, indent: int) -> int | None:
    """The line of key `name` among the children (indent > `indent`) of lines[lo:hi]."""
    child = None
    for i in range(lo, hi):
        match = _KEY.match(lines[i]) if _is_key(lines[i]) else None
        if match is None or _indent(lines[i]) <= indent:
            continue
        child = _indent(lines[i]) if child is None else child
        if _indent(lines[i]) == child and match.group(2) == name:
            return i
    return None


def _line(indent: int, key: str, value: str, comment: str) -> str:
    text = f"{' ' * indent}{key}: {value}"
    return f"{text.ljust(_COMMENT_COLUMN - 1)} # {comment}" if comment else text


def _append_at(lines: list[str], lo: int, hi: int, indent: int, name: str, value: object,
               comment: str) -> tuple[int, str]:
    """(index, line) adding key `name` as the last child of the block lines[lo:hi]."""
    children = [i for i in range(lo, hi) if _is_key(lines[i]) and _indent(lines[i]) > indent]
    child = _indent(lines[children[0]]) if children else indent + 2
    last = [i for i in children if _indent(lines[i]) == child]
    if not last:
        return lo, _line(child, name, yaml_value(value), comment)
    at = _block_end(lines, last[-1], child)  # after the last child, its children, comments
    while at > last[-1] + 1 and (not lines[at - 1].strip() or (
            lines[at - 1].strip().startswith("#") and _indent(lines[at - 1]) <= child)):
        at -= 1  # but not the next key's own leading comments
    return at, _line(child, name, yaml_value(value), comment)


def set_field(text: str, key: str, value: object, comment: str) -> str:
    """`text` with dotted `key` set to `value` and commented `comment`; a key that is absent
    is added as the first child of its parent block, which must exist."""
    lines = text.split("\n")
    lo, hi, indent = 0, len(lines), -1
    parts = key.split(".")
    for depth, name in enumerate(parts):
        found = _find(lines, name, lo, hi, indent)
        if found is None and depth == len(parts) - 1:
            lines.insert(*_append_at(lines, lo, hi, indent, name, value, comment))
            return "\n".join(lines)
        if found is None:
            raise KeyError(f"{key}: no block '{name}' in the base profile")
        lo, hi, indent = found + 1, _block_end(lines, found, _indent(lines[found])), \
            _indent(lines[found])
    at = lo - 1
    end = at + 1
    while end < len(lines) and lines[end].strip().startswith("#") and \
            _indent(lines[end]) > indent:
        end += 1  # the old comment's continuation lines
    lines[at:end] = [_line(indent, parts[-1], yaml_value(value), comment)]
    return "\n".join(lines)
