"""Reading YAML documents and applying `--set key=value` overrides, with input errors.

Only the CLI (and tests) call `read_yaml_file`; everything else takes plain dicts.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import InputError

__all__ = ["read_yaml_file", "load_yaml_text", "parse_override", "apply_overrides",
           "blame_override", "did_you_mean", "TooDeepError", "MAX_DEPTH", "MAX_NODES"]

# No scenario or profile nests deeper than 6 levels (graph op attrs included); 32 leaves room
# and keeps every later walk (PyYAML's recursive composer, deepcopy, pydantic, JSON) far from
# Python's recursion limit. MAX_NODES bounds the work of reading one document.
MAX_DEPTH = 32
MAX_NODES = 1_000_000


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-4` and `3E8` as floats and rejects duplicate keys.

    YAML 1.1 (PyYAML) wants a dot in a float's mantissa, so `learning_rate: 1e-4` would
    otherwise arrive as the string '1e-4' and fail validation with a puzzling message; and
    PyYAML silently keeps the last of two equal keys, hiding a copy-paste mistake.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[tuple[str, str]] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue  # merged (`<<:`) keys may be overridden on purpose
            ident = (key_node.tag, key_node.value)
            if ident in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key '{key_node.value}'", key_node.start_mark)
            seen.add(ident)
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


_KINDS = {list: "a list", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


class TooDeepError(ValueError):
    """A document nested deeper than MAX_DEPTH, larger than MAX_NODES nodes, or with an alias
    inside the collection it names (a cycle). `key` is the dotted path where it happened."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}" if key else message)


def _component(frame: list[Any]) -> str:
    """The path component of the node about to be read inside `frame`."""
    is_map, expect_key, key, index, _ = frame
    if not is_map:
        return f"[{index}]"
    return "<key>" if expect_key else str(key)


def _path(stack: list[list[Any]], shown: int = 6) -> str:
    """The dotted key of the node being read; past `shown` levels, a count of the rest."""
    out = ""
    for frame in stack[:shown]:
        part = _component(frame)
        out += part if part.startswith("[") or not out else f".{part}"
    return out + (f"...({len(stack) - shown} levels more)" if len(stack) > shown else "")


def _advance(frame: list[Any], scalar: Any) -> None:
    """One node of `frame` read: a map alternates key and value, a list counts items."""
    if not frame[0]:
        frame[3] += 1
    elif frame[1]:
        frame[1], frame[2] = False, scalar if isinstance(scalar, str) else "?"
    else:
        frame[1] = True


def check_shape(text: str) -> None:
    """TooDeepError for a document deeper than MAX_DEPTH, with more than MAX_NODES nodes, or
    with a recursive alias. Reads PyYAML's event stream, which is iterative, before the
    (recursive) composer sees the document, so no RecursionError can happen."""
    stack: list[list[Any]] = []  # [is_map, expect_key, key, index, anchor]
    for count, event in enumerate(yaml.parse(text, Loader=_Loader)):
        if count > MAX_NODES:
            raise TooDeepError(_path(stack), f"more than {MAX_NODES} YAML nodes; "
                               "a scenario has a few hundred")
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise TooDeepError(_path(stack), f"nested deeper than {MAX_DEPTH} levels; "
                                   "a scenario nests at most 6")
            stack.append([isinstance(event, yaml.MappingStartEvent), True, None, 0,
                          event.anchor])
        elif isinstance(event, yaml.CollectionEndEvent):
            stack.pop()
            if stack:
                _advance(stack[-1], None)
        elif isinstance(event, yaml.AliasEvent):
            if any(f[4] == event.anchor for f in stack):
                raise TooDeepError(_path(stack), f"alias *{event.anchor} refers to a "
                                   "collection that contains it (a cycle)")
            if stack:
                _advance(stack[-1], None)
        elif isinstance(event, yaml.ScalarEvent) and stack:
            _advance(stack[-1], event.value)


def load_yaml_text(text: str) -> Any:
    """Parse YAML text with the project's loader (safe, with exponent floats). Raises
    TooDeepError (see `check_shape`) before composing a document it cannot bound, and
    ValueError for an integer too long to convert."""
    check_shape(text)
    return yaml.load(text, Loader=_Loader)


def read_yaml_file(path: Path, source: str | None = None) -> dict[str, Any]:
    """The mapping at the top of a YAML file; InputError for every way it can be unusable.

    `source` is how messages name the file (default: the path as given).
    """
    src = source or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(src, "", f"cannot read file ({exc.strerror})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            src, "", f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    try:
        data = load_yaml_text(text)
    except TooDeepError as exc:
        raise InputError(src, exc.key, exc.message) from None
    except ValueError as exc:
        raise InputError(src, "", f"unreadable value ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(src, "", f"YAML syntax error{where}: {problem}") from None
    if data is None:
        raise InputError(src, "", "the file is empty; expected a mapping of keys to values")
    if not isinstance(data, dict):
        raise InputError(src, "", f"expected a mapping of keys to values at the top level, "
                         f"found {_KINDS.get(type(data), type(data).__name__)}")
    return data


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (['a', 'b', 'c'], value parsed as a YAML scalar)."""
    if "=" not in item:
        raise InputError("--set", item, "expected KEY=VALUE, for example parallel.tensor=4")
    key, _, text = item.partition("=")
    key = key.strip()
    parts = key.split(".")
    if not key or any(not p for p in parts):
        raise InputError("--set", key or item, "the key must be a dotted path like parallel.tensor")
    try:
        value = load_yaml_text(text) if text.strip() else ""
    except TooDeepError as exc:
        where = key + (f"{exc.key}" if exc.key.startswith("[") else f".{exc.key}" if exc.key
                       else "")
        raise InputError("--set", where, exc.message) from None
    except (yaml.YAMLError, ValueError):
        value = text
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A deep copy of `data` with each `key=value` override set (creating mappings as needed)."""
    out = copy.deepcopy(data)
    for item in overrides:
        parts, value = parse_override(item)
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            elif not isinstance(nxt, dict):
                path = ".".join(parts[: depth + 1])
                raise InputError("--set", ".".join(parts), f"{path} is not a mapping")
            node = nxt
        node[parts[-1]] = value
    return out


def blame_override(err: InputError, overrides: Sequence[str], prefix: str = "") -> InputError:
    """`err` re-sourced to the `--set` override that set its key (or a key inside or around
    it), so the user does not search the file for what they typed on the command line.

    `prefix` is what the user wrote before each override (`hardware.` for profile fields).
    A cross-field error (a rule between two keys) is blamed on an override of either key.
    """
    if not err.key:
        return err

    def owns(key: str) -> bool:
        return key == err.key or key.startswith(err.key + ".") or err.key.startswith(
            (key + ".", key + "["))

    # the override of the error's own key first, then one its message names
    for test in (owns, lambda key: _mentions(err.message, prefix + key)):
        for item in reversed(overrides):
            if test(item.partition("=")[0].strip()):
                return InputError(f"{err.source} with --set {prefix}{item}", err.key,
                                  err.message)
    return err


def _mentions(message: str, key: str) -> bool:
    """True when a cross-field message names `key` (as in 'must divide model.num_heads=96')."""
    return re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.])", message) is not None


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
