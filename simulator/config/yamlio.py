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

from simulator.config.override_path import override_steps, set_at
from simulator.errors import InputError

__all__ = ["read_yaml_file", "load_yaml_text", "parse_override", "apply_overrides",
           "blame_override", "did_you_mean", "TooDeepError", "MAX_DEPTH", "MAX_NODES",
           "MAX_FILE_BYTES", "AmbiguousNumberError"]

# No scenario or profile nests deeper than 6 levels (graph op attrs included); 32 leaves room
# and keeps every later walk (PyYAML's recursive composer, deepcopy, pydantic, JSON) far from
# Python's recursion limit. MAX_NODES bounds the work of reading one document.
MAX_DEPTH = 32
MAX_NODES = 100_000
# The largest bundled YAML file is 10 kB; a hundred times that is read in a fraction of a
# second. A larger file is refused before it is parsed.
MAX_FILE_BYTES = 1_000_000


_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"


class AmbiguousNumberError(yaml.constructor.ConstructorError):
    """A number YAML 1.1 and YAML 1.2 read differently (`010`: octal 8 or decimal 10)."""


class _Yaml12:
    """SafeLoader behaviour with YAML 1.2 numbers, and duplicate keys rejected.

    PyYAML implements YAML 1.1, whose numbers surprise: `1:30` is sexagesimal 90, `0b10`
    binary 2, `010` octal 8, `1_000` 1000, and `1e-4` (no dot) a string. These loaders read
    numbers as the YAML 1.2 core schema does (https://yaml.org/spec/1.2.2/#1032-tag-
    resolution), the version every current YAML library follows: `1:30`, `0b10` and
    `1_000` are strings (the scenario's validation then says a number was expected),
    `0x10` is 16, `0o10` is 8, `1e-4` is a float; `010`, read as 8 by YAML 1.1 and as 10 by
    YAML 1.2, is refused with both readings rather than guessed. PyYAML also silently keeps
    the last of two equal keys, hiding a copy-paste mistake: refused too.
    """

    yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

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
        return super().construct_mapping(node, deep=deep)  # type: ignore[misc]

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node))  # type: ignore[attr-defined]
        digits = text.lstrip("+-")
        if len(digits) > 1 and digits[0] == "0" and digits.isdigit():
            octal = set(digits) <= set("01234567")
            if not octal or int(text, 8) != int(text, 10):
                old = f"octal {int(text, 8)}" if octal else "a string"
                raise AmbiguousNumberError(
                    None, None, f"{text}: a number with a leading zero is {old} in YAML 1.1 "
                    f"and {int(text, 10)} in YAML 1.2; write it without the zero (or "
                    f"0o{digits.lstrip('0')} for octal)", node.start_mark)
        return int(text, 0) if digits[:2] in ("0x", "0o") else int(text)


class _Loader(_Yaml12, yaml.SafeLoader):
    """The Python parser with _Yaml12."""


def _yaml12(loader: Any) -> None:
    loader.add_constructor(_INT, _Yaml12.construct_yaml_int)
    loader.add_implicit_resolver(  # YAML 1.2 core: decimal, 0o octal, 0x hexadecimal
        _INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
    loader.add_implicit_resolver(  # YAML 1.2 core floats, exponent without a dot included
        _FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                           r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
        list("-+0123456789."))


_yaml12(_Loader)

# libyaml's parser (PyYAML's C extension, in its wheels) reads a 1 MB document 30 times
# faster than the Python one; it runs with the same resolvers and constructors (Python
# code). Its syntax-error messages differ, so a document it cannot parse is parsed again
# by the Python parser, whose message (tested, documented) is the one given.
_CLoader: Any = None
if getattr(yaml, "CSafeLoader", None) is not None:
    _CLoader = type("_CLoader", (_Yaml12, yaml.CSafeLoader), {})
    _yaml12(_CLoader)


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
    is_map, expect_key, key, index = frame[:4]
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
    """TooDeepError for a document deeper than MAX_DEPTH, with more than MAX_NODES nodes
    once its aliases are expanded (a "billion laughs" file: ten lines whose aliases of
    aliases stand for 10^9 nodes, which a later walk would expand), or with a recursive
    alias. Reads the parser's event stream, which is iterative, before the (recursive)
    composer sees the document, so no RecursionError can happen. libyaml's events where
    PyYAML has it (see _CLoader); where it fails (a syntax error, or its own nesting
    limit) the Python parser's, whose errors are the ones given."""
    if _CLoader is not None:
        try:
            _check_events(yaml.parse(text, Loader=_CLoader))
            return
        except yaml.YAMLError:
            pass
    _check_events(yaml.parse(text, Loader=_Loader))


def _check_events(events: Any) -> None:
    """check_shape over one parser's `events`."""
    stack: list[list[Any]] = []  # [is_map, expect_key, key, index, anchor, expanded size]
    sizes: dict[str, int] = {}  # expanded node count of each anchor
    total = 0
    for event in events:
        size = _event_size(event, stack, sizes)
        total += size
        if total > MAX_NODES:
            raise TooDeepError(_path(stack), f"more than {MAX_NODES:,} YAML nodes (aliases "
                               "expanded); a scenario has a few hundred")
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise TooDeepError(_path(stack), f"nested deeper than {MAX_DEPTH} levels; "
                                   "a scenario nests at most 6")
            stack.append([isinstance(event, yaml.MappingStartEvent), True, None, 0,
                          event.anchor, 1])
        elif isinstance(event, yaml.CollectionEndEvent):
            frame = stack.pop()
            if frame[4] is not None:
                sizes[frame[4]] = frame[5]
            if stack:
                stack[-1][5] += frame[5]
                _advance(stack[-1], None)
        elif isinstance(event, (yaml.AliasEvent, yaml.ScalarEvent)) and stack:
            stack[-1][5] += size
            _advance(stack[-1], event.value if isinstance(event, yaml.ScalarEvent) else None)


def _event_size(event: Any, stack: list[list[Any]], sizes: dict[str, int]) -> int:
    """Nodes `event` adds to the expanded document: an alias its anchor's whole size (a
    TooDeepError when the anchor is a collection still open: a cycle), others 1."""
    if isinstance(event, yaml.AliasEvent):
        if any(f[4] == event.anchor for f in stack):
            raise TooDeepError(_path(stack), f"alias *{event.anchor} refers to a "
                               "collection that contains it (a cycle)")
        return sizes.get(event.anchor, 1)
    if isinstance(event, yaml.ScalarEvent):
        if event.anchor is not None:
            sizes[event.anchor] = 1
        return 1
    return 1 if isinstance(event, yaml.CollectionStartEvent) else 0


def load_yaml_text(text: str) -> Any:
    """Parse YAML text with the project's loader (safe, with exponent floats). Raises
    TooDeepError (see `check_shape`) before composing a document it cannot bound, and
    ValueError for an integer too long to convert."""
    check_shape(text)
    if _CLoader is None:
        return yaml.load(text, Loader=_Loader)
    try:
        return yaml.load(text, Loader=_CLoader)
    except (yaml.scanner.ScannerError, yaml.parser.ParserError, yaml.composer.ComposerError,
            yaml.reader.ReaderError):
        return yaml.load(text, Loader=_Loader)  # the Python parser's message (or the same)


def read_yaml_file(path: Path, source: str | None = None) -> dict[str, Any]:
    """The mapping at the top of a YAML file; InputError for every way it can be unusable.

    `source` is how messages name the file (default: the path as given).
    """
    src = source or str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(src, "", f"cannot read file ({exc.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(src, "", f"larger than {MAX_FILE_BYTES:,} bytes; a scenario or "
                         "profile is a few kB (the largest bundled one is 10 kB)")
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
    except AmbiguousNumberError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(src, where, str(exc.problem)) from None
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
    override_steps(key)  # list indices well formed
    try:
        value = load_yaml_text(text) if text.strip() else ""
    except TooDeepError as exc:
        where = key + (f"{exc.key}" if exc.key.startswith("[") else f".{exc.key}" if exc.key
                       else "")
        raise InputError("--set", where, exc.message) from None
    except AmbiguousNumberError as exc:
        raise InputError("--set", key, str(exc.problem)) from None
    except (yaml.YAMLError, ValueError):
        value = text
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A deep copy of `data` with each `key=value` override set (creating mappings as needed;
    `a.b[0].c` reaches into lists: config.override_path)."""
    out = copy.deepcopy(data)
    for item in overrides:
        parts, value = parse_override(item)
        set_at(out, ".".join(parts), value)
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
